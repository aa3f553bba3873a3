package run

import (
	"context"
	"fmt"
	"math"

	"github.com/evolm/evolm/method/grpo"
	"github.com/evolm/evolm/method/pairs"
	"github.com/evolm/evolm/method/rules"
	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/stages/judge"
)

// rubricStep: pairs from the three strategies, n rubrics per pair, judged
// on a+ and a−, GRPO on the rubric generator. With rubric_active_sampling,
// pair groups whose rubric rewards all tie are replaced by groups of pairs
// built from new prompts (refill rounds, grpo.FillGroups) until
// prompts_per_step groups carry a signal, as the official code's active
// sampling does in this phase too.
func (l *loop) rubricStep(ctx context.Context, step int) (schemas.StepMetrics, error) {
	phase := schemas.PhaseRubric
	m := schemas.StepMetrics{Step: int64(step), Phase: phase}
	rounds := 0
	if l.cfg.RubricActive {
		rounds = l.cfg.ActiveRounds
	}
	pb := l.pairBuilder()
	var gs groupStats
	out := rubricRound{rewards: map[string][]float64{}, counts: map[string]int64{}}
	first := 0 // the step's pairs so far: a refill's pairs continue their ids and draws
	sample := func(ctx context.Context, round, n int) ([]*rubricGroup, error) {
		batch := l.batch(step)
		if round > 0 {
			batch = l.refill(step, round, n)
		}
		r, err := l.rubricRound(ctx, step, first, batch, pb, &gs)
		if err != nil {
			return nil, err
		}
		first += len(batch)
		out.append(r)
		return r.groups, nil
	}
	kept, _, refills, err := grpo.FillGroups(ctx, l.cfg.PromptsPerStep, rounds, sample, func(g *rubricGroup) bool { return len(g.samples) > 0 })
	if err != nil {
		return m, err
	}
	m.RefillPrompts, m.RefillRounds, m.GroupsTrained = int64(refills.Prompts), int64(refills.Rounds), int64(len(kept))
	if refills.Rounds > 0 {
		l.env.Log.Debug("active sampling", "step", step, "phase", phase, "refill_rounds", refills.Rounds, "refill_prompts", refills.Prompts,
			"groups_with_signal", len(kept), "want", l.cfg.PromptsPerStep)
	}
	lengthEntropy(out.rubRolls, &m)
	l.stepStats(&m, out.rubRolls, out.built)
	m.FormatRate = (&policyRound{rubs: out.rubs}).formatRate()
	m.JudgeMissingRate = missingRate(out.js)
	gs.fill(&m)
	m.MarginMean = meanPtr(out.margins)
	m.RewardTemporal = meanPtr(out.rewards[schemas.StrategyTemporal])
	m.RewardBacktranslate = meanPtr(out.rewards[schemas.StrategyBacktranslate])
	m.RewardRubricGuided = meanPtr(out.rewards[schemas.StrategyRubricGuided])
	m.CountTemporal = out.counts[schemas.StrategyTemporal]
	m.CountBacktranslate = out.counts[schemas.StrategyBacktranslate]
	m.CountRubricGuided = out.counts[schemas.StrategyRubricGuided]
	var samples []backend.TrainSample
	for _, g := range kept {
		samples = append(samples, g.samples...)
	}
	if err := l.update(ctx, l.rubric, samples, &m); err != nil {
		return m, fmt.Errorf("rubric generator update: %w", err)
	}

	var polRolls []schemas.Rollout
	rubRolls := out.rubRolls
	for _, r := range out.built {
		if r.Role == schemas.RolePolicy {
			polRolls = append(polRolls, r)
		} else {
			rubRolls = append(rubRolls, r)
		}
	}
	l.keepSamples(out.rubs, polRolls)
	if err := write(l, schemas.Pairs, out.pairs, step, phase); err != nil {
		return m, err
	}
	if err := write(l, schemas.Rollouts, polRolls, step, phase, rolePolicy); err != nil {
		return m, err
	}
	if err := write(l, schemas.Rollouts, rubRolls, step, phase, roleRubric); err != nil {
		return m, err
	}
	if err := write(l, schemas.Rubrics, out.rubs, step, phase); err != nil {
		return m, err
	}
	return m, write(l, schemas.Judgments, out.js, step, phase)
}

// pairBuilder is the rubric phase's pair builder.
func (l *loop) pairBuilder() *pairs.Builder {
	pcfg := pairs.DefaultConfig(l.cfg.Policy.Sampling.MaxTokens)
	pcfg.Weights = l.cfg.Weights
	pcfg.Window = pairs.Window{MinAge: l.cfg.MinAge, MaxAge: l.cfg.MaxAge}
	pcfg.WidenStep = l.cfg.Widen
	pcfg.Age, pcfg.Fallback, pcfg.PolicyIndex = l.cfg.TemporalAge, l.cfg.TemporalFallback, l.cfg.PolicyIndex
	pcfg.Policy, pcfg.Infer, pcfg.Rubric = l.cfg.Policy.Sampling, l.cfg.Policy.Sampling, l.cfg.rubricPhaseSampling()
	pcfg.Infer.Temperature = l.cfg.InferTemp
	pcfg.Seed, pcfg.Model, pcfg.Checkpoint = l.cfg.Seed, l.policy.Model, l.ckpt
	pcfg.RubricFormat = l.cfg.Rules.Format
	pb := &pairs.Builder{Policy: timedGen{l.policy.Backend, &l.clock, partGeneration}, RubricGen: timedGen{l.rubric.Backend, &l.clock, partRubrics},
		Prompts: l.set, Buffer: l.buf, Cfg: pcfg, Log: l.env.Log}
	if l.inferrer != nil {
		// backtranslate_source frozen_initial: the initial model infers.
		pb.Inferrer, pb.Cfg.InferCheckpoint = timedGen{l.inferrer, &l.clock, partGeneration}, "initial"
	}
	return pb
}

// rubricGroup is one pair of a rubric step with the GRPO samples of its n
// candidate rubrics (none when their rewards carry no signal).
type rubricGroup struct {
	pair    *schemas.Pair
	samples []backend.TrainSample
}

// rubricRound is what one sampling round of a rubric step produced.
type rubricRound struct {
	groups   []*rubricGroup
	pairs    []schemas.Pair
	built    []schemas.Rollout // the pairs' generations (answers, inferred questions, guiding rubrics)
	rubRolls []schemas.Rollout // the candidate rubrics
	rubs     []schemas.Rubric
	js       []schemas.Judgment
	rewards  map[string][]float64 // strategy → rewards of its rubrics
	counts   map[string]int64     // strategy → pairs
	margins  []float64            // s(a+) − s(a−) of every rubric whose pair the judge scored
}

func (r *rubricRound) append(o rubricRound) {
	r.groups = append(r.groups, o.groups...)
	r.pairs = append(r.pairs, o.pairs...)
	r.built = append(r.built, o.built...)
	r.rubRolls = append(r.rubRolls, o.rubRolls...)
	r.rubs = append(r.rubs, o.rubs...)
	r.js = append(r.js, o.js...)
	r.margins = append(r.margins, o.margins...)
	for s, xs := range o.rewards {
		r.rewards[s] = append(r.rewards[s], xs...)
	}
	for s, c := range o.counts {
		r.counts[s] += c
	}
}

// rubricRound builds the pairs of batch (continuing the step's first
// pairs), samples n rubrics per pair, judges a+ and a− under each, and
// computes each group's advantages into gs.
func (l *loop) rubricRound(ctx context.Context, step, first int, batch []schemas.Prompt, pb *pairs.Builder, gs *groupStats) (rubricRound, error) {
	phase := schemas.PhaseRubric
	out := rubricRound{rewards: map[string][]float64{}, counts: map[string]int64{}}
	items := make([]pairs.Item, len(batch))
	for i := range batch {
		items[i] = pairs.Item{PromptID: batch[i].PromptID, Question: questionText(&batch[i])}
	}
	built, err := pb.BuildFrom(ctx, int64(step), first, items)
	if err != nil {
		return out, err
	}
	ps := built.Pairs

	// The rubric generator samples n rubrics per pair.
	ids := make([]string, len(ps))
	questions := make([]string, len(ps))
	for i, p := range ps {
		ids[i], questions[i] = p.PairID, p.Question
	}
	ritems, err := l.rubricItems(ids, questions)
	if err != nil {
		return out, err
	}
	n := l.cfg.RubricSamples
	spec := l.spec(l.cfg.RubricGen, phase, step, n)
	spec.Sampling = l.cfg.rubricPhaseSampling()
	rubRolls, err := l.sample(ctx, partRubrics, l.rubric.Backend, max(l.cfg.RubricGen.BatchRows, n), spec, ritems)
	if err != nil {
		return out, fmt.Errorf("rubrics: %w", err)
	}
	rubs, byItem := l.parseRubrics(rubRolls)

	// The judge scores a+ and a− under every rubric of their pair.
	resps := make([]judge.Response, 0, 2*len(ps))
	for _, p := range ps {
		resps = append(resps, judge.PairResponses(&p)...)
	}
	js, err := l.judgeStep(ctx, phase, step, resps, byItem)
	if err != nil {
		return out, err
	}
	score := map[string]float64{} // judgment id → score
	for _, j := range js {
		if j.Score != nil {
			score[j.JudgmentID] = *j.Score
		}
	}
	out.pairs, out.built, out.rubRolls, out.rubs, out.js = ps, built.Rollouts, rubRolls, rubs, js
	for i := range ps {
		p := &out.pairs[i]
		out.counts[p.Strategy]++
		rewards, err := l.rubricRewards(p, rubs[i*n:(i+1)*n], byItem[p.PairID], score, &out)
		if err != nil {
			return out, err
		}
		ts, err := gs.group(l.rubric, ritems[i].Messages, rubRolls[i*n:(i+1)*n], rewards, string(l.cfg.Advantage),
			grpo.AdvantageOptions{Missing: l.cfg.rubricMissing, Std: l.cfg.AdvStd})
		if err != nil {
			return out, err
		}
		out.groups = append(out.groups, &rubricGroup{pair: p, samples: ts})
	}
	return out, nil
}

// rubricRewards returns the rewards of a pair's rubrics (NaN: missing) and
// records them per strategy. A rubric the judge could not apply (no usable
// criteria: the generator's own failure) earns 0 — no margin, no format
// credit — unless unusable_rubric judge had the judge score it anyway (the
// official rule: it is paid like any rubric); a rubric whose pair the judge
// failed to score (judge-side failure) is missing, and dropped
// (rubric_missing_reward drop, README.md, "The method") or given its
// group's mean (fill_mean, the official code).
func (l *loop) rubricRewards(p *schemas.Pair, rubs, judged []schemas.Rubric, score map[string]float64, out *rubricRound) ([]float64, error) {
	rewards := make([]float64, len(rubs))
	for k, rub := range rubs {
		if l.cfg.UnusableRubric != UnusableJudge && !rules.Usable(judged[k]) {
			rewards[k] = 0
			out.rewards[p.Strategy] = append(out.rewards[p.Strategy], 0)
			continue
		}
		sp, okp := score[rules.JudgmentID(rules.ChosenID(p.PairID), rub.RubricID)]
		sm, okm := score[rules.JudgmentID(rules.RejectedID(p.PairID), rub.RubricID)]
		rewards[k] = math.NaN()
		if !okp || !okm {
			continue
		}
		out.margins = append(out.margins, sp-sm)
		r, ok, err := grpo.RubricPairReward(string(l.cfg.RubricReward), grpo.RubricInput{SPlus: sp, SMinus: sm, FormatOK: rub.FormatOK, Alpha: l.cfg.Alpha})
		if err != nil {
			return nil, err
		}
		if ok {
			rewards[k] = r
			out.rewards[p.Strategy] = append(out.rewards[p.Strategy], r)
		}
	}
	return rewards, nil
}
