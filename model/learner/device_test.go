package learner

import (
	"context"
	"math"
	"testing"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/modeltest"
	"github.com/evolm/evolm/model/torch"
	"github.com/evolm/evolm/serving/backend"
)

// TestTrainStepBFloat16 runs the learner's GRPO step on the dtype a CUDA
// policy has, bfloat16 parameters (here on the CPU), beside the float32
// step on the same weights (the float32 model's, rounded to bfloat16): the
// loss, KL and gradient norm agree within bfloat16 rounding, the parameters
// stay bfloat16 and move (AdamW updates a float32 master copy and rounds
// it back: model/optim's TestBF16MasterWeights), and a second step, whose
// reference is the frozen bfloat16 copy, runs too.
func TestTrainStepBFloat16(t *testing.T) {
	base := torch.Live()
	cfg := &model.Config{
		Architectures: []string{"Qwen3ForCausalLM"}, ModelType: "qwen3",
		VocabSize: 256, HiddenSize: 64, IntermediateSize: 128, NumHiddenLayers: 2,
		NumAttentionHeads: 4, NumKeyValueHeads: 2, HeadDim: 16, HiddenAct: "silu",
		MaxPositionEmbeddings: 512, InitializerRange: 0.1, RMSNormEps: 1e-6,
		RopeTheta: 1e6, TieWordEmbeddings: true,
	}
	m32 := modeltest.Random(t, cfg, 11)
	m16, err := model.Build(cfg, model.LoadOptions{DType: torch.BFloat16})
	if err != nil {
		t.Fatal(err)
	}
	if err := model.Randomize(m16, 11); err != nil { // the same draws, rounded
		t.Fatal(err)
	}
	tc := DefaultTrainerConfig()
	tc.MicroBatch = 4
	tc.LR = 1e-3
	step := func(m model.CausalLM) (first, second backend.TrainStats, before []float32) {
		tr, err := NewTrainer(m, nil, tc, model.SaveOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		before = modeltest.Float32s(t, m.Parameters()[0].Tensor)
		batch := loraBatch(1)
		for i, s := range batch { // off-policy by a little, with a reference to be KL'd against
			batch[i].OldLogProbs = make([]float64, len(s.CompletionTokenIDs))
			batch[i].RefLogProbs = make([]float64, len(s.CompletionTokenIDs))
			for j := range s.CompletionTokenIDs {
				batch[i].OldLogProbs[j], batch[i].RefLogProbs[j] = -5.5+0.1*float64(j), -5.6
			}
		}
		if first, err = tr.TrainStep(context.Background(), batch); err != nil {
			t.Fatal(err)
		}
		if second, err = tr.TrainStep(context.Background(), loraBatch(2)); err != nil {
			t.Fatal(err)
		}
		return first, second, before
	}
	s32, _, _ := step(m32)
	s16, second, before := step(m16)
	t.Logf("float32: loss %.6f KL %.6f |g| %.5f; bfloat16: loss %.6f KL %.6f |g| %.5f; second bf16 step loss %.6f",
		s32.Loss, s32.KL, s32.GradNorm, s16.Loss, s16.KL, s16.GradNorm, second.Loss)
	near := func(what string, got, want, rel, abs float64) {
		if math.IsNaN(got) || math.Abs(got-want) > rel*math.Abs(want)+abs {
			t.Errorf("%s: bfloat16 %.6g, float32 %.6g (beyond %.0f%% + %g)", what, got, want, 100*rel, abs)
		}
	}
	// The loss is a small sum of terms of both signs: an absolute margin.
	near("loss", s16.Loss, s32.Loss, 0.03, 3e-3)
	near("KL", s16.KL, s32.KL, 0.05, 0)
	near("grad norm", s16.GradNorm, s32.GradNorm, 0.05, 0)
	if s16.Skipped != "" || second.Skipped != "" || math.IsNaN(second.Loss) {
		t.Errorf("bfloat16 steps skipped: %q, %q (second loss %v)", s16.Skipped, second.Skipped, second.Loss)
	}
	p := m16.Parameters()[0].Tensor
	if torch.DTypeOf(p) != torch.BFloat16 {
		t.Errorf("%s is %s after the steps, want bfloat16", m16.Parameters()[0].Name, torch.DTypeName(torch.DTypeOf(p)))
	}
	if modeltest.MaxAbsDiff(before, modeltest.Float32s(t, p)) == 0 {
		t.Errorf("%s did not move in two bfloat16 steps", m16.Parameters()[0].Name)
	}
	m32.Close()
	m16.Close()
	modeltest.CheckLeaks(t, base)
}
