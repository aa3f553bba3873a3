package pairs

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"

	"github.com/evolm/evolm/internal/thinking"
	"github.com/evolm/evolm/method/prompts"
	"github.com/evolm/evolm/method/rules"
	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/serving/backend"
)

// build is one BuildFrom call in progress: its items, their strategies and
// the generations of its three rounds, per item.
type build struct {
	b          *Builder
	step       int64
	first      int
	items      []Item
	strategies []string
	rng        *rand.Rand
	system     string // the policy's system prompt
	pairs      []schemas.Pair

	plus   []*gen    // a+ (temporal, backtranslate)
	rubric []*gen    // rubric-guided: the rubric
	infer  []*gen    // backtranslate: the inferred question
	minus  []*gen    // backtranslate: the answer to the inferred question
	guided [][2]*gen // rubric-guided: a+ (with the rubric) and a− (without)
	all    [][]*gen  // every round's generations, for the rollout rows
}

func (s *build) answerMsgs(system, question string) []backend.Message {
	var ms []backend.Message
	if system != "" {
		ms = append(ms, backend.Message{Role: "system", Content: system})
	}
	return append(ms, backend.Message{Role: "user", Content: question})
}

func (s *build) newGen(i int, tag, role string, msgs []backend.Message, sp backend.Sampling) *gen {
	id := rules.PairRolloutID(s.step, s.first+i, tag)
	sp.Seed = ptr(rules.DeriveSeed(s.b.Cfg.Seed, id))
	return &gen{
		req:  backend.GenerateRequest{ID: id, Messages: msgs, N: 1, Sampling: sp, LogProbs: true},
		role: role,
		out: &schemas.Rollout{
			RolloutID: id, PromptID: s.items[i].PromptID, Role: role, Phase: schemas.PhaseRubric, Step: s.step,
			Model: s.b.Cfg.Model, Checkpoint: s.b.Cfg.Checkpoint, Seed: *sp.Seed,
			Temperature: sp.Temperature, TopP: sp.TopP, TopK: int32(sp.TopK),
		},
	}
}

// run generates gs on g and keeps them for the rollout rows.
func (s *build) run(ctx context.Context, g backend.Generator, gs []*gen) error {
	s.all = append(s.all, gs)
	return s.b.run(ctx, g, gs)
}

// round1 is what every strategy needs first: a+ of temporal and
// backtranslate pairs (the temporal a− from the buffer), the rubric of
// rubric-guided ones.
func (s *build) round1(ctx context.Context) error {
	b := s.b
	age := b.Cfg.ageAt(s.step, b.Buffer)
	var answers, rubrics []*gen
	for i, it := range s.items {
		p := &s.pairs[i]
		*p = schemas.Pair{
			PairID: rules.PairID(s.step, s.first+i), PromptID: it.PromptID, Step: s.step,
			Question: it.Question, Strategy: s.strategies[i], ChosenStep: s.step, RejectedStep: s.step,
		}
		switch s.strategies[i] {
		case schemas.StrategyTemporal:
			got, ok := b.Buffer.Pick(age, b.Cfg.Window, b.Cfg.Fallback, b.Cfg.WidenStep, s.rng)
			if !ok {
				return fmt.Errorf("pairs step %d item %d: temporal strategy with an empty buffer", s.step, i)
			}
			if got.Stage != schemas.TemporalWindow && b.Log != nil {
				b.Log.Debug("temporal window empty; fell back", "step", s.step, "item", i, "stage", got.Stage, "age", got.Age)
			}
			e := got.Entry
			p.TemporalAge, p.TemporalFallback = ptr(got.Age), ptr(got.Stage)
			p.PromptID, p.Question = e.PromptID, e.Question
			p.Rejected, p.RejectedRolloutID, p.RejectedStep = e.Answer, e.RolloutID, e.Step
			s.plus[i] = s.newGen(i, "chosen", schemas.RolePolicy, s.answerMsgs(s.system, e.Question), b.Cfg.Policy)
			s.plus[i].out.PromptID = e.PromptID
			answers = append(answers, s.plus[i])
		case schemas.StrategyBacktranslate:
			s.plus[i] = s.newGen(i, "chosen", schemas.RolePolicy, s.answerMsgs(s.system, it.Question), b.Cfg.Policy)
			answers = append(answers, s.plus[i])
		case schemas.StrategyRubricGuided:
			msgs, err := b.Prompts.RubricForQuestion(it.Question)
			if err != nil {
				return err
			}
			s.rubric[i] = s.newGen(i, "rubric", schemas.RoleRubricGenerator, msgs, b.Cfg.Rubric)
			rubrics = append(rubrics, s.rubric[i])
		}
	}
	if err := s.run(ctx, b.Policy, answers); err != nil {
		return err
	}
	return s.run(ctx, b.RubricGen, rubrics)
}

// round2 infers the back-translated questions (on the Inferrer, else the
// policy) and samples the rubric-guided answers.
func (s *build) round2(ctx context.Context) error {
	b := s.b
	var infer, answers []*gen
	for i, it := range s.items {
		switch s.strategies[i] {
		case schemas.StrategyBacktranslate:
			msgs, err := b.Prompts.QuestionInference(thinking.Strip(s.plus[i].out.Text))
			if err != nil {
				return err
			}
			s.infer[i] = s.newGen(i, "inferred_question", schemas.RolePolicy, msgs, b.Cfg.Infer)
			if b.Cfg.InferCheckpoint != "" {
				s.infer[i].out.Checkpoint = b.Cfg.InferCheckpoint
			}
			infer = append(infer, s.infer[i])
		case schemas.StrategyRubricGuided:
			// The rubric as the generator wrote it, as the official code
			// shows it (its criteria for prompts that list them).
			raw := s.rubric[i].out.Text
			system, err := b.Prompts.PolicyWithRubric(prompts.Rubric{Text: prompts.PolicyRubricText(raw), Criteria: prompts.ParsedCriteria(raw, b.Cfg.RubricFormat)})
			if err != nil {
				return fmt.Errorf("pairs step %d item %d: %w", s.step, i, err)
			}
			s.guided[i][0] = s.newGen(i, "chosen", schemas.RolePolicy, s.answerMsgs(system, it.Question), b.Cfg.Policy)
			s.guided[i][1] = s.newGen(i, "rejected", schemas.RolePolicy, s.answerMsgs(s.system, it.Question), b.Cfg.Policy)
			answers = append(answers, s.guided[i][0], s.guided[i][1])
		}
	}
	inferrer := b.Inferrer
	if inferrer == nil {
		inferrer = b.Policy
	}
	if err := s.run(ctx, inferrer, infer); err != nil {
		return err
	}
	return s.run(ctx, b.Policy, answers)
}

// round3 answers the inferred questions.
func (s *build) round3(ctx context.Context) error {
	var answers []*gen
	for i := range s.items {
		if s.strategies[i] == schemas.StrategyBacktranslate {
			q := thinking.Strip(s.infer[i].out.Text)
			s.pairs[i].InferredQuestion = &q
			s.minus[i] = s.newGen(i, "rejected", schemas.RolePolicy, s.answerMsgs(s.system, q), s.b.Cfg.Policy)
			answers = append(answers, s.minus[i])
		}
	}
	return s.run(ctx, s.b.Policy, answers)
}

// result fills each pair's answers and returns the pairs with every
// generation's rollout row, ordered by id.
func (s *build) result(fallbacks int) Result {
	for i := range s.items {
		p := &s.pairs[i]
		switch s.strategies[i] {
		case schemas.StrategyTemporal:
			p.Chosen, p.ChosenRolloutID = answerText(s.plus[i]), s.plus[i].out.RolloutID
		case schemas.StrategyBacktranslate:
			p.Chosen, p.ChosenRolloutID = answerText(s.plus[i]), s.plus[i].out.RolloutID
			p.Rejected, p.RejectedRolloutID = answerText(s.minus[i]), s.minus[i].out.RolloutID
		case schemas.StrategyRubricGuided:
			p.Chosen, p.ChosenRolloutID = answerText(s.guided[i][0]), s.guided[i][0].out.RolloutID
			p.Rejected, p.RejectedRolloutID = answerText(s.guided[i][1]), s.guided[i][1].out.RolloutID
		}
	}
	res := Result{Pairs: s.pairs, Fallbacks: fallbacks}
	for _, gs := range s.all {
		for _, g := range gs {
			res.Rollouts = append(res.Rollouts, *g.out)
		}
	}
	sort.Slice(res.Rollouts, func(a, c int) bool { return res.Rollouts[a].RolloutID < res.Rollouts[c].RolloutID })
	return res
}
