package learner

import (
	"context"
	"testing"

	"github.com/evolm/evolm/method/grpo"
	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/generate"
	"github.com/evolm/evolm/model/modeltest"
	"github.com/evolm/evolm/model/sample"
	"github.com/evolm/evolm/model/torch"
	"github.com/evolm/evolm/serving/backend"
)

// toyGroup is one prompt's samples with their rewards and advantages.
type toyGroup struct {
	prompt  []int
	samples []generate.Sample
	adv     []float64
	stats   grpo.GroupStats
}

// TestActiveSamplingRefillsTiedGroups: with a toy reward under which every
// other prompt's samples all tie, active sampling refills the step until it
// has prompts_per_step groups with a reward spread, counts the refills, and
// the step trains on those groups; with the refill rounds capped, it trains
// on what it has.
func TestActiveSamplingRefillsTiedGroups(t *testing.T) {
	base := torch.Live()
	activeSampling(t)
	modeltest.CheckLeaks(t, base)
}

func activeSampling(t *testing.T) {
	m := toyModel(t, 11)
	defer m.Close()
	cfg := DefaultTrainerConfig()
	cfg.MicroBatch = 16
	tr, err := NewTrainer(m, nil, cfg, model.SaveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	gen := generate.New(m, nil, generate.Options{})

	// Even-numbered prompts of the stream are "tied": their reward is a
	// constant, so their groups carry no signal. Odd ones earn the toy reward.
	stream := make([][]int, 16)
	for i := range stream {
		stream[i] = []int{200 + i, 100 + i}
	}
	tied := func(p []int) bool { return (p[0]-200)%2 == 0 }
	const perStep, n = 4, 6
	run := func(maxRounds int) (kept, all []toyGroup, r grpo.Refills) {
		cursor := 0
		sampleFn := func(ctx context.Context, round, k int) ([]toyGroup, error) {
			reqs := make([]generate.Request, k)
			ps := stream[cursor : cursor+k]
			cursor += k
			for i, p := range ps {
				reqs[i] = generate.Request{Prompt: p, N: n, Sampling: sample.Params{Temperature: 1}, MaxNewTokens: 8, Seed: uint64(100*round + i)}
			}
			out, err := gen.Generate(ctx, reqs)
			if err != nil {
				return nil, err
			}
			gs := make([]toyGroup, k)
			for i, samples := range out {
				rewards := make([]float64, len(samples))
				for j, s := range samples {
					rewards[j] = 0.5
					if !tied(ps[i]) {
						rewards[j] = targetReward(s.Tokens) + 0.01*float64(j) // never all equal
					}
				}
				adv, st := grpo.GroupAdvantages(rewards, grpo.FillGroupMean, grpo.StdPopulation.Unbiased())
				gs[i] = toyGroup{prompt: ps[i], samples: samples, adv: adv, stats: st}
			}
			return gs, nil
		}
		kept, all, r, err := grpo.FillGroups(context.Background(), perStep, maxRounds, sampleFn, func(g toyGroup) bool { return !g.stats.ZeroStd })
		if err != nil {
			t.Fatal(err)
		}
		return kept, all, r
	}

	// prompts 0–3 give two groups with a signal; refill 4–5 gives one, 6
	// none, 7 the last: three rounds, four refilled prompts.
	kept, all, r := run(8)
	if len(kept) != perStep {
		t.Fatalf("kept %d groups, want prompts_per_step = %d", len(kept), perStep)
	}
	if r != (grpo.Refills{Prompts: 4, Rounds: 3}) || len(all) != perStep+r.Prompts {
		t.Errorf("refills %+v over %d groups, want {Prompts:4 Rounds:3} over 8", r, len(all))
	}
	var batch []backend.TrainSample
	for _, g := range kept {
		if tied(g.prompt) || g.stats.ZeroStd {
			t.Errorf("kept a tied group (prompt %v)", g.prompt)
		}
		for j, s := range g.samples {
			batch = append(batch, backend.TrainSample{PromptTokenIDs: g.prompt, CompletionTokenIDs: s.Tokens, Advantage: g.adv[j]})
		}
	}
	st, err := tr.TrainStep(context.Background(), batch)
	if err != nil {
		t.Fatal(err)
	}
	if want := perStep * n * 8; st.Tokens != want {
		t.Errorf("the step trained on %d tokens, want %d (%d groups × %d samples × 8 tokens)", st.Tokens, want, perStep, n)
	}

	// capped at one refill round: prompts 4–5 add one group, then stop
	kept, _, r = run(1)
	if len(kept) != 3 || r != (grpo.Refills{Prompts: 2, Rounds: 1}) {
		t.Errorf("capped: kept %d groups, refills %+v; want 3 and {Prompts:2 Rounds:1}", len(kept), r)
	}
	// no active sampling: the tied groups are dropped
	kept, all, r = run(0)
	if len(kept) != 2 || len(all) != perStep || r != (grpo.Refills{}) {
		t.Errorf("off: kept %d of %d groups, refills %+v; want 2 of 4 and none", len(kept), len(all), r)
	}
}

// TestTrainerPackNormalisation: the trainer's pack loss is the same whatever
// the micro-batch size; with rows of one sequence it is grpo's loss and with
// one row for the whole batch dapo's.
func TestTrainerPackNormalisation(t *testing.T) {
	base := torch.Live()
	batch := []backend.TrainSample{
		{PromptTokenIDs: []int{1, 2, 3}, CompletionTokenIDs: []int{40, 41, 42, 43, 44}, Advantage: 1.2},
		{PromptTokenIDs: []int{1, 2, 3}, CompletionTokenIDs: []int{50, 51}, Advantage: -0.7},
		{PromptTokenIDs: []int{9, 8}, CompletionTokenIDs: []int{60, 61, 62}, Advantage: 0.4},
		{PromptTokenIDs: []int{9, 8}, CompletionTokenIDs: []int{70, 71, 72, 73, 74, 75, 76}, Advantage: -0.9},
	}
	loss := func(norm grpo.LossNorm, packLength, micro int) float64 {
		m := toyModel(t, 7)
		defer m.Close()
		cfg := DefaultTrainerConfig()
		cfg.Loss.Norm, cfg.Loss.PackLength, cfg.MicroBatch = norm, packLength, micro
		tr, err := NewTrainer(m, nil, cfg, model.SaveOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		st, err := tr.TrainStep(context.Background(), batch)
		if err != nil {
			t.Fatal(err)
		}
		return st.Loss
	}
	// rows of at most 14 tokens: {0, 1} (8 + 5 prompt+completion tokens), {2, 3} (5 + 9)
	packed := loss(grpo.NormPack, 14, 4)
	if d := packed - loss(grpo.NormPack, 14, 1); d > 1e-6 || d < -1e-6 {
		t.Errorf("pack loss depends on the micro-batch size: %.8f vs %.8f", packed, packed-d)
	}
	if a, b := loss(grpo.NormPack, 1, 2), loss(grpo.NormGRPO, 0, 2); a-b > 1e-6 || b-a > 1e-6 {
		t.Errorf("pack with rows of one sequence = %.8f, grpo = %.8f", a, b)
	}
	if a, b := loss(grpo.NormPack, 1000, 3), loss(grpo.NormDAPO, 0, 3); a-b > 1e-6 || b-a > 1e-6 {
		t.Errorf("pack with one row = %.8f, dapo = %.8f", a, b)
	}
	if _, err := NewTrainer(nil, nil, TrainerConfig{MicroBatch: 1, Loss: LossConfig{Norm: grpo.NormPack}}, model.SaveOptions{}); err == nil {
		t.Error("pack normalisation without a pack length: want an error")
	}
	modeltest.CheckLeaks(t, base)
}
