package torchbe

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/model/modeltest"
	"github.com/evolm/evolm/model/safetensors"
	"github.com/evolm/evolm/model/torch"
	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/serving/roles"
)

// sftParityExamples are conversations (one with thinking, one multi-turn,
// one with a system prompt and one with non-ASCII text) and their TRL
// micro-batches of two, in order.
var sftParityExamples = [][]backend.Message{
	{{Role: "user", Content: "hi"}, {Role: "assistant", Content: "hello there, friend"}},
	{{Role: "system", Content: "Be terse."}, {Role: "user", Content: "What is 2+2?"}, {Role: "assistant", Content: "4"}},
	{{Role: "user", Content: "a"}, {Role: "assistant", Content: "b c"}, {Role: "user", Content: "d?"}, {Role: "assistant", Content: "e f g"}},
	{{Role: "user", Content: "Name three colours."}, {Role: "assistant", Content: "Red, green and blue."}},
	{{Role: "user", Content: "x"}, {Role: "assistant", Content: "<think>\nhmm\n</think>\n\ny"}},
	{{Role: "user", Content: "Count: 1 2 3"}, {Role: "assistant", Content: "4 5 6"}},
	{{Role: "user", Content: "q"}, {Role: "assistant", Content: "r"}},
	{{Role: "user", Content: "Café?"}, {Role: "assistant", Content: "Oui, café."}},
}

// TestSFTMatchesTRL: on a tiny checkpoint and the same conversations,
// evolm's SFT tokenization, assistant masks, per-step loss, step-1
// gradients and the weights after two AdamW steps equal TRL 0.19.1's
// SFTTrainer with assistant_only_loss (scripts/trl_sft_reference.py), and
// packing gives the padded step's loss and gradients.
func TestSFTMatchesTRL(t *testing.T) {
	dir := t.TempDir()
	modeltest.InitTiny(t, filepath.Join(dir, "model"), 11)
	const lr, batch, accum, steps = 1e-3, 2, 2, 2
	var exs []map[string]any
	for _, msgs := range sftParityExamples {
		exs = append(exs, map[string]any{"messages": msgs})
	}
	cfg, _ := json.Marshal(map[string]any{"model": filepath.Join(dir, "model"), "examples": exs, "batch_size": batch,
		"grad_accum": accum, "steps": steps, "lr": lr, "max_grad_norm": 0, "seed": 0})
	cfgPath := filepath.Join(dir, "cfg.json")
	if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	ref := filepath.Join(dir, "trl")
	testutil.RunPython(t, "trl_sft_reference.py", cfgPath, ref)
	var refTokens []struct {
		InputIDs []int `json:"input_ids"`
		Labels   []int `json:"labels"`
	}
	var refLosses []struct {
		Loss  float64 `json:"loss"`
		Items int     `json:"num_items_in_batch"`
	}
	readJSON(t, filepath.Join(ref, "tokens.json"), &refTokens)
	readJSON(t, filepath.Join(ref, "losses.json"), &refLosses)

	open := func(pack bool) (*roles.Trained, backend.SFTTrainer) {
		rc := roles.Config{Role: "policy", Backend: roles.BackendTorch, Model: filepath.Join(dir, "model"), Device: "cpu", MaxBatch: 8}
		tr, err := openTrained(rc, roles.TrainOptions{Learner: backend.LearnerConfig{LR: lr, MicroBatch: batch}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return tr, tr.Trainer.(backend.SFTTrainer)
	}
	tr, sft := open(false)
	defer tr.Close()
	var samples []backend.SFTSample
	for i, msgs := range sftParityExamples {
		s, err := sft.TokenizeSFT(backend.SFTExample{Messages: msgs})
		if err != nil {
			t.Fatalf("example %d: %v", i, err)
		}
		want := refTokens[i]
		if len(s.TokenIDs) != len(want.InputIDs) {
			t.Fatalf("example %d: %d tokens, TRL %d\n got %v\nwant %v", i, len(s.TokenIDs), len(want.InputIDs), s.TokenIDs, want.InputIDs)
		}
		for j := range s.TokenIDs {
			if s.TokenIDs[j] != want.InputIDs[j] || s.Targets[j] != (want.Labels[j] != -100) {
				t.Fatalf("example %d token %d: id %d target %v, TRL id %d label %d", i, j, s.TokenIDs[j], s.Targets[j], want.InputIDs[j], want.Labels[j])
			}
		}
		samples = append(samples, s)
	}
	lm := tr.Trainer.(trainer).Trainer.Policy
	per := batch * accum
	for step := range steps {
		st, err := sft.SFTStep(context.Background(), samples[step*per:(step+1)*per], backend.SFTOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := refLosses[step]
		t.Logf("step %d: loss %.7f (TRL %.7f), %d target tokens (TRL %d)", step+1, st.Loss, want.Loss, st.Tokens, want.Items)
		if st.Tokens != want.Items || math.Abs(st.Loss-want.Loss) > 1e-5*math.Abs(want.Loss) {
			t.Errorf("step %d: loss %v over %d tokens, TRL %v over %d", step+1, st.Loss, st.Tokens, want.Loss, want.Items)
		}
		if step == 0 {
			s := torch.NewScope()
			got := modeltest.Grads(t, s, lm.Parameters())
			s.Close()
			compareTensors(t, "step-1 gradient", filepath.Join(ref, "grads.safetensors"), got, 1e-4)
		}
	}
	s := torch.NewScope()
	final := map[string][]float32{}
	for _, p := range lm.Parameters() {
		final[p.Name] = modeltest.Float32s(t, p.Tensor)
	}
	s.Close()
	compareTensors(t, "weights after 2 steps", filepath.Join(ref, "final.safetensors"), final, 1e-4)

	t.Run("packing gives the padded loss and gradients", func(t *testing.T) {
		a, sa := open(false)
		defer a.Close()
		b, sb := open(false)
		defer b.Close()
		first := samples[:per]
		pa, err := sa.SFTStep(context.Background(), first, backend.SFTOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pb, err := sb.SFTStep(context.Background(), first, backend.SFTOptions{PackLength: 64})
		if err != nil {
			t.Fatal(err)
		}
		if pb.Rows >= pa.Rows {
			t.Fatalf("packing made %d rows of %d sequences", pb.Rows, pa.Rows)
		}
		if pa.Tokens != pb.Tokens || math.Abs(pa.Loss-pb.Loss) > 1e-5*pa.Loss {
			t.Errorf("packed loss %v over %d tokens, padded %v over %d", pb.Loss, pb.Tokens, pa.Loss, pa.Tokens)
		}
		if math.Abs(pa.GradNorm-pb.GradNorm) > 1e-4*pa.GradNorm {
			t.Errorf("packed gradient norm %v, padded %v", pb.GradNorm, pa.GradNorm)
		}
	})
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// compareTensors compares got with the float32 tensors of a safetensors
// file, each within tol of the tensor's largest magnitude, and logs the
// largest difference per tensor (llm.c's test_gpt2 style).
func compareTensors(t *testing.T, what, path string, got map[string][]float32, tol float64) {
	t.Helper()
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Names()) != len(got) {
		t.Errorf("%s: %d tensors, reference %d", what, len(got), len(f.Names()))
	}
	worst := 0.0
	for _, name := range f.Names() {
		raw, err := f.Data(name)
		if err != nil {
			t.Fatal(err)
		}
		g, ok := got[name]
		if !ok || len(g)*4 != len(raw) {
			t.Errorf("%s %s: missing or %d values for %d bytes", what, name, len(g), len(raw))
			continue
		}
		var scale, diff float64
		for i := range g {
			w := float64(math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])))
			scale = max(scale, math.Abs(w))
			diff = max(diff, math.Abs(w-float64(g[i])))
		}
		rel := diff / max(scale, 1e-12)
		worst = max(worst, rel)
		if rel > tol {
			t.Errorf("%s %s: max |Δ| %.3g, %.3g of the largest magnitude %.3g", what, name, diff, rel, scale)
		}
	}
	t.Logf("%s: %d tensors, largest relative difference %.3g", what, len(got), worst)
}
