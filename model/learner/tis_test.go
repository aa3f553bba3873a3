package learner

import (
	"context"
	"math"
	"testing"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/generate"
	"github.com/evolm/evolm/model/sample"
	"github.com/evolm/evolm/serving/backend"
)

// TestTrainStepAppliesTIS: TrainStep passes the samples' sampler log-probs
// to the loss. With a sampler 4× less likely than the learner on every
// token and tis_cap 2, each token's policy-gradient term is weighted by 2:
// with β = 0 and one sample (advantage 1, on-policy ratio 1) the loss and
// the gradient norm are exactly twice those without the correction; a
// sample whose sampler log-probs are missing keeps weight 1.
func TestTrainStepAppliesTIS(t *testing.T) {
	m := toyModel(t, 3)
	gen := generate.New(m, nil, generate.Options{})
	out, err := gen.Generate(context.Background(), []generate.Request{{Prompt: []int{200, 201}, N: 1,
		Sampling: sample.Params{Temperature: 1}, MaxNewTokens: 6, Seed: 9}})
	m.Close()
	if err != nil {
		t.Fatal(err)
	}
	s := out[0][0]
	sampler := make([]float64, len(s.LogProbs))
	for i, lp := range s.LogProbs {
		sampler[i] = float64(lp) - math.Log(4)
	}
	step := func(cap float64, samplerLPs []float64) backend.TrainStats {
		t.Helper()
		pm := toyModel(t, 3)
		defer pm.Close()
		cfg := DefaultTrainerConfig()
		cfg.Loss.Beta, cfg.Loss.TISCap, cfg.MaxGradNorm = 0, cap, 0
		tr, err := NewTrainer(pm, nil, cfg, model.SaveOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		st, err := tr.TrainStep(context.Background(), []backend.TrainSample{{PromptTokenIDs: []int{200, 201},
			CompletionTokenIDs: s.Tokens, Advantage: 1, SamplerLogProbs: samplerLPs}})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	plain, tis := step(0, sampler), step(2, sampler)
	if math.Abs(tis.Loss-2*plain.Loss) > 1e-6 || math.Abs(tis.GradNorm-2*plain.GradNorm) > 1e-5*plain.GradNorm {
		t.Errorf("with TIS (weight 2): loss %.7f grad %.7f; without: loss %.7f grad %.7f; want exactly twice", tis.Loss, tis.GradNorm, plain.Loss, plain.GradNorm)
	}
	if unknown := step(2, sampler[:1]); math.Abs(unknown.Loss-plain.Loss) > 1e-7 {
		t.Errorf("sampler log-probs of the wrong length: loss %.7f, want the uncorrected %.7f", unknown.Loss, plain.Loss)
	}
}
