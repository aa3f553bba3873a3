package train

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/generate"
	_ "github.com/evolm/evolm/model/llama"
	"github.com/evolm/evolm/model/modeltest"
	"github.com/evolm/evolm/model/optim"
	"github.com/evolm/evolm/model/safetensors"
	"github.com/evolm/evolm/model/torch"
)

var rows = []generate.Continuation{
	{Prompt: []int{5, 6, 7, 8}, Completion: []int{9, 10, 11}},
	{Prompt: []int{3}, Completion: []int{40, 41, 42, 43, 44, 45}},
	{Prompt: []int{1, 2, 3, 4, 5, 6, 7}, Completion: []int{127, 0}},
	{Prompt: []int{60, 61}, Completion: []int{62}},
}

// nll is the micro-batch loss: Σ over rows of −(mean completion log-prob),
// one item per row, so a step minimizes the batch mean of it.
func nll(s *torch.Scope, m model.CausalLM, mb []generate.Continuation) (Loss, error) {
	sc, err := generate.Score(s, m, mb, false)
	if err != nil {
		return Loss{}, err
	}
	lens := make([]float32, len(sc.Lens))
	for i, n := range sc.Lens {
		lens[i] = float32(n)
	}
	perRow := s.Div(s.SumDim(sc.LogProbs, []int64{1}, false), s.FromFloat32(lens, int64(len(lens)))) // (B)
	tokens := 0.0
	for _, n := range sc.Lens {
		tokens += float64(n)
	}
	return Loss{Sum: s.Neg(s.Sum(perRow)), Count: float64(len(mb)), Metrics: map[string]float64{"tokens": tokens}}, s.Err()
}

func checkpoint(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ckpt")
	testutil.RunPython(t, "hf_generate.py", "make", "--arch", "qwen3", "--out", dir, "--seed", "2")
	return dir
}

func newTrainer(t *testing.T, m model.CausalLM, eps float64) *Trainer[[]generate.Continuation] {
	t.Helper()
	tr, err := New[[]generate.Continuation](m, Config{
		AdamW:       optim.AdamWConfig{LR: 0.01, Beta1: 0.9, Beta2: 0.95, Eps: eps},
		WeightDecay: 0.1,
		MaxGradNorm: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.Close)
	return tr
}

func lossFn(m model.CausalLM) LossFn[[]generate.Continuation] {
	return func(s *torch.Scope, mb []generate.Continuation) (Loss, error) { return nll(s, m, mb) }
}

func values(t *testing.T, m model.CausalLM) map[string][]float32 {
	t.Helper()
	out := map[string][]float32{}
	for _, p := range m.Parameters() {
		v, err := torch.Float32s(p.Tensor)
		if err != nil {
			t.Fatal(err)
		}
		out[p.Name] = v
	}
	return out
}

// TestStepMatchesTorch: one Step (loss → backward → ÷count → clip → AdamW)
// on a tiny Qwen3 equals transformers + clip_grad_norm_ + torch.optim.AdamW
// (scripts/hf_grad.py) tensor by tensor. eps is 1e-3 so that gradients
// within float noise of 0 cannot flip an Adam update's sign.
func TestStepMatchesTorch(t *testing.T) {
	dir := checkpoint(t)
	out := t.TempDir()
	var js []map[string][]int
	for _, r := range rows {
		js = append(js, map[string][]int{"prompt": r.Prompt, "completion": r.Completion})
	}
	write := func(name string, v any) string {
		b, _ := json.Marshal(v)
		p := filepath.Join(out, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	testutil.RunPython(t, "hf_grad.py", "grad", "--model", dir, "--in", write("rows.json", map[string]any{"rows": js}), "--out", out)
	hp := map[string]any{"lr": 0.01, "beta1": 0.9, "beta2": 0.95, "eps": 1e-3, "weight_decay": 0.1, "max_norm": 1.0, "scales": []float64{1}}
	testutil.RunPython(t, "hf_grad.py", "adamw", "--model", dir, "--grads", filepath.Join(out, "grads.safetensors"), "--in", write("hp.json", hp), "--out", out)
	var ref struct{ Norms []float64 }
	raw, _ := os.ReadFile(filepath.Join(out, "adamw.json"))
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}

	m := modeltest.Load(t, dir)
	tr := newTrainer(t, m, 1e-3)
	// Two micro-batches of unequal size.
	met, err := tr.Step(context.Background(), [][]generate.Continuation{rows[:3], rows[3:]}, lossFn(m))
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(met.GradNorm-ref.Norms[0]) > 1e-5*ref.Norms[0] {
		t.Errorf("grad norm %.7g, torch %.7g", met.GradNorm, ref.Norms[0])
	}
	if met.Step != 1 || met.MicroBatches != 2 || met.Count != 4 || met.Extra["tokens"] != 3 {
		t.Errorf("metrics %+v: want step 1, 2 micro-batches, count 4, tokens/row 3", met)
	}
	f, err := safetensors.Open(filepath.Join(out, "adamw.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := values(t, m)
	s := torch.NewScope()
	defer s.Close()
	for name, g := range got {
		info, ok := f.Info("p1." + name)
		if !ok {
			t.Fatalf("torch has no p1.%s", name)
		}
		data, _ := f.Data("p1." + name)
		want, err := torch.Float32s(s.FromBytes(data, info.Shape, torch.Float32))
		if err != nil {
			t.Fatal(err)
		}
		d := modeltest.MaxAbsDiff(g, want)
		t.Logf("%-45s max abs diff %.2e", name, d)
		if d > 1e-6 {
			t.Errorf("%s: differs from torch by %.3g after one step", name, d)
		}
	}
}

// TestAccumulationIsSplitInvariant: one micro-batch of 4 rows and four of 1
// row give the same steps, and a frozen copy taken before training does not
// move or collect gradients. (eps 1e-3: with 1e-8 Adam turns float noise on
// near-zero gradients into ±lr updates, and the two runs drift apart.)
func TestAccumulationIsSplitInvariant(t *testing.T) {
	dir := checkpoint(t)
	whole, split := modeltest.Load(t, dir), modeltest.Load(t, dir)
	ref, err := model.FrozenCopy(split)
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	before := values(t, ref)
	ta, tb := newTrainer(t, whole, 1e-3), newTrainer(t, split, 1e-3)
	for step := 0; step < 2; step++ {
		ma, err := ta.Step(context.Background(), [][]generate.Continuation{rows}, lossFn(whole))
		if err != nil {
			t.Fatal(err)
		}
		mb, err := tb.Step(context.Background(), [][]generate.Continuation{rows[:1], rows[1:2], rows[2:3], rows[3:]}, lossFn(split))
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(ma.Loss-mb.Loss) > 1e-6 || math.Abs(ma.GradNorm-mb.GradNorm) > 1e-5*ma.GradNorm {
			t.Errorf("step %d: whole loss %.7f norm %.7f, split loss %.7f norm %.7f", step, ma.Loss, ma.GradNorm, mb.Loss, mb.GradNorm)
		}
	}
	va, vb := values(t, whole), values(t, split)
	for name := range va {
		if d := modeltest.MaxAbsDiff(va[name], vb[name]); d > 1e-6 {
			t.Errorf("%s: whole vs split differ by %.3g", name, d)
		}
	}
	moved := false
	for name, v := range values(t, ref) {
		if d := modeltest.MaxAbsDiff(v, before[name]); d != 0 {
			t.Errorf("frozen copy %s moved by %.3g", name, d)
		}
		if d := modeltest.MaxAbsDiff(v, vb[name]); d > 0 {
			moved = true
		}
	}
	if !moved {
		t.Error("the trained model equals its frozen copy: training did nothing")
	}
	for _, p := range ref.Parameters() {
		if torch.RequiresGrad(p.Tensor) {
			t.Errorf("frozen copy %s requires grad", p.Name)
		}
	}
}

func TestFailedStepAppliesNothing(t *testing.T) {
	m := modeltest.Load(t, checkpoint(t))
	tr := newTrainer(t, m, 1e-8)
	before := values(t, m)
	boom := errors.New("boom")
	calls := 0
	_, err := tr.Step(context.Background(), [][]generate.Continuation{rows[:2], rows[2:]}, func(s *torch.Scope, mb []generate.Continuation) (Loss, error) {
		calls++
		if calls == 2 {
			return Loss{}, boom
		}
		return nll(s, m, mb)
	})
	if !errors.Is(err, boom) {
		t.Fatalf("error %v, want boom", err)
	}
	if tr.Opt.StepCount() != 0 {
		t.Errorf("step count %d after a failed step", tr.Opt.StepCount())
	}
	for name, v := range values(t, m) {
		if d := modeltest.MaxAbsDiff(v, before[name]); d != 0 {
			t.Errorf("%s changed by %.3g in a failed step", name, d)
		}
	}
	norm, err := optim.GradNorm(tr.param)
	if err != nil {
		t.Fatal(err)
	}
	if norm != 0 {
		t.Errorf("grad norm %v after a failed step, want 0 (zeroed)", norm)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := tr.Step(ctx, [][]generate.Continuation{rows}, lossFn(m)); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled step: error %v", err)
	}
}

// TestNoLeakOver100Steps: the live-tensor count returns to its baseline
// after 100 train steps.
func TestNoLeakOver100Steps(t *testing.T) {
	m := modeltest.Load(t, checkpoint(t))
	base := torch.Live()
	func() {
		tr, err := New[[]generate.Continuation](m, Config{AdamW: optim.DefaultAdamW(1e-3), WeightDecay: 0.01, MaxGradNorm: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		afterInit := torch.Live()
		for i := 0; i < 100; i++ {
			if _, err := tr.Step(context.Background(), [][]generate.Continuation{rows[:2], rows[2:]}, lossFn(m)); err != nil {
				t.Fatal(err)
			}
		}
		if got := torch.Live(); got != afterInit {
			t.Errorf("live tensors %d after 100 steps, %d before", got, afterInit)
		}
	}()
	if got := torch.Live(); got != base {
		t.Errorf("live tensors %d after closing the trainer, want %d", got, base)
	}
}

// TestNonFiniteStepIsSkipped: a NaN loss (and so a NaN gradient norm), or a
// finite loss whose gradient is Inf, skips the update: no optimizer step,
// weights unchanged, gradients zeroed, Skipped says why. The next finite
// step trains as usual.
func TestNonFiniteStepIsSkipped(t *testing.T) {
	m := modeltest.Load(t, checkpoint(t))
	tr := newTrainer(t, m, 1e-8)
	before := values(t, m)
	tests := []struct {
		name  string
		scale float64 // multiplies the loss
		want  string
	}{
		{"NaN loss", math.NaN(), "loss is NaN"},
		{"Inf loss", math.Inf(1), "loss is +Inf"},
	}
	for _, tc := range tests {
		met, err := tr.Step(context.Background(), [][]generate.Continuation{rows[:2], rows[2:]}, func(s *torch.Scope, mb []generate.Continuation) (Loss, error) {
			l, err := nll(s, m, mb)
			l.Sum = s.MulScalar(l.Sum, tc.scale)
			return l, err
		})
		if err != nil {
			t.Fatalf("%s: %v, want a skipped step", tc.name, err)
		}
		if met.Skipped != tc.want || tr.Opt.StepCount() != 0 {
			t.Errorf("%s: Skipped %q, step count %d; want %q, 0", tc.name, met.Skipped, tr.Opt.StepCount(), tc.want)
		}
		for name, v := range values(t, m) {
			if d := modeltest.MaxAbsDiff(v, before[name]); d != 0 {
				t.Errorf("%s: %s changed by %.3g in a skipped step", tc.name, name, d)
			}
		}
		if norm, err := optim.GradNorm(tr.param); err != nil || norm != 0 {
			t.Errorf("%s: grad norm %v (%v) after a skipped step, want 0", tc.name, norm, err)
		}
	}
	met, err := tr.Step(context.Background(), [][]generate.Continuation{rows}, lossFn(m))
	if err != nil || met.Skipped != "" || tr.Opt.StepCount() != 1 {
		t.Errorf("finite step after skips: %v, Skipped %q, step count %d", err, met.Skipped, tr.Opt.StepCount())
	}
}
