package llama_test

import (
	"math"
	"slices"
	"testing"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/fused"
	"github.com/evolm/evolm/model/llama"
	"github.com/evolm/evolm/model/modeltest"
	"github.com/evolm/evolm/model/safetensors"
	"github.com/evolm/evolm/model/torch"
)

// TestWriteLogitsEqualsLogits: the logits a decode step writes into its
// reused buffer (model.LogitsWriter) are Logits' bit for bit, for a tied and
// an untied head, and a head WriteLogits cannot serve (bfloat16) is
// refused, with nothing written.
func TestWriteLogitsEqualsLogits(t *testing.T) {
	for _, tc := range []struct {
		name string
		tied bool
	}{{"tied", true}, {"untied", false}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &model.Config{Architectures: []string{"Qwen3ForCausalLM"}, HiddenSize: 32, IntermediateSize: 64, NumHiddenLayers: 1,
				NumAttentionHeads: 4, NumKeyValueHeads: 2, HeadDim: 8, VocabSize: 301, TieWordEmbeddings: tc.tied,
				MaxPositionEmbeddings: 64, InitializerRange: 0.3, RMSNormEps: 1e-6, RopeTheta: 1e6}
			m := modeltest.Random(t, cfg, 5)
			defer m.Close()
			base := torch.Live()
			func() {
				s := torch.NewScope()
				defer s.Close()
				h := s.Randn([]int64{3, 1, 32}, torch.Float32, torch.CPU)
				want, err := m.Logits(s, h)
				if err != nil {
					t.Fatal(err)
				}
				out := s.Full([]int64{3, 1, 301}, 7, torch.Float32, torch.CPU)
				ok, err := m.(model.LogitsWriter).WriteLogits(s, h, out)
				if err != nil || !ok {
					t.Fatalf("WriteLogits: %v, %v", ok, err)
				}
				if w, g := modeltest.Float32s(t, want), modeltest.Float32s(t, out); !slices.Equal(w, g) {
					t.Errorf("written logits differ from Logits")
				}
				hb := s.ToDType(h, torch.BFloat16)
				before := modeltest.Float32s(t, out)
				if ok, err := m.(model.LogitsWriter).WriteLogits(s, hb, out); ok || err != nil {
					t.Errorf("bfloat16 hidden states: WriteLogits = %v, %v; want false, nil", ok, err)
				}
				if !slices.Equal(before, modeltest.Float32s(t, out)) {
					t.Errorf("a refused WriteLogits wrote into out")
				}
			}()
			modeltest.CheckLeaks(t, base)
		})
	}
}

// TestHeadFormsMatchLinear: with grad off on CPU the lm_head runs over its
// packed weight (fused.PackedLinear), except for 1 row of a model narrower
// than 128 at 1 thread, which is the packed form on an AMD CPU and
// F.linear on others (packedHead, oneRowPacked). Whatever the form,
// Logits and WriteLogits agree bit for bit and equal F.linear within
// float32 rounding; with grad on, or EVOLM_PACKED=0 (SetPacked) at 2 rows,
// Logits is F.linear itself.
func TestHeadFormsMatchLinear(t *testing.T) {
	if !fused.PackedAvailable() {
		t.Skip("this libtorch has no oneDNN linear")
	}
	defer torch.SetGrad(false)()
	defer torch.SetNumThreads(torch.NumThreads())
	const V = 1001
	base := torch.Live()
	logits := func(m model.CausalLM, h *torch.Tensor, s *torch.Scope) (got, lin []float32) {
		t.Helper()
		sh, err := torch.Shape(h)
		if err != nil {
			t.Fatal(err)
		}
		lg, err := m.Logits(s, h)
		if err != nil {
			t.Fatal(err)
		}
		out := s.Empty([]int64{sh[0], 1, V}, torch.Float32, torch.CPU)
		if ok, err := m.(model.LogitsWriter).WriteLogits(s, h, out); err != nil || !ok {
			t.Fatalf("WriteLogits: %v, %v", ok, err)
		}
		got = modeltest.Float32s(t, lg)
		if !slices.Equal(got, modeltest.Float32s(t, out)) {
			t.Errorf("%d rows: WriteLogits differs from Logits", sh[0])
		}
		return got, modeltest.Float32s(t, s.Linear(h, m.Parameters()[0].Tensor, nil)) // the tied embedding: lm_head's weight
	}
	for _, C := range []int{64, 128} {
		m := modeltest.Random(t, headConfig(C, V), 7)
		for _, threads := range []int{1, 2} {
			torch.SetNumThreads(threads)
			for _, rows := range []int64{1, 2, 3, 4, 5, 6, 64} {
				func() {
					s := torch.NewScope()
					defer s.Close()
					h := s.Randn([]int64{rows, 1, int64(C)}, torch.Float32, torch.CPU)
					got, lin := logits(m, h, s)
					d, scale := headDiff(lin, got)
					t.Logf("C %d, %d threads, %d rows: max |Logits − F.linear| %.3g of max |logit| %.3g", C, threads, rows, d, scale)
					if d > 1e-5*scale {
						t.Errorf("C %d, %d threads, %d rows: Logits differs from F.linear by %.3g", C, threads, rows, d)
					}
					if rows == 1 && C < 128 && threads == 1 {
						// The form for this CPU (oneRowPacked): the packed
						// linear itself on AMD, else F.linear itself.
						want, form := lin, "F.linear"
						if fused.CPUVendor() == "amd" {
							want, form = modeltest.Float32s(t, fused.PackedLinear(s, h, m.Parameters()[0].Tensor, nil)), "the packed linear"
						}
						if !slices.Equal(got, want) {
							t.Errorf("C %d, 1 thread, 1 row: Logits should be %s itself on this CPU", C, form)
						}
					}
				}()
			}
		}
		for _, c := range []struct {
			name string
			grad bool
		}{{"grad on", true}, {"EVOLM_PACKED=0", false}} {
			func() {
				if c.grad {
					defer torch.SetGrad(true)()
				} else {
					defer llama.SetPacked(llama.SetPacked(false))
				}
				s := torch.NewScope()
				defer s.Close()
				got, lin := logits(m, s.Randn([]int64{2, 1, int64(C)}, torch.Float32, torch.CPU), s)
				if d, _ := headDiff(lin, got); d != 0 {
					t.Errorf("C %d, %s: Logits differs from F.linear by %.3g; want F.linear itself", C, c.name, d)
				}
			}()
		}
		if n, _ := fused.PackedStats(); n == 0 {
			t.Errorf("C %d: no weight is held packed: the packed head did not run", C)
		}
		m.Close()
	}
	modeltest.CheckLeaks(t, base)
}

// TestPackedHeadFollowsWeights: the packed head is repacked whenever the
// weight changes, through an in-place op (an optimizer step), through
// model.LoadWeights' raw copy into the parameter's memory, and when another
// model's weight takes the freed one's place.
func TestPackedHeadFollowsWeights(t *testing.T) {
	if !fused.PackedAvailable() {
		t.Skip("this libtorch has no oneDNN linear")
	}
	defer torch.SetGrad(false)()
	const C, V = 64, 503
	cfg := headConfig(C, V)
	m := modeltest.Random(t, cfg, 1)
	defer func() { m.Close() }()
	w := m.Parameters()[0].Tensor
	check := func(what string) {
		t.Helper()
		s := torch.NewScope()
		defer s.Close()
		torch.ManualSeed(3)
		h := s.Randn([]int64{3, 1, C}, torch.Float32, torch.CPU)
		got, err := m.Logits(s, h)
		if err != nil {
			t.Fatal(err)
		}
		d, scale := headDiff(modeltest.Float32s(t, s.Linear(h, w, nil)), modeltest.Float32s(t, got))
		if d > 1e-5*scale {
			t.Errorf("%s: the packed head differs from F.linear over the current weight by %.3g (of %.3g): a stale packed copy", what, d, scale)
		}
	}
	check("first use")
	func() { // an in-place update, as an optimizer step makes
		s := torch.NewScope()
		defer s.Close()
		s.Add_(w, s.Randn([]int64{V, C}, torch.Float32, torch.CPU))
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
	}()
	check("after an in-place update")

	dir := t.TempDir()
	other := modeltest.Random(t, cfg, 2)
	if err := model.Save(other, dir, model.SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	other.Close()
	ckpt, err := safetensors.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ckpt.Close()
	if err := model.LoadWeights(m, ckpt); err != nil {
		t.Fatal(err)
	}
	check("after LoadWeights")

	// A new model over freed memory: its weight must not find the old
	// model's packed copy.
	m.Close()
	m = modeltest.Random(t, cfg, 3)
	w = m.Parameters()[0].Tensor
	check("a new model")
}

func headConfig(C, V int) *model.Config {
	return &model.Config{Architectures: []string{"Qwen3ForCausalLM"}, HiddenSize: C, IntermediateSize: 64, NumHiddenLayers: 1,
		NumAttentionHeads: 4, NumKeyValueHeads: 2, HeadDim: C / 4, VocabSize: V, TieWordEmbeddings: true,
		MaxPositionEmbeddings: 64, InitializerRange: 0.3, RMSNormEps: 1e-6, RopeTheta: 1e6}
}

// headDiff is max |a − b| and max |a|.
func headDiff(a, b []float32) (d, scale float64) {
	if len(a) != len(b) {
		return math.Inf(1), 0
	}
	for i := range a {
		d = max(d, math.Abs(float64(a[i])-float64(b[i])))
		scale = max(scale, math.Abs(float64(a[i])))
	}
	return d, scale
}

// rampAdapter is a test double of a model.LinearAdapter: it adds to each
// output column its index times 0.01, so a gather of the wrong columns
// shows.
type rampAdapter struct{}

func (rampAdapter) Adapt(s *torch.Scope, x, y *torch.Tensor) *torch.Tensor {
	sh, _ := torch.Shape(y)
	return s.Add(y, s.MulScalar(s.Arange(0, sh[len(sh)-1], torch.Float32, torch.CPU), 0.01))
}

// TestTokenLogitsMatchLogits: the head over a few vocabulary rows
// (model.TokenLogitser, the yes/no judge's candidates) equals those
// columns of the full Logits within float32 rounding, for a tied and an
// untied head, one with a bias and one with an adapter, grad off and on,
// with a repeated id, and frees what it made.
func TestTokenLogitsMatchLogits(t *testing.T) {
	const V = 1001
	base := torch.Live()
	for _, head := range []string{"tied", "untied", "bias", "adapter"} {
		tied := head == "tied"
		cfg := headConfig(128, V)
		cfg.TieWordEmbeddings = tied
		m := modeltest.Random(t, cfg, 11)
		lm := m.(*llama.ForCausalLM)
		switch head {
		case "bias":
			func() {
				s := torch.NewScope()
				defer s.Close()
				lm.LMHead.Bias = s.Keep(s.Randn([]int64{V}, torch.Float32, torch.CPU))
			}()
		case "adapter":
			lm.LMHead.Adapter = rampAdapter{}
		}
		for _, grad := range []bool{false, true} {
			func() {
				defer torch.SetGrad(grad)()
				s := torch.NewScope()
				defer s.Close()
				ids := []int64{5, 1000, 0, 5, 77}
				h := s.Randn([]int64{3, 2, 128}, torch.Float32, torch.CPU)
				full, err := m.Logits(s, h)
				if err != nil {
					t.Fatal(err)
				}
				got, err := m.(model.TokenLogitser).TokenLogits(s, h, s.FromInt64(ids, int64(len(ids))))
				if err != nil {
					t.Fatal(err)
				}
				if sh, _ := torch.Shape(got); !slices.Equal(sh, []int64{3, 2, int64(len(ids))}) {
					t.Fatalf("%s head, grad %v: shape %v, want [3 2 %d]", head, grad, sh, len(ids))
				}
				all, g := modeltest.Float32s(t, full), modeltest.Float32s(t, got)
				var want []float32
				for r := range 6 {
					for _, id := range ids {
						want = append(want, all[r*V+int(id)])
					}
				}
				d, scale := headDiff(want, g)
				t.Logf("%s head, grad %v: max |TokenLogits − Logits| %.3g of max |logit| %.3g", head, grad, d, scale)
				if d > 1e-5*scale {
					t.Errorf("%s head, grad %v: TokenLogits differs from Logits by %.3g", head, grad, d)
				}
			}()
		}
		if head == "bias" {
			torch.Drop(lm.LMHead.Bias)
			lm.LMHead.Bias = nil
		}
		m.Close()
	}
	modeltest.CheckLeaks(t, base)
}
