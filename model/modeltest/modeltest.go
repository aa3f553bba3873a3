// Package modeltest holds helpers shared by the tests of the model packages:
// loading and building models, reading the reference files the Python
// scripts write (ref.safetensors: inputs per case and reference tensors),
// running a forward pass and comparing the logits. Each fails the test on an
// error.
package modeltest

import (
	"fmt"
	"math"
	"testing"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/fused"
	"github.com/evolm/evolm/model/safetensors"
	"github.com/evolm/evolm/model/torch"
)

// Load loads the checkpoint in dir with default options; the model is
// closed when the test ends.
func Load(t testing.TB, dir string) model.CausalLM {
	t.Helper()
	m, err := model.Load(dir, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

// InitTiny writes the tiny Qwen3 preset with random weights from seed to
// dir, as `evolm model init --preset tiny` does.
func InitTiny(t testing.TB, dir string, seed int64) {
	t.Helper()
	if _, err := model.Init(model.InitOptions{Arch: "qwen3", Preset: "tiny", Seed: seed, OutDir: dir}); err != nil {
		t.Fatal(err)
	}
}

// Random builds a model of cfg (completed by model.NewConfig) with random
// weights from seed. The caller closes it.
func Random(t testing.TB, cfg *model.Config, seed int64) model.CausalLM {
	t.Helper()
	if err := model.NewConfig(cfg); err != nil {
		t.Fatal(err)
	}
	m, err := model.Build(cfg, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := model.Randomize(m, seed); err != nil {
		t.Fatal(err)
	}
	return m
}

// RandomTrainable is Random with every parameter requiring grad.
func RandomTrainable(t testing.TB, cfg *model.Config, seed int64) model.CausalLM {
	t.Helper()
	m := Random(t, cfg, seed)
	if err := model.SetRequiresGrad(m, true); err != nil {
		t.Fatal(err)
	}
	return m
}

// ZeroGrads zeroes the gradient of every parameter of m.
func ZeroGrads(t testing.TB, m model.CausalLM) {
	t.Helper()
	for _, p := range m.Parameters() {
		if err := torch.ZeroGrad(p.Tensor); err != nil {
			t.Fatal(err)
		}
	}
}

// BackwardItem runs backward from the scalar loss and returns its value.
func BackwardItem(t testing.TB, loss *torch.Tensor) float64 {
	t.Helper()
	if err := torch.Backward(loss); err != nil {
		t.Fatal(err)
	}
	v, err := torch.Item(loss)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Grads copies out the gradient of each of params, by name.
func Grads(t testing.TB, s *torch.Scope, params []model.Param) map[string][]float32 {
	t.Helper()
	out := map[string][]float32{}
	for _, p := range params {
		g, err := torch.Float32s(s.Grad(p.Tensor))
		if err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
		out[p.Name] = g
	}
	return out
}

// CheckLeaks fails t unless the count of live tensors is base, the count
// taken before the code under test.
func CheckLeaks(t testing.TB, base int64) {
	t.Helper()
	if n := torch.Live() - base; n != 0 {
		t.Errorf("%d tensors leaked", n)
	}
}

// Float32s copies x's values out.
func Float32s(t testing.TB, x *torch.Tensor) []float32 {
	t.Helper()
	out, err := torch.Float32s(x)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Logits runs m on the batch that batch builds in a scope of its own and
// returns the logits' values.
func Logits(t testing.TB, m model.CausalLM, batch func(s *torch.Scope) model.Batch) []float32 {
	t.Helper()
	s := torch.NewScope()
	defer s.Close()
	logits, err := m.Forward(s, batch(s))
	if err != nil {
		t.Fatal(err)
	}
	return Float32s(t, logits)
}

// MaxAbsDiff is the largest |a[i] - b[i]|.
func MaxAbsDiff(a, b []float32) float64 {
	d := 0.0
	for i := range a {
		d = max(d, math.Abs(float64(a[i])-float64(b[i])))
	}
	return d
}

// NextTokenLoss is the summed negative log-likelihood of each token of ids
// (B, T) after the one before it, from logits (B, T, V), over the pairs
// whose query and target are both real tokens under mask (B, T): a padded
// query's logits are arbitrary (it may attend nothing).
func NextTokenLoss(s *torch.Scope, logits, ids, mask *torch.Tensor, T int64) *torch.Tensor {
	lp := s.LogSoftmax(s.Narrow(logits, 1, 0, T-1), -1, torch.Float32) // (B, T-1, V)
	tgt := s.Unsqueeze(s.Narrow(ids, 1, 1, T-1), -1)                   // (B, T-1, 1)
	m := s.Float32(mask)
	w := s.Unsqueeze(s.Mul(s.Narrow(m, 1, 0, T-1), s.Narrow(m, 1, 1, T-1)), -1) // (B, T-1, 1)
	return s.Neg(s.Sum(s.Mul(s.Gather(lp, -1, tgt), w)))
}

// RefCase is one input of a reference file: token ids, attention mask and
// positions (B, T), with the vocabulary size V of its logits.
type RefCase struct {
	IDs, Mask, Pos []int64
	B, T, V        int64
}

// Batch is the case as a model input in s.
func (rc RefCase) Batch(s *torch.Scope) model.Batch {
	return model.Batch{IDs: s.FromInt64(rc.IDs, rc.B, rc.T), Positions: s.FromInt64(rc.Pos, rc.B, rc.T), Mask: s.FromInt64(rc.Mask, rc.B, rc.T)}
}

// MaxDiff compares logits (B, T, V) at unpadded positions only (a
// reference's values at padded query positions are arbitrary); a NaN
// difference is +Inf.
func (rc RefCase) MaxDiff(got, want []float32) float64 {
	worst := 0.0
	for b := int64(0); b < rc.B; b++ {
		for t := int64(0); t < rc.T; t++ {
			if rc.Mask[b*rc.T+t] == 0 {
				continue
			}
			for v := int64(0); v < rc.V; v++ {
				i := (b*rc.T+t)*rc.V + v
				d := math.Abs(float64(got[i]) - float64(want[i]))
				if math.IsNaN(d) {
					return math.Inf(1)
				}
				worst = math.Max(worst, d)
			}
		}
	}
	return worst
}

// Refs is an open reference file: cases case0, case1, … each with tensors
// case<c>.ids, .mask, .pos (int64) and .logits (float32, B×T×V), and
// whatever other tensors its script wrote.
type Refs struct {
	f     *safetensors.File
	Cases []RefCase
}

// ReadRefs opens the reference file at path (closed when the test ends)
// and reads its cases; a file without one is an error.
func ReadRefs(t testing.TB, path string) *Refs {
	t.Helper()
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	r := &Refs{f: f}
	for c := 0; ; c++ {
		rc, ok := r.Case(t, fmt.Sprintf("case%d", c))
		if !ok {
			break
		}
		r.Cases = append(r.Cases, rc)
	}
	if len(r.Cases) == 0 {
		t.Fatalf("%s: no cases", path)
	}
	return r
}

// Case reads the case whose tensors are key.ids, .mask, .pos and .logits;
// ok is false when the file has no key.logits. Cases outside case0, case1,
// … are read only by name.
func (r *Refs) Case(t testing.TB, key string) (rc RefCase, ok bool) {
	t.Helper()
	info, ok := r.f.Info(key + ".logits")
	if !ok {
		return RefCase{}, false
	}
	return RefCase{
		IDs: r.I64s(t, key+".ids"), Mask: r.I64s(t, key+".mask"), Pos: r.I64s(t, key+".pos"),
		B: info.Shape[0], T: info.Shape[1], V: info.Shape[2],
	}, true
}

// I64s reads the int64 tensor name.
func (r *Refs) I64s(t testing.TB, name string) []int64 {
	t.Helper()
	b, err := r.f.Data(name)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]int64, len(b)/8)
	for i := range out {
		var v uint64
		for k := 0; k < 8; k++ {
			v |= uint64(b[8*i+k]) << (8 * k)
		}
		out[i] = int64(v)
	}
	return out
}

// F32s reads the float32 tensor name.
func (r *Refs) F32s(t testing.TB, name string) []float32 {
	t.Helper()
	b, err := r.f.Data(name)
	if err != nil {
		t.Fatalf("reference %s: %v", name, err)
	}
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24)
	}
	return out
}

// Logits reads case c's reference logits.
func (r *Refs) Logits(t testing.TB, c int) []float32 {
	t.Helper()
	return r.F32s(t, fmt.Sprintf("case%d.logits", c))
}

// CheckFreesBlocks runs step iterations times, each in a scope of its own
// with grad on, inside fused.KeepBlocks, and fails t unless every large
// host block (1 MiB or more) allocated since is freed once the iteration's
// scope closes: the caching allocator's live count sees a tensor whose
// storage outlives its Go handle, which torch.Live does not.
func CheckFreesBlocks(t *testing.T, what string, iterations int, step func(s *torch.Scope) error) {
	t.Helper()
	err := fused.KeepBlocks(func() error {
		base := fused.Blocks().Live
		for it := range iterations {
			err := func() error {
				defer torch.SetGrad(true)()
				s := torch.NewScope()
				defer s.Close()
				return step(s)
			}()
			if err != nil {
				return err
			}
			if n := fused.Blocks().Live - base; n != 0 {
				t.Errorf("%s, iteration %d: %d bytes still allocated after the scope closed", what, it, n)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
