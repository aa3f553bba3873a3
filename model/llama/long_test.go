package llama_test

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/llama"
	"github.com/evolm/evolm/model/modeltest"
	"github.com/evolm/evolm/model/torch"
)

// TestLongPromptMatchesHF: over a left-padded (2, 300) batch, longer than
// eager attention's query block (AttnBlock), every golden architecture
// matches HF's eager logits in one pass without a cache, with the fused
// path and with the plain one, and in two cached passes of 150 positions
// (the second attends to 150 cached keys too); the fused path computes the
// plain path's bits; and SDPA, which runs unblocked, matches HF as well.
func TestLongPromptMatchesHF(t *testing.T) {
	dir, names := golden.Get(t)
	defer llama.SetFused(llama.SetFused(true))
	for _, name := range names {
		refs := modeltest.ReadRefs(t, filepath.Join(dir, name, "ref.safetensors"))
		c, ok := refs.Case(t, "long")
		if !ok {
			t.Fatalf("%s: the goldens have no long case", name)
		}
		if c.T <= llama.AttnBlock {
			t.Fatalf("the long case has %d positions, not more than AttnBlock (%d)", c.T, llama.AttnBlock)
		}
		rc := refCase{c, refs.F32s(t, "long.logits")}
		for _, attn := range []string{model.AttnEager, model.AttnSDPA} {
			m, err := model.Load(filepath.Join(dir, name), model.LoadOptions{Attention: attn})
			if err != nil {
				t.Fatal(err)
			}
			base := torch.Live()
			var out [2][2][]float32 // [plain, fused][one pass, two cached passes]
			for i, on := range []bool{false, true} {
				llama.SetFused(on)
				out[i][0] = forwardNoGrad(t, m, rc)
				out[i][1] = splitForward(t, m, rc, rc.T/2)
			}
			for i, path := range []string{"plain", "fused"} {
				for j, how := range []string{"one pass", "two cached passes"} {
					d := maxDiff(rc, out[i][j])
					t.Logf("%s %s %s, %s: max |logit − HF| = %.3g", name, attn, path, how, d)
					if d > tol || math.IsNaN(d) {
						t.Errorf("%s %s %s, %s: max abs logit error %.3g > %g", name, attn, path, how, d, tol)
					}
				}
			}
			for j, how := range []string{"one pass", "two cached passes"} {
				if n := bitDiff(out[0][j], out[1][j]); n != 0 {
					t.Errorf("%s %s, %s: the fused path differs from the plain one in %d logits", name, attn, how, n)
				}
			}
			modeltest.CheckLeaks(t, base)
			m.Close()
		}
	}
}

// TestLongPromptGradients: backward through eager attention in query blocks
// gives the gradients of SDPA, which runs unblocked, over a batch longer
// than AttnBlock, padding included.
func TestLongPromptGradients(t *testing.T) {
	dir, _ := golden.Get(t)
	name := "qwen3_gqa_tied"
	refs := modeltest.ReadRefs(t, filepath.Join(dir, name, "ref.safetensors"))
	c, ok := refs.Case(t, "long")
	if !ok {
		t.Fatalf("%s: the goldens have no long case", name)
	}
	rc := refCase{c, refs.F32s(t, "long.logits")}
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
		worst, scale := 0.0, 0.0
		for i := range ge {
			worst = math.Max(worst, math.Abs(float64(ge[i]-gs[i])))
			scale = math.Max(scale, math.Abs(float64(gs[i])))
			if math.IsNaN(float64(ge[i])) {
				t.Fatalf("%s: NaN gradient with blocked eager attention", n)
			}
		}
		if worst > 1e-5*max(1, scale) {
			t.Errorf("%s: blocked eager gradient differs from sdpa's by %.3g (largest |gradient| %.3g)", n, worst, scale)
		}
	}
}

// splitForward runs rc through m with grad off in two cached passes, the
// first over positions [0, first) and the second over the rest, and
// returns the logits (B, T, V) of both, in order.
func splitForward(t *testing.T, m model.CausalLM, rc refCase, first int64) []float32 {
	t.Helper()
	cache, err := model.NewCache(m, int(rc.B), int(rc.T))
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	out := make([]float32, 0, rc.B*rc.T*rc.V)
	parts := make([][]float32, 2)
	for i, span := range [][2]int64{{0, first}, {first, rc.T}} {
		s := torch.NewScope()
		n := span[1] - span[0]
		err := torch.NoGrad(func() error {
			logits, err := m.Forward(s, model.Batch{
				IDs:       s.Narrow(s.FromInt64(rc.IDs, rc.B, rc.T), 1, span[0], n),
				Positions: s.Narrow(s.FromInt64(rc.Pos, rc.B, rc.T), 1, span[0], n),
				Mask:      s.Narrow(s.FromInt64(rc.Mask, rc.B, rc.T), 1, 0, span[1]),
				Cache:     cache,
			})
			if err != nil {
				return err
			}
			parts[i], err = torch.Float32s(logits) // (B, n, V)
			return err
		})
		s.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	for b := int64(0); b < rc.B; b++ { // (B, first, V) and (B, T−first, V) rows, joined per batch row
		out = append(out, parts[0][b*first*rc.V:(b+1)*first*rc.V]...)
		out = append(out, parts[1][b*(rc.T-first)*rc.V:(b+1)*(rc.T-first)*rc.V]...)
	}
	return out
}
