// Package synthrun writes a small synthetic run directory. It is TEST DATA:
// made-up prompts, responses, rubrics, scores and training metrics with the
// shapes and partitions of a real run (docs/design.md, "Stages"), so that the analysis
// stages (export, analyze-rubrics) and the notebooks can be tested before,
// and independently of, the model stages. Nothing in it comes from a model.
//
// Layout: steps 0 … Steps−1, in phases of Phase steps starting with the
// policy phase. Each policy step has Prompts prompts × N policy rollouts, one
// rubric per prompt (item_id = prompt_id) and one judgment per rollout. Each
// rubric step has Pairs pairs (strategies in turn), N candidate rubrics per
// pair (item_id = pair_id) and two judgments per rubric ("<pair_id>/chosen",
// "<pair_id>/rejected"). The steps table has one row per step. Rubric texts
// drift from abstract labels to concrete, constrained criteria over the
// steps, as in the paper. Shards are committed through the pipeline with
// provenance stage "synthetic-testdata".
package synthrun

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/evolm/evolm/method/grpo"
	"github.com/evolm/evolm/method/rules"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
)

// Stage is the provenance stage name of every synthetic shard.
const Stage = "synthetic-testdata"

// Options size the synthetic run.
type Options struct {
	Steps   int    // training steps; 0: 8
	Phase   int    // steps per phase; 0: 2
	Prompts int    // prompts per policy step; 0: 3
	N       int    // rollouts per prompt and rubric candidates per pair; 0: 4
	Pairs   int    // pairs per rubric step; 0: 3
	Seed    uint64 // all randomness
	// Skip lists tables not to write (to make a run with a missing table).
	Skip []string
}

func (o Options) norm() Options {
	if o.Steps <= 0 {
		o.Steps = 8
	}
	if o.Phase <= 0 {
		o.Phase = 2
	}
	if o.Prompts <= 0 {
		o.Prompts = 3
	}
	if o.N <= 0 {
		o.N = 4
	}
	if o.Pairs <= 0 {
		o.Pairs = 3
	}
	return o
}

// Counts are the rows written per table.
type Counts map[string]int64

// PhaseOf is the phase of step s.
func (o Options) PhaseOf(s int) string {
	o = o.norm()
	if (s/o.Phase)%2 == 0 {
		return schemas.PhasePolicy
	}
	return schemas.PhaseRubric
}

var questions = []string{
	"What is the capital of Australia?",
	"Compute 15% of 80.",
	"Explain why the sky is blue.",
	"Write a haiku about autumn rain.",
	"How do vaccines train the immune system?",
	"List three prime numbers greater than 10.",
}

// criteria by stage of evolution: early labels, later concrete constraints.
var (
	earlyCriteria = []string{"Accuracy", "Clarity", "Helpfulness", "Relevance", "Completeness and depth"}
	lateCriteria  = []string{
		"States that the answer is 12",
		"Mentions Canberra as the capital",
		"Response is under 150 words",
		"Does not include unrelated trivia",
		"Lists at least 3 examples",
		"Explains the scattering of shorter wavelengths",
		"Uses the term \"Rayleigh scattering\"",
	}
)

// Write creates the synthetic run in dir (which must be new or empty) and
// returns the rows written per table.
func Write(ctx context.Context, mem memory.Allocator, dir string, o Options) (Counts, error) {
	o = o.norm()
	run, err := pipeline.OpenRun(dir)
	if err != nil {
		return nil, err
	}
	skip := map[string]bool{}
	for _, t := range o.Skip {
		skip[t] = true
	}
	w := &writer{ctx: ctx, mem: mem, run: run, skip: skip, counts: Counts{}}
	rng := rand.New(rand.NewPCG(o.Seed, 7))

	var prompts []schemas.Prompt
	for i, q := range questions {
		prompts = append(prompts, schemas.Prompt{
			PromptID: fmt.Sprintf("p%02d", i), Dataset: "synthetic-testdata", Source: "synthetic/chat", SourceID: fmt.Sprint(i),
			Category: "chat", Prompt: q, Messages: []schemas.Message{{Role: "user", Content: q}},
		})
	}
	if err := write(w, schemas.Prompts, pipeline.ShardPath(schemas.Prompts.Name, 0), prompts); err != nil {
		return nil, err
	}
	var steps []schemas.StepMetrics
	for s := 0; s < o.Steps; s++ {
		phase := o.PhaseOf(s)
		progress := float64(s) / float64(max(o.Steps-1, 1))
		parts := []pipeline.Partition{pipeline.Phase(phase), pipeline.Step(s)}
		var rows stepRows
		if phase == schemas.PhasePolicy {
			rows = policyRows(rng, o, prompts, s, progress)
		} else {
			var err error
			if rows, err = rubricRows(rng, o, prompts, s, progress); err != nil {
				return nil, err
			}
			if err := write(w, schemas.Pairs, pipeline.ShardPath(schemas.Pairs.Name, 0, parts...), rows.pairs); err != nil {
				return nil, err
			}
		}
		rollouts, rubrics, judgments, pairs, rewards := rows.rollouts, rows.rubrics, rows.judgments, rows.pairs, rows.rewards
		for _, t := range []struct {
			name string
			err  func() error
		}{
			{schemas.Rollouts.Name, func() error {
				role := pipeline.Partition{Key: "role", Value: schemas.RolePolicy}
				return write(w, schemas.Rollouts, pipeline.ShardPath(schemas.Rollouts.Name, 0, append(parts, role)...), rollouts)
			}},
			{schemas.Rubrics.Name, func() error {
				return write(w, schemas.Rubrics, pipeline.ShardPath(schemas.Rubrics.Name, 0, parts...), rubrics)
			}},
			{schemas.Judgments.Name, func() error {
				return write(w, schemas.Judgments, pipeline.ShardPath(schemas.Judgments.Name, 0, parts...), judgments)
			}},
		} {
			if err := t.err(); err != nil {
				return nil, err
			}
		}
		m, sd := meanStd(rewards)
		st := schemas.StepMetrics{
			Step: int64(s), Phase: phase, Loss: 0.1 * rng.NormFloat64(), KL: 0.001 * float64(s) * (1 + 0.1*rng.Float64()),
			ClipFrac: 0.05 * rng.Float64(), GradNorm: 1 + rng.Float64(), LR: 1e-6, RewardMean: m, RewardStd: sd,
			RespLenMean: 100 + 10*rng.NormFloat64(), Entropy: 1 - 0.05*float64(s), ZeroStdFrac: 0.1 * rng.Float64(),
			ElapsedS: 10 + rng.Float64(),
		}
		// A time breakdown that sums to the step, as the loop writes it.
		st.TimeGenerationS, st.TimeRubricsS, st.TimeJudgeS = 0.45*st.ElapsedS, 0.1*st.ElapsedS, 0.2*st.ElapsedS
		st.TimeRefLogprobsS, st.TimeLearnerS, st.TimeWritesS = 0.05*st.ElapsedS, 0.18*st.ElapsedS, 0.01*st.ElapsedS
		st.TimeOtherS = st.ElapsedS - st.TimeGenerationS - st.TimeRubricsS - st.TimeJudgeS - st.TimeRefLogprobsS - st.TimeLearnerS - st.TimeWritesS
		if phase == schemas.PhaseRubric {
			fr := 0.5 + 0.5*progress
			st.FormatRate = &fr
			for _, p := range pairs {
				switch p.Strategy {
				case schemas.StrategyTemporal:
					st.CountTemporal++
				case schemas.StrategyBacktranslate:
					st.CountBacktranslate++
				case schemas.StrategyRubricGuided:
					st.CountRubricGuided++
				}
			}
			rt, rb, rg := m+0.01, m-0.01, m
			st.RewardTemporal, st.RewardBacktranslate, st.RewardRubricGuided = &rt, &rb, &rg
		}
		steps = append(steps, st)
	}
	if err := write(w, schemas.Steps, pipeline.ShardPath(schemas.Steps.Name, 0), steps); err != nil {
		return nil, err
	}
	return w.counts, nil
}

type writer struct {
	ctx    context.Context
	mem    memory.Allocator
	run    *pipeline.Run
	skip   map[string]bool
	counts Counts
}

// write commits rows of table t as the shard at rel.
func write[T any](w *writer, t *schemas.Table[T], rel string, rows []T) error {
	if w.skip[t.Name] || len(rows) == 0 {
		return nil
	}
	prov := pipeline.Provenance{Stage: Stage, ConfigHash: "synthetic", CodeVersion: pipeline.CodeVersion()}
	sw, err := pipeline.CreateShard(w.run.Path(rel), t.Schema(), pipeline.WriteOptions{Mem: w.mem, Provenance: prov})
	if err != nil {
		return err
	}
	defer sw.Abort()
	rec := t.Build(w.mem, rows)
	defer rec.Release()
	if err := sw.Write(rec); err != nil {
		return err
	}
	if _, err := w.run.Commit(sw, rel, prov, ""); err != nil {
		return err
	}
	w.counts[t.Name] += int64(len(rows))
	return nil
}

var _ arrow.RecordBatch // record batches come from schemas' builders

func makeRollout(rng *rand.Rand, id, promptID, phase string, step, j int) schemas.Rollout {
	words := 20 + rng.IntN(60)
	return schemas.Rollout{
		RolloutID: id, PromptID: promptID, SampleIdx: int32(j), Role: schemas.RolePolicy, Phase: phase, Step: int64(step),
		Text: fmt.Sprintf("Synthetic response %s with %d words.", id, words), PromptTokens: 20, CompletionTokens: int32(words),
		FinishReason: "stop", Model: "synthetic-policy", Checkpoint: fmt.Sprintf("step-%06d", step), Seed: int64(step*1000 + j),
		Temperature: 1, TopP: 1,
	}
}

func makeRubric(rng *rand.Rand, item, phase string, step, j int, progress float64) schemas.Rubric {
	n := 3 + rng.IntN(2)
	crit := make([]schemas.Criterion, n)
	total := 0.0
	for k := range crit {
		text := earlyCriteria[rng.IntN(len(earlyCriteria))]
		if rng.Float64() < progress {
			text = lateCriteria[rng.IntN(len(lateCriteria))]
		}
		w := 0.5 + rng.Float64()
		if k == 0 && rng.Float64() < 0.3 {
			w = 4 // a dominant criterion
		}
		crit[k] = schemas.Criterion{Criterion: text, Weight: w}
		total += w
	}
	for k := range crit {
		crit[k].Weight /= total
	}
	id := fmt.Sprintf("%s/%s/%06d/rubric_generator/%d", item, phase, step, j)
	r := schemas.Rubric{RubricID: id, ItemID: item, Phase: phase, Step: int64(step), SampleIdx: int32(j), RolloutID: id,
		RawText: "<think>…</think>" + rubricJSON(crit), Criteria: crit, FormatOK: true}
	if rng.Float64() > 0.5+0.5*progress {
		msg := "weights sum to 1.4, want 1 ± 0.15"
		r.FormatOK, r.ParseError = false, &msg
	}
	return r
}

func makeJudgment(responseID string, rub schemas.Rubric, phase string, step int, score float64, rng *rand.Rand) schemas.Judgment {
	j := schemas.Judgment{
		JudgmentID: rules.JudgmentID(responseID, rub.RubricID), ResponseID: responseID, RubricID: rub.RubricID, Phase: phase, Step: int64(step),
		JudgeModel: "synthetic-judge", JudgeMode: schemas.JudgeGenerative, PromptVersion: "v1",
		RawText: fmt.Sprintf("{\"reasoning\": \"…\", \"score\": %.3f}", score),
	}
	if rng.Float64() < 0.05 {
		why := "unparseable: no JSON object"
		j.ScoreMissingReason = &why
		return j
	}
	j.Score = &score
	for range rub.Criteria {
		j.CriterionScores = append(j.CriterionScores, clamp(score+0.1*rng.NormFloat64()))
	}
	return j
}

func clamp(x float64) float64 { return math.Min(1, math.Max(0, x)) }

func meanStd(xs []float64) (float64, float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	m := 0.0
	for _, x := range xs {
		m += x
	}
	m /= float64(len(xs))
	v := 0.0
	for _, x := range xs {
		v += (x - m) * (x - m)
	}
	return m, math.Sqrt(v / float64(len(xs)))
}

// rubricJSON is the generator output a rubric's criteria come from, so that
// analyses reading the raw text (the official statistics) see them.
func rubricJSON(crit []schemas.Criterion) string {
	type c struct {
		Criterion string  `json:"criterion"`
		Weight    float64 `json:"weight"`
	}
	cs := make([]c, len(crit))
	for i, x := range crit {
		cs[i] = c{x.Criterion, x.Weight}
	}
	b, err := json.Marshal(map[string]any{"criteria": cs})
	if err != nil {
		panic(err) // strings and finite floats always marshal
	}
	return string(b)
}

// stepRows are one synthetic step's rows and the rewards they imply.
type stepRows struct {
	rollouts  []schemas.Rollout
	rubrics   []schemas.Rubric
	judgments []schemas.Judgment
	pairs     []schemas.Pair
	rewards   []float64
}

// policyRows makes a policy step: Prompts prompts, one rubric each, N
// rollouts per prompt, one judgment per rollout.
func policyRows(rng *rand.Rand, o Options, prompts []schemas.Prompt, s int, progress float64) stepRows {
	var r stepRows
	phase := schemas.PhasePolicy
	for p := 0; p < o.Prompts; p++ {
		pr := prompts[(s*o.Prompts+p)%len(prompts)]
		rub := makeRubric(rng, pr.PromptID, phase, s, 0, progress)
		r.rubrics = append(r.rubrics, rub)
		for j := 0; j < o.N; j++ {
			id := fmt.Sprintf("%s/%s/%06d/policy/%d", pr.PromptID, phase, s, j)
			r.rollouts = append(r.rollouts, makeRollout(rng, id, pr.PromptID, phase, s, j))
			score := clamp(0.3 + 0.5*progress + 0.2*rng.NormFloat64())
			jd := makeJudgment(id, rub, phase, s, score, rng)
			r.judgments = append(r.judgments, jd)
			if jd.Score != nil {
				r.rewards = append(r.rewards, *jd.Score)
			}
		}
	}
	return r
}

// rubricRows makes a rubric step: Pairs pairs (strategies in turn), N
// rubrics per pair, two judgments per rubric, each rubric rewarded by the
// paper's margin reward.
func rubricRows(rng *rand.Rand, o Options, prompts []schemas.Prompt, s int, progress float64) (stepRows, error) {
	var r stepRows
	phase := schemas.PhaseRubric
	for p := 0; p < o.Pairs; p++ {
		pr := prompts[(s+p)%len(prompts)]
		pid := fmt.Sprintf("pair-%06d-%d", s, p)
		strategy := schemas.Strategies[p%len(schemas.Strategies)]
		chosenID := fmt.Sprintf("%s/%s/%06d/policy/chosen-%d", pr.PromptID, phase, s, p)
		r.rollouts = append(r.rollouts, makeRollout(rng, chosenID, pid, phase, s, 0))
		pair := schemas.Pair{
			PairID: pid, PromptID: pr.PromptID, Step: int64(s), Question: pr.Prompt,
			Chosen: r.rollouts[len(r.rollouts)-1].Text, Rejected: "An older, weaker answer.", Strategy: strategy,
			ChosenRolloutID: chosenID, RejectedRolloutID: fmt.Sprintf("old-%d", p), ChosenStep: int64(s), RejectedStep: int64(max(s-20, 0)),
		}
		if strategy == schemas.StrategyBacktranslate {
			q := "Inferred: " + pr.Prompt
			pair.InferredQuestion = &q
		}
		r.pairs = append(r.pairs, pair)
		for j := 0; j < o.N; j++ {
			rub := makeRubric(rng, pid, phase, s, j, progress)
			r.rubrics = append(r.rubrics, rub)
			sc := clamp(0.6 + 0.2*progress + 0.1*rng.NormFloat64())
			sr := clamp(0.5 - 0.2*progress + 0.1*rng.NormFloat64())
			jc := makeJudgment(rules.ChosenID(pid), rub, phase, s, sc, rng)
			jr := makeJudgment(rules.RejectedID(pid), rub, phase, s, sr, rng)
			r.judgments = append(r.judgments, jc, jr)
			if jc.Score != nil && jr.Score != nil {
				rw, _, err := grpo.RubricPairReward(grpo.RewardMargin, grpo.RubricInput{SPlus: *jc.Score, SMinus: *jr.Score, FormatOK: rub.FormatOK, Alpha: 0.7})
				if err != nil {
					return r, err
				}
				r.rewards = append(r.rewards, rw)
			}
		}
	}
	return r, nil
}
