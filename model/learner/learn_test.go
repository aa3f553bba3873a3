package learner

import (
	"context"
	"testing"

	"github.com/evolm/evolm/method/grpo"
	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/generate"
	_ "github.com/evolm/evolm/model/llama"
	"github.com/evolm/evolm/model/modeltest"
	"github.com/evolm/evolm/model/sample"
	"github.com/evolm/evolm/model/torch"
	"github.com/evolm/evolm/serving/backend"
)

// toyModel builds a small random Qwen3 with a 256-token vocabulary.
func toyModel(t *testing.T, seed int64) model.CausalLM {
	t.Helper()
	return toyModelStd(t, seed, 0.02)
}

// toyModelStd is toyModel with weights drawn from N(0, std²).
func toyModelStd(t *testing.T, seed int64, std float64) model.CausalLM {
	t.Helper()
	cfg := &model.Config{
		Architectures: []string{"Qwen3ForCausalLM"}, ModelType: "qwen3",
		VocabSize: 256, HiddenSize: 64, IntermediateSize: 128, NumHiddenLayers: 2,
		NumAttentionHeads: 4, NumKeyValueHeads: 2, HeadDim: 16, HiddenAct: "silu",
		MaxPositionEmbeddings: 512, InitializerRange: std, RMSNormEps: 1e-6,
		RopeTheta: 1e6, TieWordEmbeddings: true,
	}
	return modeltest.Random(t, cfg, seed)
}

// targetReward is the toy reward: the fraction of completion tokens whose id
// is below 32 (an eighth of the vocabulary, so a random policy earns ≈ 0.125).
func targetReward(tokens []int) float64 {
	if len(tokens) == 0 {
		return 0
	}
	hit := 0
	for _, id := range tokens {
		if id < 32 {
			hit++
		}
	}
	return float64(hit) / float64(len(tokens))
}

// TestGRPOLearnsToyReward runs the real loop (sample n per prompt, group
// advantages, clipped surrogate with KL, AdamW) and asserts that the mean
// reward of the last steps is clearly above that of the first steps.
func TestGRPOLearnsToyReward(t *testing.T) {
	base := torch.Live()
	checkLearned(t, "GRPO", learnToy(t, toyModel(t, 7), nil))
	modeltest.CheckLeaks(t, base)
}

// checkLearned asserts that the mean reward of the last steps of curve is
// clearly above that of its first steps; who names the learner in messages.
func checkLearned(t *testing.T, who string, curve []float64) {
	t.Helper()
	const window = 5
	first, last := avg(curve[:window]), avg(curve[len(curve)-window:])
	t.Logf("%s mean reward: first %d steps %.3f, last %d steps %.3f (margin %+.3f)", who, window, first, window, last, last-first)
	if last-first < 0.15 {
		t.Errorf("%s did not learn the toy reward: first %.3f, last %.3f; want a rise of at least 0.15", who, first, last)
	}
}

// learnToy trains the toy policy m for 30 steps and returns its reward
// curve; tweak, when set, changes the trainer config (LoRA). It closes m.
func learnToy(t *testing.T, m model.CausalLM, tweak func(*TrainerConfig)) []float64 {
	defer m.Close()
	cfg := DefaultTrainerConfig()
	cfg.LR = 3e-3 // a toy model learns at a toy learning rate
	cfg.MicroBatch = 16
	if tweak != nil {
		tweak(&cfg)
	}
	tr, err := NewTrainer(m, nil, cfg, model.SaveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	gen := generate.New(m, nil, generate.Options{})
	prompts := [][]int{{200, 201, 202}, {210, 45, 99, 3}, {128, 129}, {250}}
	const steps, n = 30, 8
	var curve []float64
	ctx := context.Background()
	for step := 0; step < steps; step++ {
		reqs := make([]generate.Request, len(prompts))
		for i, p := range prompts {
			reqs[i] = generate.Request{Prompt: p, N: n, Sampling: sample.Params{Temperature: 1}, MaxNewTokens: 12, Seed: uint64(1000*step + 10*i)}
		}
		out, err := gen.Generate(ctx, reqs)
		if err != nil {
			t.Fatal(err)
		}
		var batch []backend.TrainSample
		var mean float64
		for i, samples := range out {
			rewards := make([]float64, len(samples))
			for j, s := range samples {
				rewards[j] = targetReward(s.Tokens)
				mean += rewards[j]
			}
			adv, st := grpo.GroupAdvantages(rewards, grpo.FillGroupMean, true)
			if st.ZeroStd {
				continue
			}
			for j, s := range samples {
				batch = append(batch, backend.TrainSample{
					PromptTokenIDs: prompts[i], CompletionTokenIDs: s.Tokens,
					Advantage: adv[j], OldLogProbs: toF64(s.LogProbs),
				})
			}
		}
		mean /= float64(len(prompts) * n)
		curve = append(curve, mean)
		if len(batch) == 0 {
			continue
		}
		stats, err := tr.TrainStep(ctx, batch)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("step %2d reward %.3f loss %+.4f kl %.5f clip %.3f grad %.3f", step, mean, stats.Loss, stats.KL, stats.ClipFrac, stats.GradNorm)
	}
	return curve
}

func avg(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}
