// Command judge-bench measures yes/no judging with prefix reuse (the torch
// backend's Score: the shared (question, response) prefix is prefilled once
// and the criteria run as one batch after it) against the same scoring
// without prefix reuse (ScoreNaive: full forward passes over question,
// response and criterion), on the same checkpoint, and prints the speed-up:
//
//	go run ./bench/judge -preset small -threads 1 -response-words 300 -criteria 4 -reps 3 -runs 3
//
// -rubrics N sends N requests per response, each another rubric's criteria
// over the same (question, response), consecutively as the judge stage
// orders them: the rubric phase scores both answers of a pair under each of
// its n = 8 candidate rubrics (-rubrics 8), the policy phase each response
// under its group's one rubric (-rubrics 1, the default). Score prefills a
// response once for all its rubrics. -questions N has consecutive
// responses answer N questions in turn, as a GRPO group's responses answer
// one (-questions 1) and a pair's two answers one in the rubric phase; by
// default each response answers a question of its own. -question-words N
// adds N words of context to each question (a Tulu 3 prompt is often a
// paragraph), which responses to one question share.
//
// Fairness: both sides run the same full prompts' ids (prefix reuse
// tokenizes the shared Prefix's text once, tokenizer.EncodePrefixed, which
// gives the ids of each prompt encoded whole; the naive side encodes each
// whole), batch the criteria of a request the same way (up to the backend's
// MaxBatch rows, right-padded, per forward pass), pack consecutive requests'
// rows into one pass by the same rule (up to -pack-tokens positions: the
// backend's PackTokens, whose default lets the default workload's packed
// rows share a pass and keeps each naive request's 1,560 positions in a pass
// of their own, the faster way for them on a CPU) and run the same head, so
// the one difference measured is the prefix's reuse. The requests ask, as
// the judge stage does, for log-probs among the candidates, which needs the
// head's rows for the candidates only; -vocab asks for log-probs over the
// whole vocabulary, a full head and log-softmax per criterion on both sides.
// Before printing anything, every run checks that the two sides' candidate
// log-probs agree within -tol (absolute) and fails otherwise. Each of -runs
// runs times both sides (the mean of -reps calls after a warm-up call, the
// two sides' calls interleaved so that a drift in the machine's speed moves
// both alike); the speed-up is printed as min / median / max over the runs, with the load
// average before and after, and beside it the token ratio: the tokens the
// naive side runs over those prefix reuse runs, which bounds the speed-up
// that skipping tokens can give, and the ratio of the attention's (query,
// key) pairs, the bound where attention dominates (the tiny preset).
//
// -serve measures the same requests through `evolm serve` on loopback, all
// sent at once by the openai client (its /v1/evolm/score extension), as
// the judge stage sends them to a judge server: each request its own engine
// call (--coalesce 1) against requests coalesced into engine calls with
// those of one prefix next to each other (backend.ScoreBatcher), so that
// the rubrics of one response share its prefill over HTTP too.
//
// Without -model it writes a random checkpoint of -preset with model.Init:
// tiny and small, whose 64- and 256-wide layers make attention and the cost
// around each op a large share, or a published Qwen3 size such as
// qwen3-1.7b, the paper's judge (28 layers 2,048 wide; 6.9 GB of float32
// weights, a minute a request on 2 cores, so -responses 1 -reps 1), where
// the linear layers dominate and the speed-up nears the token ratio.
// The prompts are the real judge_yesno role prompt (stages/prompts). The Go
// benchmark BenchmarkYesNo in this directory runs the same workload.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http/httptest"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/evolm/evolm/bench/internal/stat"
	"github.com/evolm/evolm/method/prompts"
	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/torch"
	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/serving/openai"
	"github.com/evolm/evolm/serving/server"
	"github.com/evolm/evolm/serving/torchbe"
)

type config struct {
	model, preset string
	shape
	reps       int
	threads    int
	maxBatch   int
	packTokens int
	runs       int
	tol        float64
	vocab      bool
	serve      bool
}

func main() {
	var cfg config
	flag.StringVar(&cfg.model, "model", "", "checkpoint directory (default: a random one of -preset)")
	flag.StringVar(&cfg.preset, "preset", "small", "model.Init preset when -model is empty: tiny, small, or a published size such as qwen3-1.7b (the paper's judge)")
	flag.IntVar(&cfg.responseWords, "response-words", 300, "words in the judged response")
	flag.IntVar(&cfg.questionWords, "question-words", 0, "words of context added to each question (0: a one-line question)")
	flag.IntVar(&cfg.criteria, "criteria", 4, "criteria per rubric")
	flag.IntVar(&cfg.responses, "responses", 4, "responses per call")
	flag.IntVar(&cfg.questions, "questions", 0, "distinct questions the responses answer, in turn (0: one per response; 1: one question, as a GRPO group's responses in the policy phase)")
	flag.IntVar(&cfg.rubrics, "rubrics", 1, "rubrics per response: one request each, consecutive in the call (1: the policy phase; 8: the rubric phase)")
	flag.IntVar(&cfg.reps, "reps", 3, "timed calls of each method per run (their mean is the run's time)")
	flag.IntVar(&cfg.runs, "runs", 3, "runs; the speed-up is shown as min / median / max over them")
	flag.Float64Var(&cfg.tol, "tol", defaultTol, "largest allowed absolute difference between the two sides' log-probs")
	flag.IntVar(&cfg.threads, "threads", 0, "libtorch threads (0: default)")
	flag.BoolVar(&cfg.vocab, "vocab", false, "ask for log-probs over the whole vocabulary (a full head and log-softmax per criterion) instead of among the candidates, as the judge stage asks")
	flag.BoolVar(&cfg.serve, "serve", false, "measure through `evolm serve` on loopback instead: the openai client sends every request at once, and the server runs each as its own engine call (--coalesce 1) against coalescing them into grouped calls (backend.ScoreBatcher, up to -max-batch requests)")
	flag.IntVar(&cfg.packTokens, "pack-tokens", 0, "positions per pass that packs consecutive requests' rows, on both sides (the backend's PackTokens; 0: its default, negative: none)")
	flag.IntVar(&cfg.maxBatch, "max-batch", 64, "criteria per forward pass, on both sides (the backend's MaxBatch)")
	mmap := flag.Int("mmap-threshold", 0, "glibc's M_MMAP_THRESHOLD in bytes, as `evolm` sets it (torch.mmap_threshold, default 1MiB there); 0 keeps glibc's adaptive default")
	flag.Parse()
	if *mmap > 0 {
		if err := torch.SetMmapThreshold(*mmap); err != nil {
			fmt.Fprintln(os.Stderr, "judge-bench:", err)
			os.Exit(2)
		}
	}
	if err := run(context.Background(), cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "judge-bench:", err)
		os.Exit(1)
	}
}

// shape is a workload's shape: its flags.
type shape struct {
	responses, questions, rubrics int
	questionWords, responseWords  int
	criteria                      int
	vocab                         bool
}

// workload builds yes/no score requests from the judge_yesno prompt:
// responses × rubrics requests, those of one response consecutive, asking
// for log-probs among the candidates (as the judge stage does) or, with
// vocab, over the whole vocabulary.
func workload(w shape) ([]backend.ScoreRequest, error) {
	set, err := prompts.Default()
	if err != nil {
		return nil, err
	}
	text := func(words []string, n int) string {
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(words[i%len(words)])
		}
		return b.String()
	}
	resp := text(strings.Fields("the answer works through the problem step by step and checks each intermediate value before stating the final result clearly"), w.responseWords)
	background := ""
	if w.questionWords > 0 {
		background = " Context: " + text(strings.Fields("a farmer sells crates of apples at the market and records every sale in a ledger"), w.questionWords)
	}
	var reqs []backend.ScoreRequest
	for i := range w.responses {
		for r := range w.rubrics {
			cs := make([]prompts.Criterion, w.criteria)
			for k := range cs {
				cs[k] = prompts.Criterion{Criterion: fmt.Sprintf("The response states the final numeric result %d and explains how it was obtained.", r*w.criteria+k), Weight: 1}
			}
			q, answer := i, resp
			if w.questions > 0 { // consecutive responses answer one question, each its own answer
				q, answer = i/((w.responses+w.questions-1)/w.questions), fmt.Sprintf("Answer %d: %s", i, answer)
			}
			prefix, suffixes, err := set.JudgeYesNo(fmt.Sprintf("Question %d: what is 17 times 23, and why?%s", q, background), answer, cs)
			if err != nil {
				return nil, err
			}
			reqs = append(reqs, backend.ScoreRequest{ID: fmt.Sprintf("%d/%d", i, r), Prefix: prefix, Suffixes: suffixes, Candidates: prompts.DefaultYesNo.Candidates(), AmongCandidates: !w.vocab})
		}
	}
	return reqs, nil
}

// load opens the checkpoint, writing a random one first when dir is empty.
// oneThread loads it as `evolm serve` does (torchbe.Options.OneThread).
func load(dir, preset string, threads, maxBatch, packTokens int, oneThread bool, tmp string) (*torchbe.Model, error) {
	if dir == "" {
		dir = tmp
		if _, err := model.Init(model.InitOptions{Arch: "qwen3", Preset: preset, Seed: 1, OutDir: dir}); err != nil {
			return nil, err
		}
	}
	return torchbe.Load(torchbe.Options{Dir: dir, Threads: threads, MaxBatch: maxBatch, PackTokens: packTokens, OneThread: oneThread})
}

type scoreFunc func(context.Context, []backend.ScoreRequest) ([]backend.ScoreResponse, error)

// defaultTol bounds |log-prob(prefix reuse) − log-prob(naive)|: both are
// fp32 forward passes over the same tokens that differ only in how the
// attention over the prefix is split (cached keys vs one pass).
const defaultTol = 1e-5

// timeBoth runs a and b once each to warm up, then reps calls of each,
// interleaved (a b, then b a, and so on), and returns each one's mean call
// time and its warm-up call's responses. Interleaving puts both sides in
// the same stretch of time, so that a slow drift in the machine's speed (a
// VM's neighbours) moves both alike instead of the ratio.
func timeBoth(ctx context.Context, a, b scoreFunc, reqs []backend.ScoreRequest, reps int) (ta, tb time.Duration, outA, outB []backend.ScoreResponse, err error) {
	if outA, err = a(ctx, reqs); err != nil {
		return 0, 0, nil, nil, err
	}
	if outB, err = b(ctx, reqs); err != nil {
		return 0, 0, nil, nil, err
	}
	call := func(f scoreFunc, total *time.Duration) error {
		start := time.Now()
		_, err := f(ctx, reqs)
		*total += time.Since(start)
		return err
	}
	for i := range reps {
		first, second, t1, t2 := a, b, &ta, &tb
		if i%2 == 1 {
			first, second, t1, t2 = b, a, &tb, &ta
		}
		if err := call(first, t1); err != nil {
			return 0, 0, nil, nil, err
		}
		if err := call(second, t2); err != nil {
			return 0, 0, nil, nil, err
		}
	}
	n := time.Duration(max(reps, 1))
	return ta / n, tb / n, outA, outB, nil
}

// tokens counts the tokens each side runs through the model for reqs: the
// naive side every full prompt; prefix reuse, per request, its shared tokens
// after those it takes from the call's cache (a Prefix once per run of
// consecutive requests with the same Prefix, the beginning it shares with
// its neighbours once), and each suffix's tail, as the torch backend's Score
// splits and plans them (torchbe.SplitScore, torchbe.PlanPrefixes).
func tokens(encode func(string) []int, reqs []backend.ScoreRequest) (naive, reuse int) {
	return work(encode, reqs, func(from, to int) int { return to - from })
}

// pairs counts the (query, key) pairs each side's attention needs for reqs,
// split as tokens splits them: a query at position i of a full prompt
// attends to the i+1 keys up to it, and a tail's query to the shared
// tokens and its own tail only. Its ratio bounds what skipping work can
// give where attention dominates (a narrow model over long prompts), as
// the token ratio does where the linear layers do.
func pairs(encode func(string) []int, reqs []backend.ScoreRequest) (naive, reuse int) {
	return work(encode, reqs, func(from, to int) int { return (to*(to+1) - from*(from+1)) / 2 }) // Σ (i+1), i in [from, to)
}

// work sums cost(from, to) over the positions [from, to) each side runs:
// every full prompt whole on the naive side; with prefix reuse, as Score
// splits a request (torchbe.SplitScore) and runs its Prefix tokens
// (torchbe.PlanPrefixesFrom, from the prefix the previous call kept), the
// shared tokens after those it takes from the cache once per request, and
// each suffix's tail.
func work(encode func(string) []int, reqs []backend.ScoreRequest, cost func(from, to int) int) (naive, reuse int) {
	fulls := make([][][]int, len(reqs))
	splits := make([]int, len(reqs))
	prefixes := make([][]int, len(reqs))
	for i, r := range reqs {
		fulls[i] = make([][]int, len(r.Suffixes))
		for k, suf := range r.Suffixes {
			fulls[i][k] = encode(r.Prefix + suf)
			naive += cost(0, len(fulls[i][k]))
		}
		var p int
		p, splits[i] = torchbe.SplitScore(encode(r.Prefix), fulls[i])
		prefixes[i] = fulls[i][0][:p]
	}
	// Every call after the first starts with the prefix the one before it
	// kept (torchbe.KeptPrefix): the same requests', in a benchmark.
	_, after := torchbe.PlanPrefixesFrom(nil, prefixes)
	kept := after[:min(len(after), torchbe.KeptPrefix)]
	if len(kept) < torchbe.MinPrefixReuse {
		kept = nil
	}
	steps, _ := torchbe.PlanPrefixesFrom(kept, prefixes)
	for i, step := range steps {
		L := splits[i]
		reuse += cost(step.Cached, L)
		for _, f := range fulls[i] {
			reuse += cost(L, len(f))
		}
	}
	return naive, reuse
}

// maxDiff returns the largest absolute difference between two answers'
// log-probs, and an error when they differ in shape, in a failure or by
// more than tol.
func maxDiff(naive, reuse []backend.ScoreResponse, tol float64) (float64, error) {
	if len(naive) != len(reuse) {
		return 0, fmt.Errorf("naive answered %d requests, prefix reuse %d", len(naive), len(reuse))
	}
	d := 0.0
	for i := range naive {
		a, b := naive[i], reuse[i]
		if a.Failure != nil || b.Failure != nil {
			return 0, fmt.Errorf("request %s failed: naive %v, prefix reuse %v", a.ID, a.Failure, b.Failure)
		}
		if len(a.LogProbs) != len(b.LogProbs) {
			return 0, fmt.Errorf("request %s: naive %d suffixes, prefix reuse %d", a.ID, len(a.LogProbs), len(b.LogProbs))
		}
		for k := range a.LogProbs {
			if len(a.LogProbs[k]) != len(b.LogProbs[k]) {
				return 0, fmt.Errorf("request %s suffix %d: naive %d candidates, prefix reuse %d", a.ID, k, len(a.LogProbs[k]), len(b.LogProbs[k]))
			}
			for j, x := range a.LogProbs[k] {
				y := b.LogProbs[k][j]
				if math.IsNaN(x) || math.IsNaN(y) || math.IsInf(x, 0) || math.IsInf(y, 0) {
					return 0, fmt.Errorf("request %s suffix %d candidate %d: log-probs naive %v, prefix reuse %v", a.ID, k, j, x, y)
				}
				d = max(d, math.Abs(x-y))
			}
		}
	}
	if d > tol {
		return d, fmt.Errorf("the two sides' log-probs differ by %.3g (max abs) > %.3g: they did not compute the same thing", d, tol)
	}
	return d, nil
}

func run(ctx context.Context, cfg config, w io.Writer) error {
	if cfg.runs < 1 {
		return fmt.Errorf("-runs %d, want ≥ 1", cfg.runs)
	}
	load0 := stat.LoadAvg()
	tmp, err := os.MkdirTemp("", "judge-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	m, err := load(cfg.model, cfg.preset, cfg.threads, cfg.maxBatch, cfg.packTokens, cfg.serve, tmp)
	if err != nil {
		return err
	}
	defer m.Close()
	if cfg.responses < 1 || cfg.rubrics < 1 || cfg.criteria < 1 {
		return fmt.Errorf("-responses %d, -rubrics %d, -criteria %d: each must be ≥ 1", cfg.responses, cfg.rubrics, cfg.criteria)
	}
	if cfg.questions < 0 || cfg.questionWords < 0 {
		return fmt.Errorf("-questions %d, -question-words %d: each must be ≥ 0", cfg.questions, cfg.questionWords)
	}
	reqs, err := workload(cfg.shape)
	if err != nil {
		return err
	}
	prefixTok := len(m.Tokenizer().Encode(reqs[0].Prefix))
	suffixTok := len(m.Tokenizer().Encode(reqs[0].Suffixes[0]))
	naiveTok, reuseTok := tokens(m.Tokenizer().Encode, reqs)
	naivePairs, reusePairs := pairs(m.Tokenizer().Encode, reqs)
	base, fast := side{"naive (no prefix reuse, same batching)", m.ScoreNaive}, side{"prefix reuse", m.Score}
	if cfg.serve {
		one, stop1, err := served(m, 1, len(reqs))
		if err != nil {
			return err
		}
		defer stop1()
		grouped, stop2, err := served(m, cfg.maxBatch, len(reqs))
		if err != nil {
			return err
		}
		defer stop2()
		base = side{"evolm serve, one engine call per request (--coalesce 1)", one}
		fast = side{fmt.Sprintf("evolm serve, requests coalesced (--coalesce %d)", cfg.maxBatch), grouped}
	}
	var naiveMS, reuseMS, speedup []float64
	worst := 0.0
	for r := range cfg.runs {
		naive, reuse, nOut, rOut, err := timeBoth(ctx, base.f, fast.f, reqs, cfg.reps)
		if err != nil {
			return err
		}
		d, err := maxDiff(nOut, rOut, cfg.tol)
		if err != nil {
			return fmt.Errorf("run %d: %w", r+1, err)
		}
		worst = max(worst, d)
		naiveMS = append(naiveMS, naive.Seconds()*1e3/float64(len(reqs)))
		reuseMS = append(reuseMS, reuse.Seconds()*1e3/float64(len(reqs)))
		speedup = append(speedup, naive.Seconds()/reuse.Seconds())
	}
	load1 := stat.LoadAvg()
	n := float64(cfg.criteria)
	fmt.Fprintf(w, "model %s (%d parameters): %d responses × %d rubrics × %d criteria, prefix ≈ %d tokens, suffix ≈ %d tokens; both sides batch up to %d criteria per forward pass\n",
		m.ID(), m.LM().Config().NumParams(), cfg.responses, cfg.rubrics, cfg.criteria, prefixTok, suffixTok, cfg.maxBatch)
	head := "the candidates' rows of the head, log-probs among the candidates (as the judge stage asks)"
	if cfg.vocab {
		head = "the whole vocabulary's head and log-softmax per criterion (-vocab)"
	}
	fmt.Fprintf(w, "both sides run %s\n", head)
	if cfg.serve {
		fmt.Fprintf(w, "both sides: the openai client sends the %d requests at once to /v1/evolm/score on loopback, and the engine reuses prefixes within each call\n", len(reqs))
	} else {
		fmt.Fprintf(w, "tokens per call: naive %d, prefix reuse %d; token ratio %.2f (what skipping tokens alone can give where the linear layers dominate)\n", naiveTok, reuseTok, float64(naiveTok)/float64(reuseTok))
		fmt.Fprintf(w, "attention (query, key) pairs per call: naive %d, prefix reuse %d; ratio %.2f (the same where attention dominates)\n", naivePairs, reusePairs, float64(naivePairs)/float64(reusePairs))
	}
	fmt.Fprintf(w, "log-probs agree in every run: max abs difference %.3g (tolerance %.3g)\n", worst, cfg.tol)
	fmt.Fprintf(w, "load average (1, 5, 15 min): before %s, after %s; mean of %d calls after a warm-up, the sides interleaved, %d runs\n", load0, load1, cfg.reps, cfg.runs)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "method\tms/request (median)\tcriteria/s (median)\tspeed-up min / median / max\t\n")
	fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t1.00\t\n", base.name, stat.Median(naiveMS), n*1e3/stat.Median(naiveMS))
	fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%s\t\n", fast.name, stat.Median(reuseMS), n*1e3/stat.Median(reuseMS), stat.Spread(speedup, "%.2f"))
	return tw.Flush()
}

// side is one side of the comparison.
type side struct {
	name string
	f    scoreFunc
}

// served serves m with `evolm serve`'s handler on loopback, coalescing up
// to coalesce concurrent requests per engine call, and returns the Score
// of an openai client with inFlight requests in flight through the
// /v1/evolm/score extension, and what stops both.
func served(m *torchbe.Model, coalesce, inFlight int) (scoreFunc, func(), error) {
	// BatchRunners as `evolm serve`'s --engine-calls default.
	h, err := server.NewHandler(server.Config{Generator: m, Model: "judge", MaxBatch: coalesce, BatchRunners: 4, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, nil, err
	}
	srv := httptest.NewServer(h)
	c, err := openai.New(openai.Config{Endpoints: []string{srv.URL + "/v1"}, Model: "judge", MaxInFlight: inFlight, MaxAttempts: 1,
		ScoreAPI: openai.ScoreExtension, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		srv.Close()
		return nil, nil, err
	}
	return c.Score, func() { c.Close(); srv.Close() }, nil
}
