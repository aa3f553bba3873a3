package torchbe

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/model/modeltest"
	"github.com/evolm/evolm/model/torch"
	"github.com/evolm/evolm/serving/backend"
)

// tiny loads a tiny random Qwen3 checkpoint written by model.Init.
func tiny(t *testing.T) *Model {
	t.Helper()
	dir := t.TempDir()
	modeltest.InitTiny(t, dir, 7)
	m, err := Load(Options{Dir: dir, ModelID: "tiny", Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

func seed(s int64) *int64 { return &s }

func TestTorchBackend(t *testing.T) {
	m := tiny(t)
	ctx := context.Background()
	live := torch.Live()

	t.Run("score with prefix reuse equals a forward pass per suffix", func(t *testing.T) {
		reqs := []backend.ScoreRequest{
			{ID: "a", Prefix: "Question: what is 2+2?\nResponse: 4\n\n", Suffixes: []string{
				"Criterion: says 4\nAnswer:", "Criterion: explains the addition step by step\nAnswer:", "Criterion: short\nAnswer:"},
				Candidates: []string{" yes", " no"}},
			{ID: "b", Prefix: "x", Suffixes: []string{"y"}, Candidates: []string{" yes", " no", "yes"}},
		}
		got, err := m.Score(ctx, reqs)
		if err != nil {
			t.Fatal(err)
		}
		want := scoreVsNaive(t, ctx, m, reqs, got, "")
		// The batched naive pass (right-padded rows) equals one pass per suffix.
		for i, r := range reqs {
			for k, suf := range r.Suffixes {
				one := r
				one.Suffixes = []string{suf}
				single, err := m.ScoreNaive(ctx, []backend.ScoreRequest{one})
				if err != nil {
					t.Fatal(err)
				}
				if d := cmp.Diff(want[i].LogProbs[k], single[0].LogProbs[0], cmp.Comparer(func(a, b float64) bool { return math.Abs(a-b) < 1e-5 })); d != "" {
					t.Errorf("request %s suffix %d: batched vs single ScoreNaive (-batched +single):\n%s", r.ID, k, d)
				}
			}
		}
		if len(got[0].LogProbs) != 3 || len(got[0].LogProbs[0]) != 2 {
			t.Fatalf("shape %d×%d, want 3×2", len(got[0].LogProbs), len(got[0].LogProbs[0]))
		}
		for _, v := range got[0].LogProbs[0] {
			if !(v < 0) || math.IsInf(v, 0) {
				t.Errorf("log-prob %v, want finite < 0", v)
			}
		}
	})

	t.Run("score candidate of two tokens fails its row only", func(t *testing.T) {
		got, err := m.Score(ctx, []backend.ScoreRequest{
			{ID: "bad", Prefix: "p", Suffixes: []string{"s"}, Candidates: []string{" yes please"}},
			{ID: "ok", Prefix: "p", Suffixes: []string{"s"}, Candidates: []string{" yes"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if got[0].Failure == nil || got[0].Failure.Reason != backend.FailureRejected || !strings.Contains(got[0].Failure.Message, "tokens, want 1") {
			t.Errorf("bad row failure = %v", got[0].Failure)
		}
		if got[1].Failure != nil || len(got[1].LogProbs) != 1 {
			t.Errorf("ok row = %+v", got[1])
		}
	})

	t.Run("seeded samples are reproducible and independent of the batch", func(t *testing.T) {
		sp := backend.Sampling{MaxTokens: 6, Temperature: 1, Seed: seed(11)}
		msgs := []backend.Message{{Role: "user", Content: "Say hi."}}
		one, err := m.Generate(ctx, []backend.GenerateRequest{{ID: "n2", Messages: msgs, N: 2, Sampling: sp, LogProbs: true}})
		if err != nil {
			t.Fatal(err)
		}
		sp2 := sp
		sp2.Seed = seed(12)
		two, err := m.Generate(ctx, []backend.GenerateRequest{
			{ID: "other", Prompt: "unrelated prompt", Sampling: sp},
			{ID: "s0", Messages: msgs, Sampling: sp, LogProbs: true},
			{ID: "s1", Messages: msgs, Sampling: sp2, LogProbs: true},
		})
		if err != nil {
			t.Fatal(err)
		}
		for j, r := range []backend.GenerateResponse{two[1], two[2]} {
			a, b := one[0].Completions[j], r.Completions[0]
			if a.Text != b.Text || !cmp.Equal(a.TokenIDs, b.TokenIDs) {
				t.Errorf("sample %d: n=2 request gave %q %v, single request %q %v", j, a.Text, a.TokenIDs, b.Text, b.TokenIDs)
			}
			if a.Tokens != len(a.TokenIDs) || len(a.LogProbs) != a.Tokens {
				t.Errorf("sample %d: tokens %d, ids %d, log-probs %d", j, a.Tokens, len(a.TokenIDs), len(a.LogProbs))
			}
		}
		if one[0].PromptTokens <= 0 || one[0].Model != "tiny" {
			t.Errorf("prompt tokens %d model %q", one[0].PromptTokens, one[0].Model)
		}
	})

	t.Run("log-probs of a sampled completion match the sampler's", func(t *testing.T) {
		g, err := m.Generate(ctx, []backend.GenerateRequest{{ID: "g", Prompt: "Once upon a time", Sampling: backend.Sampling{MaxTokens: 5, Temperature: 1, Seed: seed(3)}, LogProbs: true}})
		if err != nil {
			t.Fatal(err)
		}
		c := g[0].Completions[0]
		lp, err := m.LogProbs(ctx, []backend.LogProbRequest{{ID: "l", PromptTokenIDs: m.Tokenizer().Encode("Once upon a time"), CompletionTokenIDs: c.TokenIDs}})
		if err != nil {
			t.Fatal(err)
		}
		for i := range c.LogProbs {
			if d := math.Abs(c.LogProbs[i].LogProb - lp[0].LogProbs[i].LogProb); d > 1e-4 {
				t.Errorf("token %d: sampler %v, log-prob pass %v", i, c.LogProbs[i].LogProb, lp[0].LogProbs[i].LogProb)
			}
		}
	})

	t.Run("greedy top log-probs start with the sampled token", func(t *testing.T) {
		g, err := m.Generate(ctx, []backend.GenerateRequest{{ID: "t", Prompt: "Hello", Sampling: backend.Sampling{MaxTokens: 3}, TopLogProbs: 5}})
		if err != nil {
			t.Fatal(err)
		}
		for i, tl := range g[0].Completions[0].LogProbs {
			if len(tl.Top) != 5 || tl.Top[0].Token != tl.Token || math.Abs(tl.Top[0].LogProb-tl.LogProb) > 1e-4 {
				t.Errorf("position %d: token %q %v, top %+v", i, tl.Token, tl.LogProb, tl.Top)
			}
		}
	})

	t.Run("too long a request fails its row only", func(t *testing.T) {
		g, err := m.Generate(ctx, []backend.GenerateRequest{
			{ID: "long", Prompt: "hi", Sampling: backend.Sampling{MaxTokens: 1 << 20}},
			{ID: "fine", Prompt: "hi", Sampling: backend.Sampling{MaxTokens: 2}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if g[0].Failure == nil || g[0].Failure.Reason != backend.FailureRejected || g[0].Completions != nil {
			t.Errorf("long row = %+v", g[0])
		}
		if g[1].Failure != nil || len(g[1].Completions) != 1 {
			t.Errorf("fine row = %+v", g[1])
		}
	})

	if got := torch.Live(); got != live {
		t.Errorf("live tensors %d after the calls, %d before", got, live)
	}
}

// scoreVsNaive checks got, Score's answer to reqs, against ScoreNaive's
// within 1e-4, and returns the naive answer.
func scoreVsNaive(t *testing.T, ctx context.Context, m *Model, reqs []backend.ScoreRequest, got []backend.ScoreResponse, what string) []backend.ScoreResponse {
	t.Helper()
	naive, err := m.ScoreNaive(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(naive, got, cmp.Comparer(func(a, b float64) bool { return math.Abs(a-b) < 1e-4 })); d != "" {
		t.Errorf("%sScore vs ScoreNaive (-naive +score):\n%s", what, d)
	}
	return naive
}

// scoreVsAlone checks each request's log-probs in got, Score's answer to
// reqs in one call, against Score's answer to that request alone, within
// tol.
func scoreVsAlone(t *testing.T, ctx context.Context, m *Model, reqs []backend.ScoreRequest, got []backend.ScoreResponse, tol float64, what string) {
	t.Helper()
	for i, r := range reqs {
		alone, err := m.Score(ctx, []backend.ScoreRequest{r})
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(alone[0].LogProbs, got[i].LogProbs, cmp.Comparer(func(a, b float64) bool { return math.Abs(a-b) <= tol })); d != "" {
			t.Errorf("%srequest %s: log-probs alone vs in the call (-alone +call):\n%s", what, r.ID, d)
		}
	}
}

// TestScoreMatchesHF checks the prefix-reusing Scorer against HF
// transformers: the same checkpoint, the same prompts tokenized by HF
// `tokenizers`, one plain forward pass per suffix.
func TestScoreMatchesHF(t *testing.T) {
	m := tiny(t)
	reqs := []backend.ScoreRequest{
		{ID: "a", Prefix: "You are a judge.\n\n<question>\nWhat is 2+2?\n</question>\n\n<response>\nIt is 4 — four. 😀\n</response>\n\n",
			Suffixes:   []string{"Criterion: Says 4.\n\nDoes the response meet this criterion? Answer yes or no.\nAnswer:", "Criterion: Uses an emoji.\n\nAnswer:"},
			Candidates: []string{" yes", " Yes", "yes", " no", "No"}},
		{ID: "b", Prefix: "<|im_start|>user\n你好<|im_end|>\n", Suffixes: []string{"<|im_start|>assistant\n"}, Candidates: []string{" yes", " no"}},
	}
	got, err := m.Score(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	in := map[string]any{"requests": []map[string]any{}}
	for _, r := range reqs {
		in["requests"] = append(in["requests"].([]map[string]any), map[string]any{"prefix": r.Prefix, "suffixes": r.Suffixes, "candidates": r.Candidates})
	}
	dir := t.TempDir()
	inPath, outPath := filepath.Join(dir, "in.json"), filepath.Join(dir, "out.json")
	b, _ := json.Marshal(in)
	if err := os.WriteFile(inPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	testutil.RunPython(t, "backend_score_reference.py", "--model", m.opt.Dir, "--in", inPath, "--out", outPath)
	var want struct {
		LogProbs  [][][]float64 `json:"logprobs"`
		PromptIDs [][][]int     `json:"prompt_ids"`
	}
	b, err = os.ReadFile(outPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	maxDiff := 0.0
	for i := range reqs {
		for k := range reqs[i].Suffixes {
			if ids := m.Tokenizer().Encode(reqs[i].Prefix + reqs[i].Suffixes[k]); !cmp.Equal(ids, want.PromptIDs[i][k]) {
				t.Errorf("request %d suffix %d: token ids differ from HF tokenizers", i, k)
			}
			for j, w := range want.LogProbs[i][k] {
				maxDiff = math.Max(maxDiff, math.Abs(w-got[i].LogProbs[k][j]))
			}
		}
	}
	t.Logf("largest |log-prob difference| against HF: %.2e", maxDiff)
	if maxDiff > 1e-4 {
		t.Errorf("largest log-prob difference against HF %.2e > 1e-4", maxDiff)
	}

	// Among the candidates (the judge's requests): HF's log-probs
	// renormalized over the distinct candidates, from the candidates' rows
	// of the head alone when every request asks so, and from the full head
	// renormalized when only some do.
	for _, among := range [][]bool{{true, true}, {true, false}} {
		for i := range reqs {
			reqs[i].AmongCandidates = among[i]
		}
		before := candidateHeads.Load()
		got, err = m.Score(context.Background(), reqs)
		if err != nil {
			t.Fatal(err)
		}
		if n, want := candidateHeads.Load()-before, map[bool]int64{true: 1, false: 0}[among[1]]; n != want {
			t.Errorf("among the candidates %v: %d heads over the candidates' rows, want %d", among, n, want)
		}
		maxDiff = 0
		for i := range reqs {
			for k := range reqs[i].Suffixes {
				w := slices.Clone(want.LogProbs[i][k])
				if among[i] {
					backend.AmongCandidates(reqs[i].Candidates, w)
				}
				for j := range w {
					maxDiff = math.Max(maxDiff, math.Abs(w[j]-got[i].LogProbs[k][j]))
				}
			}
		}
		t.Logf("among the candidates %v: largest |log-prob difference| against HF: %.2e", among, maxDiff)
		if maxDiff > 1e-4 {
			t.Errorf("among the candidates %v: largest log-prob difference against HF %.2e > 1e-4", among, maxDiff)
		}
	}
}

// TestScoreSharesPrefix checks that requests with the same Prefix share one
// prefill of it, also past a request in between that is prefilled alone,
// and that neither that nor the head's
// batching across requests changes a result beyond float rounding: every
// request's log-probs are within 1e-6 of scoring it alone, whatever its
// neighbours, with the criteria in one batch or in batches of 2, and
// within 1e-4 of the naive forward passes.
func TestScoreSharesPrefix(t *testing.T) {
	m := tiny(t)
	ctx := context.Background()
	resp := "Question: what is 17 times 23?\n\nResponse: 17 × 23 = 391, since 17 × 20 = 340 and 17 × 3 = 51.\n\n"
	reqs := []backend.ScoreRequest{
		// All criteria start alike: the shared tokens reach into them.
		{ID: "r1", Prefix: resp, Suffixes: []string{"Criterion: The response states 391.\nAnswer:", "Criterion: The response shows the steps.\nAnswer:", "Criterion: The response is short.\nAnswer:"}},
		{ID: "r2", Prefix: resp, Suffixes: []string{"Criterion: Correct product.\nAnswer:", "Criterion: Mentions 340 and 51, the partial products, and adds them.\nAnswer:"}},
		{ID: "other", Prefix: "Question: name a prime.\n\nResponse: 7\n\n", Suffixes: []string{"Criterion: Is prime.\nAnswer:"}},
		{ID: "r3", Prefix: resp, Suffixes: []string{"Criterion: Uses no emoji.\nAnswer:"}},
		{ID: "r4", Prefix: resp, Suffixes: []string{"Criterion: Answers in one line.\nAnswer:", "Criterion: Gives 391.\nAnswer:"}},
	}
	for i := range reqs {
		reqs[i].Candidates = []string{" yes", " no"}
	}
	// The 9 criteria get one head at max batch 64. At 2 the tail batches
	// have 2 and 1 rows (r1), 2 (r2), 1 (other), 1 (r3) and 2 (r4), and a
	// batch that would take the queue past 2 rows flushes it first: heads
	// of 2 | 1 | 2 | 1+1 | 2 rows, 5 in all.
	heads := map[int]int64{64: 1, 2: 5}
	for _, mb := range []int{64, 2} {
		m.opt.MaxBatch = mb
		m.forgetKept() // the counts below are a fresh call's
		before, beforeHeads := prefixPrefills.Load(), headCalls.Load()
		got, err := m.Score(ctx, reqs)
		if err != nil {
			t.Fatal(err)
		}
		// r1 r2 r3 r4 share one prefill; other, which neither neighbour
		// shares, is prefilled with its extra tokens and leaves it in place.
		if n := prefixPrefills.Load() - before; n != 2 {
			t.Errorf("max batch %d: %d prefix prefills for 5 requests, want 2", mb, n)
		}
		if n := headCalls.Load() - beforeHeads; n != heads[mb] {
			t.Errorf("max batch %d: %d heads for 9 criteria, want %d", mb, n, heads[mb])
		}
		what := fmt.Sprintf("max batch %d: ", mb)
		scoreVsNaive(t, ctx, m, reqs, got, what)
		scoreVsAlone(t, ctx, m, reqs, got, 1e-6, what)
	}
	m.opt.MaxBatch = 64

	// Among the candidates: alone against in the call within 1e-6, against
	// the naive passes within 1e-4; a request whose head is shared with one
	// over the vocabulary (the full head, renormalized) within 1e-5 of it
	// alone.
	for i := range reqs {
		reqs[i].AmongCandidates = true
	}
	got, err := m.Score(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	scoreVsNaive(t, ctx, m, reqs, got, "among the candidates: ")
	scoreVsAlone(t, ctx, m, reqs, got, 1e-6, "among the candidates: ")
	mixed := slices.Clone(reqs)
	mixed[2].AmongCandidates = false
	inMixed, err := m.Score(ctx, mixed)
	if err != nil {
		t.Fatal(err)
	}
	// Alone, every request is among the candidates; compare all but the
	// one over the vocabulary.
	scoreVsAlone(t, ctx, m, slices.Delete(slices.Clone(reqs), 2, 3), slices.Delete(inMixed, 2, 3), 1e-5, "among the candidates, in a mixed call: ")
}
