package llama_test

import (
	"math"
	"slices"
	"testing"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/modeltest"
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

// TestStreamedHeadMatchesLinear: where lm_head runs as W·hᵀ (streamedHead:
// 2 to 4 rows, or 1 row at width ≥ 128, on CPU), Logits and WriteLogits
// agree bit for bit and equal F.linear within float32 rounding; for other
// row counts both are F.linear itself.
func TestStreamedHeadMatchesLinear(t *testing.T) {
	const C, V = 128, 1001
	cfg := &model.Config{Architectures: []string{"Qwen3ForCausalLM"}, HiddenSize: C, IntermediateSize: 64, NumHiddenLayers: 1,
		NumAttentionHeads: 4, NumKeyValueHeads: 2, HeadDim: 32, VocabSize: V, TieWordEmbeddings: true,
		MaxPositionEmbeddings: 64, InitializerRange: 0.3, RMSNormEps: 1e-6, RopeTheta: 1e6}
	m := modeltest.Random(t, cfg, 7)
	defer m.Close()
	w := m.Parameters()[0].Tensor // the tied embedding: lm_head's weight
	base := torch.Live()
	for rows := int64(1); rows <= 6; rows++ {
		func() {
			s := torch.NewScope()
			defer s.Close()
			h := s.Randn([]int64{rows, 1, C}, torch.Float32, torch.CPU)
			got, err := m.Logits(s, h)
			if err != nil {
				t.Fatal(err)
			}
			out := s.Empty([]int64{rows, 1, V}, torch.Float32, torch.CPU)
			if ok, err := m.(model.LogitsWriter).WriteLogits(s, h, out); err != nil || !ok {
				t.Fatalf("WriteLogits: %v, %v", ok, err)
			}
			g, wr := modeltest.Float32s(t, got), modeltest.Float32s(t, out)
			lin := modeltest.Float32s(t, s.Linear(h, w, nil))
			if !slices.Equal(g, wr) {
				t.Errorf("%d rows: WriteLogits differs from Logits", rows)
			}
			d, scale := 0.0, 0.0
			for i := range lin {
				d = max(d, math.Abs(float64(lin[i])-float64(g[i])))
				scale = max(scale, math.Abs(float64(lin[i])))
			}
			streamed := rows <= 4
			t.Logf("%d rows (streamed %v): max |Logits − F.linear| %.3g of max |logit| %.3g", rows, streamed, d, scale)
			if len(g) != len(lin) || d > 1e-5*scale {
				t.Errorf("%d rows: Logits differs from F.linear by %.3g", rows, d)
			}
			if !streamed && d != 0 {
				t.Errorf("%d rows: Logits should be F.linear itself", rows)
			}
		}()
	}
	modeltest.CheckLeaks(t, base)
}
