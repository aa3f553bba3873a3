package llama_test

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/model"
	_ "github.com/evolm/evolm/model/llama"
	"github.com/evolm/evolm/model/safetensors"
	"github.com/evolm/evolm/model/torch"
)

// Tolerance of the fp32 logit parity with transformers (README.md, "Correctness, against references nobody here wrote").
const tol = 1e-4

// golden holds the HF reference checkpoints, made once per test binary.
var golden = testutil.Golden{Prefix: "evolm-hf-golden-", Script: "hf_make_checkpoints.py"}

func TestMain(m *testing.M) {
	torch.SetNumThreads(1)
	code := m.Run()
	golden.Remove()
	os.Exit(code)
}

// refCase is one input of ref.safetensors with the HF logits.
type refCase struct {
	ids, mask, pos []int64
	B, T, V        int64
	logits         []float32
}

func readRefs(t *testing.T, path string) []refCase {
	t.Helper()
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cases []refCase
	for c := 0; ; c++ {
		info, ok := f.Info(fmt.Sprintf("case%d.logits", c))
		if !ok {
			break
		}
		rc := refCase{B: info.Shape[0], T: info.Shape[1], V: info.Shape[2]}
		rc.ids = i64s(t, f, fmt.Sprintf("case%d.ids", c))
		rc.mask = i64s(t, f, fmt.Sprintf("case%d.mask", c))
		rc.pos = i64s(t, f, fmt.Sprintf("case%d.pos", c))
		b, _ := f.Data(info.Name)
		rc.logits = make([]float32, len(b)/4)
		for i := range rc.logits {
			rc.logits[i] = math.Float32frombits(uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24)
		}
		cases = append(cases, rc)
	}
	if len(cases) == 0 {
		t.Fatalf("%s: no cases", path)
	}
	return cases
}

func i64s(t *testing.T, f *safetensors.File, name string) []int64 {
	b, err := f.Data(name)
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

// maxDiff compares logits (B, T, V) at unpadded positions only: HF's values
// at padded query positions are arbitrary.
func maxDiff(rc refCase, got []float32) float64 {
	worst := 0.0
	for b := int64(0); b < rc.B; b++ {
		for t := int64(0); t < rc.T; t++ {
			if rc.mask[b*rc.T+t] == 0 {
				continue
			}
			for v := int64(0); v < rc.V; v++ {
				i := (b*rc.T+t)*rc.V + v
				worst = math.Max(worst, math.Abs(float64(got[i])-float64(rc.logits[i])))
			}
		}
	}
	return worst
}

// forward runs m on a case without a cache and returns logits as floats.
func forward(t *testing.T, m model.CausalLM, rc refCase) []float32 {
	t.Helper()
	s := torch.NewScope()
	defer s.Close()
	logits, err := m.Forward(s, model.Batch{
		IDs:       s.FromInt64(rc.ids, rc.B, rc.T),
		Positions: s.FromInt64(rc.pos, rc.B, rc.T),
		Mask:      s.FromInt64(rc.mask, rc.B, rc.T),
	})
	if err != nil {
		t.Fatal(err)
	}
	out, err := torch.Float32s(logits)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestHFParity(t *testing.T) {
	dir, names := golden.Get(t)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			base := torch.Live()
			m, err := model.Load(filepath.Join(dir, name), model.LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for c, rc := range readRefs(t, filepath.Join(dir, name, "ref.safetensors")) {
				d := maxDiff(rc, forward(t, m, rc))
				t.Logf("%s case%d (B=%d T=%d V=%d): max |logit - HF| = %.3g", name, c, rc.B, rc.T, rc.V, d)
				if d > tol || math.IsNaN(d) {
					t.Errorf("%s case%d: max abs logit error %.3g > %g", name, c, d, tol)
				}
			}
			m.Close()
			if n := torch.Live() - base; n != 0 {
				t.Errorf("%d tensors leaked", n)
			}
		})
	}
}

// TestHFParitySDPA: the fused-attention path (the CUDA default) matches HF too.
func TestHFParitySDPA(t *testing.T) {
	dir, names := golden.Get(t)
	for _, name := range names {
		m, err := model.Load(filepath.Join(dir, name), model.LoadOptions{Attention: model.AttnSDPA})
		if err != nil {
			t.Fatal(err)
		}
		if got := m.Config().AttnImplementation; got != model.AttnSDPA {
			t.Errorf("attention %q, want sdpa", got)
		}
		for c, rc := range readRefs(t, filepath.Join(dir, name, "ref.safetensors")) {
			got := forward(t, m, rc)
			d := maxDiff(rc, got)
			t.Logf("%s case%d sdpa: max |logit - HF| = %.3g", name, c, d)
			if d > tol || math.IsNaN(d) {
				t.Errorf("%s case%d sdpa: max abs logit error %.3g > %g", name, c, d, tol)
			}
			for i, v := range got {
				if math.IsNaN(float64(v)) {
					t.Fatalf("%s case%d sdpa: NaN logit at %d (padded rows must stay finite)", name, c, i)
				}
			}
		}
		m.Close()
	}
}

// gradsOf returns the gradient of a fixed next-token loss on a padded batch
// with respect to every parameter of m, by name.
func gradsOf(t *testing.T, m model.CausalLM, rc refCase) map[string][]float32 {
	t.Helper()
	defer torch.SetGrad(true)()
	if err := model.SetRequiresGrad(m, true); err != nil {
		t.Fatal(err)
	}
	s := torch.NewScope()
	defer s.Close()
	ids := s.FromInt64(rc.ids, rc.B, rc.T)
	logits, err := m.Forward(s, model.Batch{IDs: ids, Positions: s.FromInt64(rc.pos, rc.B, rc.T), Mask: s.FromInt64(rc.mask, rc.B, rc.T)})
	if err != nil {
		t.Fatal(err)
	}
	lp := s.LogSoftmax(s.Narrow(logits, 1, 0, rc.T-1), -1, torch.Float32) // (B, T-1, V)
	tgt := s.Unsqueeze(s.Narrow(ids, 1, 1, rc.T-1), -1)                   // (B, T-1, 1)
	// Weight pairs whose query and target are both real tokens: a padded
	// query's logits are arbitrary (it may attend nothing).
	mask := s.Float32(s.FromInt64(rc.mask, rc.B, rc.T))
	w := s.Unsqueeze(s.Mul(s.Narrow(mask, 1, 0, rc.T-1), s.Narrow(mask, 1, 1, rc.T-1)), -1) // (B, T-1, 1)
	loss := s.Neg(s.Sum(s.Mul(s.Gather(lp, -1, tgt), w)))
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if err := torch.Backward(loss); err != nil {
		t.Fatal(err)
	}
	out := map[string][]float32{}
	for _, p := range m.Parameters() {
		g, err := torch.Float32s(s.Grad(p.Tensor))
		if err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
		out[p.Name] = g
	}
	return out
}

// TestSDPAGradientsMatchEager: backward through the fused attention gives
// eager's gradients, padding included (no NaN from fully masked rows).
func TestSDPAGradientsMatchEager(t *testing.T) {
	dir, _ := golden.Get(t)
	name := "qwen3_gqa_tied"
	rc := readRefs(t, filepath.Join(dir, name, "ref.safetensors"))[1]
	var grads [2]map[string][]float32
	for i, impl := range []string{model.AttnEager, model.AttnSDPA} {
		m, err := model.Load(filepath.Join(dir, name), model.LoadOptions{Attention: impl})
		if err != nil {
			t.Fatal(err)
		}
		grads[i] = gradsOf(t, m, rc)
		m.Close()
	}
	for n, ge := range grads[0] {
		gs := grads[1][n]
		worst := 0.0
		for i := range ge {
			worst = math.Max(worst, math.Abs(float64(ge[i]-gs[i])))
			if math.IsNaN(float64(gs[i])) {
				t.Fatalf("%s: NaN gradient with sdpa", n)
			}
		}
		if worst > 1e-5 {
			t.Errorf("%s: sdpa gradient differs from eager by %.3g", n, worst)
		}
	}
}
