// Command judge-bench measures yes/no judging with prefix reuse (the torch
// backend's Score: the shared (question, response) prefix is prefilled once
// and the criteria run as one batch after it) against a naive full forward
// pass per criterion (ScoreNaive), on the same checkpoint, and prints the
// speed-up:
//
//	go run ./bench/judge -preset small -response-words 300 -criteria 4 -reps 5
//
// Without -model it writes a random checkpoint of -preset with model.Init.
// The prompts are the real judge_yesno role prompt (stages/prompts). The Go
// benchmark BenchmarkYesNo in this directory runs the same workload.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/backend"
	"github.com/evolm/evolm/model/torchbe"
	"github.com/evolm/evolm/stages/prompts"
)

type config struct {
	model, preset  string
	responseWords  int
	criteria, reps int
	requests       int
	threads        int
}

func main() {
	var cfg config
	flag.StringVar(&cfg.model, "model", "", "checkpoint directory (default: a random one of -preset)")
	flag.StringVar(&cfg.preset, "preset", "small", "model.Init preset when -model is empty: tiny or small")
	flag.IntVar(&cfg.responseWords, "response-words", 300, "words in the judged response")
	flag.IntVar(&cfg.criteria, "criteria", 4, "criteria per rubric")
	flag.IntVar(&cfg.requests, "requests", 4, "(response, rubric) requests per repetition")
	flag.IntVar(&cfg.reps, "reps", 3, "timed repetitions of each method")
	flag.IntVar(&cfg.threads, "threads", 0, "libtorch threads (0: default)")
	flag.Parse()
	if err := run(context.Background(), cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "judge-bench:", err)
		os.Exit(1)
	}
}

// workload builds yes/no score requests from the judge_yesno prompt.
func workload(requests, responseWords, criteria int) ([]backend.ScoreRequest, error) {
	set, err := prompts.Default()
	if err != nil {
		return nil, err
	}
	words := strings.Fields("the answer works through the problem step by step and checks each intermediate value before stating the final result clearly")
	var resp strings.Builder
	for i := 0; i < responseWords; i++ {
		if i > 0 {
			resp.WriteByte(' ')
		}
		resp.WriteString(words[i%len(words)])
	}
	cs := make([]prompts.Criterion, criteria)
	for k := range cs {
		cs[k] = prompts.Criterion{Criterion: fmt.Sprintf("The response states the final numeric result %d and explains how it was obtained.", k), Weight: 1}
	}
	reqs := make([]backend.ScoreRequest, requests)
	for i := range reqs {
		prefix, suffixes, err := set.JudgeYesNo(fmt.Sprintf("Question %d: what is 17 times 23, and why?", i), resp.String(), cs)
		if err != nil {
			return nil, err
		}
		reqs[i] = backend.ScoreRequest{ID: fmt.Sprint(i), Prefix: prefix, Suffixes: suffixes, Candidates: prompts.DefaultYesNo.Candidates()}
	}
	return reqs, nil
}

// load opens the checkpoint, writing a random one first when dir is empty.
func load(dir, preset string, threads int, tmp string) (*torchbe.Model, error) {
	if dir == "" {
		dir = tmp
		if _, err := model.Init(model.InitOptions{Arch: "qwen3", Preset: preset, Seed: 1, OutDir: dir}); err != nil {
			return nil, err
		}
	}
	return torchbe.Load(torchbe.Options{Dir: dir, Threads: threads})
}

type scoreFunc func(context.Context, []backend.ScoreRequest) ([]backend.ScoreResponse, error)

// timeIt runs f once to warm up, then reps times, and returns the mean.
func timeIt(ctx context.Context, f scoreFunc, reqs []backend.ScoreRequest, reps int) (time.Duration, error) {
	if _, err := f(ctx, reqs); err != nil {
		return 0, err
	}
	start := time.Now()
	for range reps {
		if _, err := f(ctx, reqs); err != nil {
			return 0, err
		}
	}
	return time.Since(start) / time.Duration(reps), nil
}

func run(ctx context.Context, cfg config, w io.Writer) error {
	tmp, err := os.MkdirTemp("", "judge-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	m, err := load(cfg.model, cfg.preset, cfg.threads, tmp)
	if err != nil {
		return err
	}
	defer m.Close()
	reqs, err := workload(cfg.requests, cfg.responseWords, cfg.criteria)
	if err != nil {
		return err
	}
	prefixTok := len(m.Tokenizer().Encode(reqs[0].Prefix))
	suffixTok := len(m.Tokenizer().Encode(reqs[0].Suffixes[0]))
	naive, err := timeIt(ctx, m.ScoreNaive, reqs, cfg.reps)
	if err != nil {
		return err
	}
	reuse, err := timeIt(ctx, m.Score, reqs, cfg.reps)
	if err != nil {
		return err
	}
	n := float64(cfg.requests * cfg.criteria)
	fmt.Fprintf(w, "model %s (%d parameters): %d requests × %d criteria, prefix ≈ %d tokens, suffix ≈ %d tokens\n",
		m.ID(), m.LM().Config().NumParams(), cfg.requests, cfg.criteria, prefixTok, suffixTok)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "method\tms/request\tcriteria/s\tspeed-up\t\n")
	fmt.Fprintf(tw, "naive forward per criterion\t%.1f\t%.1f\t1.00\t\n", float64(naive.Milliseconds())/float64(cfg.requests), n/naive.Seconds())
	fmt.Fprintf(tw, "prefix reuse\t%.1f\t%.1f\t%.2f\t\n", float64(reuse.Milliseconds())/float64(cfg.requests), n/reuse.Seconds(), naive.Seconds()/reuse.Seconds())
	return tw.Flush()
}
