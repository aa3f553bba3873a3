package loop

import (
	"context"
	"fmt"
	"math"
	"strings"

	"github.com/evolm/evolm/model/backend"
	"github.com/evolm/evolm/model/chat"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/stages/eval"
	"github.com/evolm/evolm/stages/grpo"
	"github.com/evolm/evolm/stages/internal/lmstage"
	"github.com/evolm/evolm/stages/judge"
	"github.com/evolm/evolm/stages/pairs"
	"github.com/evolm/evolm/stages/rollout"
	"github.com/evolm/evolm/stages/rubrics"
)

var (
	rolePolicy = pipeline.Partition{Key: "role", Value: schemas.RolePolicy}
	roleRubric = pipeline.Partition{Key: "role", Value: schemas.RoleRubricGenerator}
)

// policyStep: one rubric per prompt (frozen generator), n answers per
// prompt, judged under it, GRPO on the policy.
func (l *loop) policyStep(ctx context.Context, step int) (schemas.StepMetrics, error) {
	phase := schemas.PhasePolicy
	m := schemas.StepMetrics{Step: int64(step), Phase: phase}
	batch := l.batch(step)
	ids := make([]string, len(batch))
	questions := make([]string, len(batch))
	for i := range batch {
		ids[i], questions[i] = batch[i].PromptID, questionText(&batch[i])
	}
	// Duplicate prompts within a step (possible when the stream wraps inside
	// a step) would share row ids: key items by position as well.
	keys := make([]string, len(batch))
	for i := range batch {
		keys[i] = fmt.Sprintf("%s#%d", ids[i], i)
	}

	// 1. The rubric generator writes one rubric per prompt.
	ritems, err := l.rubricItems(keys, questions)
	if err != nil {
		return m, err
	}
	rubRolls, err := lmstage.Sample(ctx, l.rubric.b, l.cfg.RubricGen.BatchRows, l.spec(l.cfg.RubricGen, phase, step, 1), ritems)
	if err != nil {
		return m, fmt.Errorf("rubrics: %w", err)
	}
	rubs, byItem := l.parseRubrics(rubRolls, &m)

	// 2. The policy samples n answers per prompt.
	system, err := l.set.Policy()
	if err != nil {
		return m, err
	}
	pitems := make([]lmstage.Item, len(batch))
	for i := range batch {
		pitems[i] = lmstage.Item{ID: keys[i], Messages: rollout.Conversation(&batch[i], system)}
	}
	rolls, err := lmstage.Sample(ctx, l.policy.b, max(l.cfg.Policy.BatchRows, l.cfg.Samples), l.spec(l.cfg.Policy, phase, step, l.cfg.Samples), pitems)
	if err != nil {
		return m, fmt.Errorf("rollouts: %w", err)
	}
	lengthEntropy(rolls, &m)

	// 3. The judge scores each answer under its prompt's rubric.
	resps := make([]judge.Response, len(rolls))
	for i, r := range rolls {
		resps[i] = judge.Response{ID: r.RolloutID, ItemID: r.PromptID, Question: questions[i/l.cfg.Samples], HasQuestion: true, Text: r.Text, Failed: r.Error}
	}
	js, _, err := l.newJudge(phase, step).Judge(ctx, resps, byItem)
	if err != nil {
		return m, fmt.Errorf("judge: %w", err)
	}
	m.JudgeMissingRate = missingRate(js)
	score := map[string]float64{}
	for _, j := range js {
		if j.Score != nil {
			score[j.ResponseID] = *j.Score
		}
	}

	// 4. Group advantages (a missing score gets its group's mean) and GRPO.
	var gs groupStats
	var samples []backend.TrainSample
	for i := range batch {
		group := rolls[i*l.cfg.Samples : (i+1)*l.cfg.Samples]
		rewards := make([]float64, len(group))
		for k, r := range group {
			rewards[k] = math.NaN()
			if s, ok := score[r.RolloutID]; ok {
				rewards[k] = s
			}
		}
		ts, err := gs.group(l.policy, pitems[i].Messages, group, rewards, grpo.FillGroupMean)
		if err != nil {
			return m, err
		}
		samples = append(samples, ts...)
	}
	gs.fill(&m)
	if err := l.update(ctx, l.policy, samples, &m); err != nil {
		return m, fmt.Errorf("policy update: %w", err)
	}

	// 5. One answer per prompt enters the replay buffer.
	for i := range batch {
		r := rolls[i*l.cfg.Samples]
		if r.Error == nil {
			l.buf.Add(schemas.ReplayEntry{Step: int64(step), PromptID: batch[i].PromptID, Question: questions[i],
				Answer: chat.StripThinking(r.Text), RolloutID: r.RolloutID})
		}
	}

	if err := write(l, schemas.Rollouts, rubRolls, step, phase, roleRubric); err != nil {
		return m, err
	}
	if err := write(l, schemas.Rollouts, rolls, step, phase, rolePolicy); err != nil {
		return m, err
	}
	if err := write(l, schemas.Rubrics, rubs, step, phase); err != nil {
		return m, err
	}
	return m, write(l, schemas.Judgments, js, step, phase)
}

// rubricStep: pairs from the three strategies, n rubrics per pair, judged
// on a+ and a−, GRPO on the rubric generator.
func (l *loop) rubricStep(ctx context.Context, step int) (schemas.StepMetrics, error) {
	phase := schemas.PhaseRubric
	m := schemas.StepMetrics{Step: int64(step), Phase: phase}
	batch := l.batch(step)
	items := make([]pairs.Item, len(batch))
	for i := range batch {
		items[i] = pairs.Item{PromptID: batch[i].PromptID, Question: questionText(&batch[i])}
	}
	pcfg := pairs.DefaultConfig(l.cfg.Policy.Sampling.MaxTokens)
	pcfg.Weights = l.cfg.Weights
	pcfg.Window = pairs.Window{MinAge: l.cfg.MinAge, MaxAge: l.cfg.MaxAge}
	pcfg.WidenStep = l.cfg.Widen
	pcfg.Policy, pcfg.Infer, pcfg.Rubric = l.cfg.Policy.Sampling, l.cfg.Policy.Sampling, l.cfg.RubricGen.Sampling
	pcfg.Infer.Temperature = l.cfg.InferTemp
	pcfg.Seed, pcfg.Model, pcfg.Checkpoint = l.cfg.Seed, l.policy.m.ID(), l.ckpt
	pb := &pairs.Builder{Policy: l.policy.m, RubricGen: l.rubric.m, Prompts: l.set, Buffer: l.buf, Cfg: pcfg, Log: l.env.Log}
	built, err := pb.Build(ctx, int64(step), items)
	if err != nil {
		return m, err
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
		return m, err
	}
	n := l.cfg.RubricSamples
	rubRolls, err := lmstage.Sample(ctx, l.rubric.b, max(l.cfg.RubricGen.BatchRows, n), l.spec(l.cfg.RubricGen, phase, step, n), ritems)
	if err != nil {
		return m, fmt.Errorf("rubrics: %w", err)
	}
	lengthEntropy(rubRolls, &m)
	rubs, byItem := l.parseRubrics(rubRolls, &m)

	// The judge scores a+ and a− under every rubric of their pair.
	resps := make([]judge.Response, 0, 2*len(ps))
	for _, p := range ps {
		resps = append(resps,
			judge.Response{ID: p.PairID + "/chosen", ItemID: p.PairID, Question: p.Question, HasQuestion: true, Text: p.Chosen},
			judge.Response{ID: p.PairID + "/rejected", ItemID: p.PairID, Question: p.Question, HasQuestion: true, Text: p.Rejected})
	}
	js, _, err := l.newJudge(phase, step).Judge(ctx, resps, byItem)
	if err != nil {
		return m, fmt.Errorf("judge: %w", err)
	}
	m.JudgeMissingRate = missingRate(js)
	score := map[string]float64{} // judgment id → score
	for _, j := range js {
		if j.Score != nil {
			score[j.JudgmentID] = *j.Score
		}
	}

	// Rewards per rubric. A rubric the judge could not apply (no usable
	// criteria: the generator's own failure) earns 0 — no margin, no format
	// credit; a rubric whose pair the judge failed to score (judge-side
	// failure) is dropped, as the paper does (README.md, "The method").
	var gs groupStats
	var samples []backend.TrainSample
	perStrategy := map[string][]float64{}
	counts := map[string]int64{}
	for i, p := range ps {
		counts[p.Strategy]++
		group := rubRolls[i*n : (i+1)*n]
		rewards := make([]float64, n)
		for k := range group {
			rub := rubs[i*n+k]
			if !usable(byItem[p.PairID][k]) {
				rewards[k] = 0
				perStrategy[p.Strategy] = append(perStrategy[p.Strategy], 0)
				continue
			}
			sp, okp := score[p.PairID+"/chosen|"+rub.RubricID]
			sm, okm := score[p.PairID+"/rejected|"+rub.RubricID]
			rewards[k] = math.NaN()
			if !okp || !okm {
				continue
			}
			if r, ok := grpo.RubricPairReward(l.cfg.RubricReward, l.cfg.Alpha, sp, sm, rub.FormatOK); ok {
				rewards[k] = r
				perStrategy[p.Strategy] = append(perStrategy[p.Strategy], r)
			}
		}
		ts, err := gs.group(l.rubric, ritems[i].Messages, group, rewards, grpo.DropMissing)
		if err != nil {
			return m, err
		}
		samples = append(samples, ts...)
	}
	gs.fill(&m)
	mean := func(xs []float64) *float64 {
		if len(xs) == 0 {
			return nil
		}
		s := 0.0
		for _, x := range xs {
			s += x
		}
		s /= float64(len(xs))
		return &s
	}
	m.RewardTemporal = mean(perStrategy[schemas.StrategyTemporal])
	m.RewardBacktranslate = mean(perStrategy[schemas.StrategyBacktranslate])
	m.RewardRubricGuided = mean(perStrategy[schemas.StrategyRubricGuided])
	m.CountTemporal = counts[schemas.StrategyTemporal]
	m.CountBacktranslate = counts[schemas.StrategyBacktranslate]
	m.CountRubricGuided = counts[schemas.StrategyRubricGuided]
	if err := l.update(ctx, l.rubric, samples, &m); err != nil {
		return m, fmt.Errorf("rubric generator update: %w", err)
	}

	var polRolls []schemas.Rollout
	for _, r := range built.Rollouts {
		if r.Role == schemas.RolePolicy {
			polRolls = append(polRolls, r)
		} else {
			rubRolls = append(rubRolls, r)
		}
	}
	if err := write(l, schemas.Pairs, ps, step, phase); err != nil {
		return m, err
	}
	if err := write(l, schemas.Rollouts, polRolls, step, phase, rolePolicy); err != nil {
		return m, err
	}
	if err := write(l, schemas.Rollouts, rubRolls, step, phase, roleRubric); err != nil {
		return m, err
	}
	if err := write(l, schemas.Rubrics, rubs, step, phase); err != nil {
		return m, err
	}
	return m, write(l, schemas.Judgments, js, step, phase)
}

// parseRubrics turns rubric generations into rubrics rows, the rubrics the
// judge applies per item (eval.JudgingRubric: the invalid_rubric rule shared
// with eval and replay) and m's R_format rate.
func (l *loop) parseRubrics(rolls []schemas.Rollout, m *schemas.StepMetrics) ([]schemas.Rubric, map[string][]schemas.Rubric) {
	rubs := make([]schemas.Rubric, len(rolls))
	byItem := map[string][]schemas.Rubric{}
	ok := 0
	for i := range rolls {
		rubs[i] = rubrics.FromRollout(&rolls[i])
		if rubs[i].FormatOK {
			ok++
		}
		byItem[rubs[i].ItemID] = append(byItem[rubs[i].ItemID], eval.JudgingRubric(rubs[i], l.cfg.InvalidRubric))
	}
	if len(rubs) > 0 {
		fr := float64(ok) / float64(len(rubs))
		m.FormatRate = &fr
	}
	return rubs, byItem
}

// usable reports whether the judge can apply r: at least one criterion, every
// weight finite and non-negative, and a positive total.
func usable(r schemas.Rubric) bool {
	total := 0.0
	for _, c := range r.Criteria {
		if math.IsNaN(c.Weight) || math.IsInf(c.Weight, 0) || c.Weight < 0 {
			return false
		}
		total += c.Weight
	}
	return total > 0
}

// questionText is what the rubric generator and the judge see as the
// question: the prompt itself, or for a multi-turn prompt the whole
// conversation, so that a rubric for "make it shorter" knows what "it" is.
// (The policy always answers the conversation as messages.)
func questionText(p *schemas.Prompt) string {
	var turns []schemas.Message
	for _, m := range p.Messages {
		if m.Role != "system" {
			turns = append(turns, m)
		}
	}
	if len(turns) <= 1 {
		return p.Prompt
	}
	var b strings.Builder
	b.WriteString("The conversation so far:\n")
	for _, m := range turns[:len(turns)-1] {
		fmt.Fprintf(&b, "\n[%s]\n%s\n", m.Role, m.Content)
	}
	fmt.Fprintf(&b, "\nThe user's last message, to be answered:\n%s", turns[len(turns)-1].Content)
	return b.String()
}
