package llama_test

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/model"
	_ "github.com/evolm/evolm/model/llama"
	"github.com/evolm/evolm/model/modeltest"
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
	modeltest.RefCase
	logits []float32
}

func readRefs(t *testing.T, path string) []refCase {
	t.Helper()
	r := modeltest.ReadRefs(t, path)
	cases := make([]refCase, len(r.Cases))
	for c, rc := range r.Cases {
		cases[c] = refCase{rc, r.Logits(t, c)}
	}
	return cases
}

// maxDiff compares logits with the case's at unpadded positions only: HF's
// values at padded query positions are arbitrary.
func maxDiff(rc refCase, got []float32) float64 { return rc.MaxDiff(got, rc.logits) }

// forward runs m on a case without a cache and returns logits as floats.
func forward(t *testing.T, m model.CausalLM, rc refCase) []float32 {
	t.Helper()
	return modeltest.Logits(t, m, rc.Batch)
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
			modeltest.CheckLeaks(t, base)
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
	ids := s.FromInt64(rc.IDs, rc.B, rc.T)
	logits, err := m.Forward(s, model.Batch{IDs: ids, Positions: s.FromInt64(rc.Pos, rc.B, rc.T), Mask: s.FromInt64(rc.Mask, rc.B, rc.T)})
	if err != nil {
		t.Fatal(err)
	}
	loss := modeltest.NextTokenLoss(s, logits, ids, s.FromInt64(rc.Mask, rc.B, rc.T), rc.T)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if err := torch.Backward(loss); err != nil {
		t.Fatal(err)
	}
	return modeltest.Grads(t, s, m.Parameters())
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
