package llama_test

import (
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
