package run

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/evolm/evolm/internal/lmstage"
	"github.com/evolm/evolm/internal/thinking"
	"github.com/evolm/evolm/method/grpo"
	"github.com/evolm/evolm/method/pairs"
	"github.com/evolm/evolm/method/rules"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/stages/judge"
	"github.com/evolm/evolm/stages/rollout"
	"github.com/evolm/evolm/stages/rubrics"
)

var (
	rolePolicy = pipeline.Partition{Key: "role", Value: schemas.RolePolicy}
	roleRubric = pipeline.Partition{Key: "role", Value: schemas.RoleRubricGenerator}
)

// policyStep: one rubric per prompt (frozen generator), n answers per
// prompt, judged under it, GRPO on the policy. With active sampling, groups
// whose rewards all tie are replaced by groups of new prompts (refill
// rounds, grpo.FillGroups) until prompts_per_step groups carry a signal.
func (l *loop) policyStep(ctx context.Context, step int) (schemas.StepMetrics, error) {
	phase := schemas.PhasePolicy
	m := schemas.StepMetrics{Step: int64(step), Phase: phase}
	rounds := 0
	if l.cfg.ActiveSampling {
		rounds = l.cfg.ActiveRounds
	}
	var gs groupStats
	var out policyRound // every row sampled, over all rounds
	sample := func(ctx context.Context, round, n int) ([]*policyGroup, error) {
		batch := l.batch(step)
		if round > 0 {
			batch = l.refill(step, round, n)
		}
		r, err := l.policyRound(ctx, step, round, batch, &gs)
		if err != nil {
			return nil, err
		}
		out.append(r)
		return r.groups, nil
	}
	kept, _, refills, err := grpo.FillGroups(ctx, l.cfg.PromptsPerStep, rounds, sample, func(g *policyGroup) bool { return len(g.samples) > 0 })
	if err != nil {
		return m, err
	}
	m.RefillPrompts, m.RefillRounds, m.GroupsTrained = int64(refills.Prompts), int64(refills.Rounds), int64(len(kept))
	if refills.Rounds > 0 {
		l.env.Log.Debug("active sampling", "step", step, "refill_rounds", refills.Rounds, "refill_prompts", refills.Prompts,
			"groups_with_signal", len(kept), "want", l.cfg.PromptsPerStep)
	}
	lengthEntropy(out.rolls, &m)
	l.stepStats(&m, out.rolls, out.rubRolls)
	m.JudgeMissingRate = missingRate(out.js)
	m.FormatRate = out.formatRate()
	gs.fill(&m)
	var samples []backend.TrainSample
	for _, g := range kept {
		samples = append(samples, g.samples...)
	}
	if err := l.update(ctx, l.policy, samples, &m); err != nil {
		return m, fmt.Errorf("policy update: %w", err)
	}

	// One answer per prompt enters the replay buffer: for each prompt of
	// the step's own batch (replay_fill step_batch: refill prompts are
	// extra draws, not the data stream), or for every prompt whose rewards
	// were computed, refills included (every_group, the official rule).
	for _, g := range out.groups {
		if g.round != 0 && l.cfg.ReplayFill != pairs.FillEveryGroup {
			continue
		}
		if r := g.rolls[0]; r.Error == nil {
			l.buf.Add(schemas.ReplayEntry{Step: int64(step), PromptID: g.prompt.PromptID, Question: g.question,
				Answer: thinking.Strip(r.Text), RolloutID: r.RolloutID})
		}
	}

	l.keepSamples(out.rubs, out.rolls)
	if err := write(l, schemas.Rollouts, out.rubRolls, step, phase, roleRubric); err != nil {
		return m, err
	}
	if err := write(l, schemas.Rollouts, out.rolls, step, phase, rolePolicy); err != nil {
		return m, err
	}
	if err := write(l, schemas.Rubrics, out.rubs, step, phase); err != nil {
		return m, err
	}
	return m, write(l, schemas.Judgments, out.js, step, phase)
}

// policyGroup is one prompt of a policy step: its rollouts and the GRPO
// samples of its members (none when the group carries no signal).
type policyGroup struct {
	round    int
	prompt   schemas.Prompt
	question string
	rolls    []schemas.Rollout
	samples  []backend.TrainSample
}

// policyRound is what one sampling round of a policy step produced.
type policyRound struct {
	groups   []*policyGroup
	rubRolls []schemas.Rollout
	rubs     []schemas.Rubric
	rolls    []schemas.Rollout
	js       []schemas.Judgment
}

func (r *policyRound) append(o policyRound) {
	r.groups = append(r.groups, o.groups...)
	r.rubRolls = append(r.rubRolls, o.rubRolls...)
	r.rubs = append(r.rubs, o.rubs...)
	r.rolls = append(r.rolls, o.rolls...)
	r.js = append(r.js, o.js...)
}

func (r *policyRound) formatRate() *float64 {
	if len(r.rubs) == 0 {
		return nil
	}
	ok := 0
	for _, rb := range r.rubs {
		if rb.FormatOK {
			ok++
		}
	}
	fr := float64(ok) / float64(len(r.rubs))
	return &fr
}

// refill returns the n prompts of refill round round of step
// (schedule.Schedule.Refill).
func (l *loop) refill(step, round, n int) []schemas.Prompt {
	return l.pick(l.cfg.Schedule().Refill(len(l.prompts), step, round, n))
}

// policyRound samples one rubric per prompt, n answers per prompt, judges
// them, and computes each group's advantages (a missing score gets its
// group's mean) into gs.
func (l *loop) policyRound(ctx context.Context, step, round int, batch []schemas.Prompt, gs *groupStats) (policyRound, error) {
	var out policyRound
	phase := schemas.PhasePolicy
	ids := make([]string, len(batch))
	questions := make([]string, len(batch))
	for i := range batch {
		ids[i], questions[i] = batch[i].PromptID, questionText(&batch[i])
	}
	// Duplicate prompts within a step (possible when the stream wraps inside
	// a step, or in refills) would share row ids: key items by position and
	// round as well.
	keys := make([]string, len(batch))
	for i := range batch {
		keys[i] = rules.ItemKey(ids[i], round, i)
	}

	// 1. The rubric generator writes one rubric per prompt.
	ritems, err := l.rubricItems(keys, questions)
	if err != nil {
		return out, err
	}
	rubRolls, err := l.sample(ctx, partRubrics, l.rubric.Backend, l.cfg.RubricGen.BatchRows, l.spec(l.cfg.RubricGen, phase, step, 1), ritems)
	if err != nil {
		return out, fmt.Errorf("rubrics: %w", err)
	}
	rubs, byItem := l.parseRubrics(rubRolls)

	// 2. The policy samples n answers per prompt.
	system, err := l.set.Policy()
	if err != nil {
		return out, err
	}
	pitems := make([]lmstage.Item, len(batch))
	for i := range batch {
		pitems[i] = lmstage.Item{ID: keys[i], Messages: rollout.Conversation(&batch[i], system)}
	}
	rolls, err := l.sample(ctx, partGeneration, l.policy.Backend, max(l.cfg.Policy.BatchRows, l.cfg.Samples), l.spec(l.cfg.Policy, phase, step, l.cfg.Samples), pitems)
	if err != nil {
		return out, fmt.Errorf("rollouts: %w", err)
	}

	// 3. The judge scores each answer under its prompt's rubric.
	resps := make([]judge.Response, len(rolls))
	for i, r := range rolls {
		resps[i] = judge.Response{ID: r.RolloutID, ItemID: r.PromptID, Question: questions[i/l.cfg.Samples], HasQuestion: true, Text: r.Text, Failed: r.Error}
	}
	js, err := l.judgeStep(ctx, phase, step, resps, byItem)
	if err != nil {
		return out, err
	}
	score := map[string]float64{}
	for _, j := range js {
		if j.Score != nil {
			score[j.ResponseID] = *j.Score
		}
	}

	// 4. Group advantages and the GRPO samples of each group.
	for i := range batch {
		group := rolls[i*l.cfg.Samples : (i+1)*l.cfg.Samples]
		rewards := make([]float64, len(group))
		for k, r := range group {
			in := grpo.PolicyInput{Score: math.NaN(), Truncated: r.FinishReason == string(backend.FinishLength),
				NonStopPenalty: l.cfg.NonStopPenalty, NonStopValue: l.cfg.NonStopValue}
			if s, ok := score[r.RolloutID]; ok {
				in.Score = s
			}
			if rewards[k], err = grpo.PolicyReward(string(l.cfg.PolicyReward), in); err != nil {
				return out, err
			}
		}
		ts, err := gs.group(l.policy, pitems[i].Messages, group, rewards, string(l.cfg.Advantage),
			grpo.AdvantageOptions{Missing: grpo.FillGroupMean, Std: l.cfg.AdvStd})
		if err != nil {
			return out, err
		}
		out.groups = append(out.groups, &policyGroup{round: round, prompt: batch[i], question: questions[i], rolls: group, samples: ts})
	}
	out.rubRolls, out.rubs, out.rolls, out.js = rubRolls, rubs, rolls, js
	return out, nil
}

// judgeStep runs the judge on a step's responses. A step whose judge calls
// all failed on the backend (an unreachable server, a model id the server
// does not serve) is an error, not a step of zero rewards.
func (l *loop) judgeStep(ctx context.Context, phase string, step int, resps []judge.Response, byItem map[string][]schemas.Rubric) ([]schemas.Judgment, error) {
	defer l.clock.since(partJudge, time.Now())
	j := l.newJudge(phase, step)
	js, _, err := j.Judge(ctx, resps, byItem)
	if err != nil {
		return nil, fmt.Errorf("judge: %w", err)
	}
	if rows, failed, first := j.Failures().Counts(); rows > 0 && failed == rows {
		return nil, fmt.Errorf("judge: all %d judge calls of step %d (%s phase) failed on the backend (roles.judge: %s %s); first error: %s: %w",
			rows, step, phase, l.cfg.Judge.Backend, l.cfg.Judge.Model, first, pipeline.ErrAllRowsFailed)
	}
	return js, nil
}

// parseRubrics turns rubric generations into rubrics rows and the rubrics
// the judge applies per item (rules.JudgingRubric: the invalid_rubric rule
// shared with eval and replay).
func (l *loop) parseRubrics(rolls []schemas.Rollout) ([]schemas.Rubric, map[string][]schemas.Rubric) {
	rubs := make([]schemas.Rubric, len(rolls))
	byItem := map[string][]schemas.Rubric{}
	for i := range rolls {
		rubs[i] = rubrics.FromRolloutAs(&rolls[i], l.cfg.Rules.Format)
		byItem[rubs[i].ItemID] = append(byItem[rubs[i].ItemID], rules.JudgingRubric(rubs[i], string(l.cfg.InvalidRubric)))
	}
	return rubs, byItem
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
