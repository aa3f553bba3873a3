package torchbe

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"sync"
	"testing"

	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/model/lora"
	"github.com/evolm/evolm/model/modeltest"
	"github.com/evolm/evolm/model/torch"
	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/serving/roles"
)

// saveAdapter writes a LoRA adapter for the checkpoint dir with lora_B
// drawn away from zero (so that it changes the output) and returns its
// directory.
func saveAdapter(t *testing.T, dir string, seed int64) string {
	t.Helper()
	m, err := Load(Options{Dir: dir, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ad, err := lora.New(m.LM(), lora.Config{Rank: 4, Alpha: 8, Targets: []string{"q", "v", "down"}}, seed)
	if err != nil {
		t.Fatal(err)
	}
	defer ad.Close()
	torch.ManualSeed(seed + 1)
	err = torch.NoGrad(func() error {
		s := torch.NewScope()
		defer s.Close()
		for _, l := range ad.Layers() {
			sh, err := torch.Shape(l.B)
			if err != nil {
				return err
			}
			s.Copy_(l.B, s.MulScalar(s.Randn(sh, torch.Float32, torch.CPU), 0.2))
		}
		return s.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "adapter")
	if err := ad.Save(out, dir); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestAdapterViewsShareTheBase: adapters loaded as views of one base model
// (evolm serve's runtime LoRA) hold only their factors — loading one adds
// exactly its lora_A and lora_B tensors, closing it frees them — and
// generate what the base model with that adapter attached alone generates,
// while the base model, and each view, interleaved on one engine thread,
// keep their own answers.
func TestAdapterViewsShareTheBase(t *testing.T) {
	dir := t.TempDir()
	modeltest.InitTiny(t, dir, 9)
	ads := []string{saveAdapter(t, dir, 1), saveAdapter(t, dir, 2)}
	ctx := context.Background()
	req := backend.GenerateRequest{ID: "r", Prompt: "Once upon a time", N: 2, LogProbs: true,
		Sampling: backend.Sampling{MaxTokens: 8, Temperature: 1, Seed: seed(4)}}
	gen := func(m *Model) backend.GenerateResponse {
		t.Helper()
		out, err := m.Generate(ctx, []backend.GenerateRequest{req})
		if err != nil || out[0].Failure != nil {
			t.Fatalf("%v %v", err, out[0].Failure)
		}
		return out[0]
	}
	// References: each adapter on a model of its own (a full copy).
	var want []backend.GenerateResponse
	for _, a := range append([]string{""}, ads...) {
		m, err := Load(Options{Dir: dir, Threads: 1, Adapter: a})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, gen(m))
		m.Close()
	}
	if equalGen(want[0], want[1]) || equalGen(want[1], want[2]) {
		t.Fatal("the adapters do not change the output: the test would prove nothing")
	}

	base, err := Load(Options{Dir: dir, Threads: 1, OneThread: true})
	if err != nil {
		t.Fatal(err)
	}
	defer base.Close()
	live := torch.Live()
	views := []*Model{base}
	for i, a := range ads {
		v, err := base.WithAdapter(a, a)
		if err != nil {
			t.Fatal(err)
		}
		views = append(views, v)
		// lora_A and lora_B of 3 targets in each of the 2 layers.
		if got, want := torch.Live()-live, int64((i+1)*2*3*2); got != want {
			t.Errorf("after %d adapters: %d more live tensors, want %d (their factors alone)", i+1, got, want)
		}
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := make([][]backend.GenerateResponse, len(views))
	for i, v := range views {
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := gen(v)
				mu.Lock()
				got[i] = append(got[i], r)
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	for i := range views {
		for _, g := range got[i] {
			if !equalGen(g, want[i]) {
				t.Errorf("view %d (0: the base) differs from its reference", i)
			}
		}
	}
	views[1].Close()
	if got, want := torch.Live()-live, int64(2*3*2); got != want {
		t.Errorf("after closing one of two adapters: %d more live tensors, want %d", got, want)
	}
	if _, err := views[1].Generate(ctx, []backend.GenerateRequest{req}); err == nil {
		t.Error("a closed view generates")
	}
	if g := gen(views[2]); !equalGen(g, want[2]) {
		t.Error("the other adapter changed when one was closed")
	}
}

// equalGen compares texts and log-probs (within 1e-5: the batch shapes of
// the runs differ).
func equalGen(a, b backend.GenerateResponse) bool {
	if len(a.Completions) != len(b.Completions) {
		return false
	}
	for i := range a.Completions {
		ca, cb := a.Completions[i], b.Completions[i]
		if ca.Text != cb.Text || len(ca.LogProbs) != len(cb.LogProbs) {
			return false
		}
		for j := range ca.LogProbs {
			if math.Abs(ca.LogProbs[j].LogProb-cb.LogProbs[j].LogProb) > 1e-5 {
				return false
			}
		}
	}
	return true
}

// TestTrainedAdapterLoadsInAutoPeft: the adapter a trained torch role saves
// (as evolm run saves the policy's) names its base model, absolute, so that
// PEFT's AutoPeftModelForCausalLM loads it from its directory alone, with
// the log-probs evolm computes for base + adapter.
func TestTrainedAdapterLoadsInAutoPeft(t *testing.T) {
	dir := t.TempDir()
	modeltest.InitTiny(t, dir, 11)
	c := roles.Config{Role: roles.Policy, Backend: roles.BackendTorch, Model: dir, Device: "cpu", Threads: 1, MaxBatch: 8}
	tr, err := openTrained(c, roles.TrainOptions{Learner: backend.LearnerConfig{LR: 0.05, MaxGradNorm: 1, MicroBatch: 4, Epsilon: 0.2,
		Seed: 1, LoRA: backend.LoRAConfig{Rank: 4, Alpha: 8, Targets: []string{"q", "v", "down"}}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	ctx := context.Background()
	rows := []backend.TrainSample{
		{PromptTokenIDs: []int{785, 3974}, CompletionTokenIDs: []int{13876, 38835, 11}, Advantage: 1},
		{PromptTokenIDs: []int{785, 3974}, CompletionTokenIDs: []int{1879, 13, 9707}, Advantage: -1},
	}
	if _, err := tr.Trainer.TrainStep(ctx, rows); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "step-000001")
	if _, err := tr.Trainer.Save(ctx, out); err != nil {
		t.Fatal(err)
	}
	_, base, err := lora.ReadConfig(out)
	if err != nil {
		t.Fatal(err)
	}
	if abs, _ := filepath.Abs(dir); base != abs {
		t.Fatalf("base_model_name_or_path %q, want %q", base, abs)
	}
	m, err := Load(Options{Dir: dir, Threads: 1, Adapter: out})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var lrs []backend.LogProbRequest
	var in []map[string][]int
	for i, r := range rows {
		lrs = append(lrs, backend.LogProbRequest{ID: fmt.Sprint(i), PromptTokenIDs: r.PromptTokenIDs, CompletionTokenIDs: r.CompletionTokenIDs})
		in = append(in, map[string][]int{"prompt": r.PromptTokenIDs, "completion": r.CompletionTokenIDs})
	}
	ours, err := m.LogProbs(ctx, lrs)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(in)
	var ref struct {
		LogProbs [][]float64 `json:"logprobs"`
		Base     string      `json:"base"`
	}
	if err := json.Unmarshal(testutil.RunPythonInput(t, "peft_auto.py", b, out), &ref); err != nil {
		t.Fatal(err)
	}
	moved := false
	for i := range rows {
		for j, lp := range ours[i].LogProbs {
			if d := math.Abs(lp.LogProb - ref.LogProbs[i][j]); d > 1e-4 {
				t.Errorf("row %d token %d: evolm %v, AutoPeftModelForCausalLM %v", i, j, lp.LogProb, ref.LogProbs[i][j])
			}
		}
	}
	base0, err := Load(Options{Dir: dir, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer base0.Close()
	plain, err := base0.LogProbs(ctx, lrs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range rows {
		for j := range plain[i].LogProbs {
			moved = moved || math.Abs(plain[i].LogProbs[j].LogProb-ours[i].LogProbs[j].LogProb) > 1e-4
		}
	}
	if !moved {
		t.Error("the trained adapter does not change the log-probs: the test would prove nothing")
	}
	t.Logf("PEFT read base %s", ref.Base)
}
