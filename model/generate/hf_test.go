package generate

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/model"
	_ "github.com/evolm/evolm/model/llama"
	"github.com/evolm/evolm/model/modeltest"
	"github.com/evolm/evolm/model/safetensors"
	"github.com/evolm/evolm/model/torch"
)

// Tiny random checkpoints made by transformers itself (scripts/hf_generate.py
// make), shared by the tests of this package.
var (
	ckptMu  sync.Mutex
	ckptDir string
	ckpts   = map[string]string{}
)

type arch struct {
	name string // hf_generate.py --arch
	tied bool
}

var archs = []arch{{"qwen3", true}, {"llama", false}}

func (a arch) String() string { return fmt.Sprintf("%s-tied=%v", a.name, a.tied) }

func checkpoint(t *testing.T, a arch) string {
	t.Helper()
	ckptMu.Lock()
	defer ckptMu.Unlock()
	if dir, ok := ckpts[a.String()]; ok {
		return dir
	}
	if ckptDir == "" {
		d, err := os.MkdirTemp("", "evolm-generate-test")
		if err != nil {
			t.Fatal(err)
		}
		ckptDir = d
	}
	dir := filepath.Join(ckptDir, a.String())
	tied := "0"
	if a.tied {
		tied = "1"
	}
	testutil.RunPython(t, "hf_generate.py", "make", "--arch", a.name, "--out", dir, "--seed", "1", "--tied", tied)
	ckpts[a.String()] = dir
	return dir
}

func TestMain(m *testing.M) {
	torch.SetNumThreads(1)
	code := m.Run()
	if ckptDir != "" {
		os.RemoveAll(ckptDir)
	}
	os.Exit(code)
}

// pyJSON runs an hf_generate.py / hf_grad.py subcommand on a JSON request
// and decodes its JSON answer into out.
func pyJSON(t *testing.T, script, cmd, modelDir string, req any, out any) {
	t.Helper()
	dir := t.TempDir()
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	in, res := filepath.Join(dir, "req.json"), filepath.Join(dir, "out.json")
	if err := os.WriteFile(in, b, 0o644); err != nil {
		t.Fatal(err)
	}
	testutil.RunPython(t, script, cmd, "--model", modelDir, "--in", in, "--out", res)
	raw, err := os.ReadFile(res)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatal(err)
	}
}

var prompts = [][]int{{5, 6, 7, 8, 9, 10, 11}, {3, 4}, {20, 21, 22, 23}, {7}, {100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110}}

// TestGreedyMatchesHF: 32 greedy tokens for a batch of prompts of different
// lengths equal transformers generate(do_sample=False) on the same
// left-padded batch.
func TestGreedyMatchesHF(t *testing.T) {
	for _, a := range archs {
		t.Run(a.String(), func(t *testing.T) {
			dir := checkpoint(t, a)
			var want struct{ Sequences [][]int }
			pyJSON(t, "hf_generate.py", "greedy", dir, map[string]any{"prompts": prompts, "max_new_tokens": 32}, &want)
			m := modeltest.Load(t, dir)
			reqs := make([]Request, len(prompts))
			for i, p := range prompts {
				reqs[i] = Request{Prompt: p, MaxNewTokens: 32}
			}
			out, err := New(m, nil, Options{}).Generate(context.Background(), reqs)
			if err != nil {
				t.Fatal(err)
			}
			got := make([][]int, len(out))
			for i, o := range out {
				got[i] = o[0].Tokens
				if o[0].FinishReason != FinishLength {
					t.Errorf("prompt %d: finish %q, want length", i, o[0].FinishReason)
				}
			}
			if diff := cmp.Diff(want.Sequences, got); diff != "" {
				t.Errorf("greedy ids (-hf +ours):\n%s", diff)
			}
		})
	}
}

var continuations = []Continuation{
	{Prompt: []int{5, 6, 7, 8}, Completion: []int{9, 10, 11}},
	{Prompt: []int{3}, Completion: []int{40, 41, 42, 43, 44, 45}},
	{Prompt: []int{1, 2, 3, 4, 5, 6, 7}, Completion: []int{127, 0}},
	{Prompt: []int{60, 61}, Completion: []int{62}},
}

// TestScoreMatchesHF: batched, padded per-token log-probs and entropies of
// given continuations equal transformers' on each row alone within 1e-4.
func TestScoreMatchesHF(t *testing.T) {
	for _, a := range archs {
		t.Run(a.String(), func(t *testing.T) {
			dir := checkpoint(t, a)
			rows := make([]map[string][]int, len(continuations))
			for i, c := range continuations {
				rows[i] = map[string][]int{"prompt": c.Prompt, "completion": c.Completion}
			}
			var want struct{ LogProbs, Entropy [][]float64 }
			pyJSON(t, "hf_generate.py", "logprobs", dir, map[string]any{"rows": rows}, &want)
			m := modeltest.Load(t, dir)
			base := torch.Live()
			lps, ents, err := LogProbs(context.Background(), m, continuations, 3, true)
			if err != nil {
				t.Fatal(err)
			}
			if got := torch.Live(); got != base {
				t.Errorf("live tensors %d after LogProbs, want %d", got, base)
			}
			for i := range continuations {
				for j := range want.LogProbs[i] {
					if d := math.Abs(float64(lps[i][j]) - want.LogProbs[i][j]); d > 1e-4 {
						t.Errorf("row %d token %d: log-prob %.6f, hf %.6f", i, j, lps[i][j], want.LogProbs[i][j])
					}
					if d := math.Abs(float64(ents[i][j]) - want.Entropy[i][j]); d > 1e-4 {
						t.Errorf("row %d token %d: entropy %.6f, hf %.6f", i, j, ents[i][j], want.Entropy[i][j])
					}
				}
				if len(lps[i]) != len(continuations[i].Completion) {
					t.Errorf("row %d: %d log-probs for %d tokens", i, len(lps[i]), len(continuations[i].Completion))
				}
			}
		})
	}
}

// TestGradMatchesTorch: the gradient of loss = −mean over rows of the mean
// completion-token log-prob, computed through Score with grad on, matches
// torch's for every parameter. Prints the largest differences per tensor,
// llm.c style.
func TestGradMatchesTorch(t *testing.T) {
	for _, a := range archs {
		t.Run(a.String(), func(t *testing.T) {
			dir := checkpoint(t, a)
			out := t.TempDir()
			rows := make([]map[string][]int, len(continuations))
			for i, c := range continuations {
				rows[i] = map[string][]int{"prompt": c.Prompt, "completion": c.Completion}
			}
			b, _ := json.Marshal(map[string]any{"rows": rows})
			req := filepath.Join(out, "req.json")
			if err := os.WriteFile(req, b, 0o644); err != nil {
				t.Fatal(err)
			}
			testutil.RunPython(t, "hf_grad.py", "grad", "--model", dir, "--in", req, "--out", out)
			var wantLoss struct{ Loss float64 }
			raw, _ := os.ReadFile(filepath.Join(out, "loss.json"))
			if err := json.Unmarshal(raw, &wantLoss); err != nil {
				t.Fatal(err)
			}
			m := modeltest.Load(t, dir)
			base := torch.Live()
			loss := gradOfMeanLogProb(t, m, continuations)
			if math.Abs(loss-wantLoss.Loss) > 1e-5 {
				t.Errorf("loss %.7f, torch %.7f", loss, wantLoss.Loss)
			}
			f, err := safetensors.Open(filepath.Join(out, "grads.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if got, want := len(m.Parameters()), len(f.Names()); got != want {
				t.Errorf("%d parameters, torch has %d gradients", got, want)
			}
			compareGrads(t, m, f)
			zeroGrads(t, m)
			if got := torch.Live(); got != base {
				t.Errorf("live tensors %d after backward, want %d", got, base)
			}
		})
	}
}

// compareGrads checks every parameter's gradient against torch's in f.
func compareGrads(t *testing.T, m model.CausalLM, f *safetensors.File) {
	t.Helper()
	s := torch.NewScope()
	defer s.Close()
	for _, p := range m.Parameters() {
		info, ok := f.Info(p.Name)
		if !ok {
			t.Errorf("%s: torch has no gradient", p.Name)
			continue
		}
		data, _ := f.Data(p.Name)
		want, err := torch.Float32s(s.FromBytes(data, info.Shape, torch.Float32))
		if err != nil {
			t.Fatal(err)
		}
		g := s.Grad(p.Tensor)
		if g == nil {
			t.Errorf("%s: no gradient", p.Name)
			continue
		}
		got, err := torch.Float32s(g)
		if err != nil {
			t.Fatal(err)
		}
		abs, rel, scale := 0.0, 0.0, 0.0
		for i := range want {
			d := math.Abs(float64(got[i]) - float64(want[i]))
			abs = max(abs, d)
			rel = max(rel, d/(math.Abs(float64(want[i]))+1e-8))
			scale = max(scale, math.Abs(float64(want[i])))
		}
		t.Logf("%-45s max|g| %.3e  max abs diff %.2e  max rel diff %.2e", p.Name, scale, abs, rel)
		if abs > 1e-5*max(scale, 1e-2) {
			t.Errorf("%s: gradient differs by %.3g (max |g| %.3g)", p.Name, abs, scale)
		}
	}
}

// gradOfMeanLogProb backpropagates −mean over rows of each row's mean
// completion log-prob into m's parameters and returns the loss.
func gradOfMeanLogProb(t *testing.T, m model.CausalLM, rows []Continuation) float64 {
	t.Helper()
	for _, p := range m.Parameters() {
		if err := torch.SetRequiresGrad(p.Tensor, true); err != nil {
			t.Fatal(err)
		}
	}
	defer torch.SetGrad(true)()
	s := torch.NewScope()
	defer s.Close()
	sc, err := Score(s, m, rows, false)
	if err != nil {
		t.Fatal(err)
	}
	lens := make([]float32, len(sc.Lens))
	for i, n := range sc.Lens {
		lens[i] = float32(n)
	}
	perRow := s.Div(s.SumDim(sc.LogProbs, []int64{1}, false), s.FromFloat32(lens, int64(len(lens)))) // (B)
	loss := s.Neg(s.Mean(perRow))
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return modeltest.BackwardItem(t, loss)
}

func zeroGrads(t *testing.T, m model.CausalLM) {
	t.Helper()
	for _, p := range m.Parameters() {
		if err := torch.ZeroGrad(p.Tensor); err != nil {
			t.Fatal(err)
		}
		if err := torch.SetRequiresGrad(p.Tensor, false); err != nil {
			t.Fatal(err)
		}
	}
}
