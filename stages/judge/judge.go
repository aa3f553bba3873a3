// Package judge is the judge stage, `evolm judge`: the frozen judge scores
// every response under every rubric written for its item, and the scores go
// to the judgments table.
//
// Contract:
//
//   - Inputs: the responses — rollouts (source=rollouts, with the prompts
//     table for the questions) or pairs (source=pairs: a+ and a− of each
//     pair, response ids "<pair_id>/chosen" and "<pair_id>/rejected") — and
//     the rubrics, joined on rubrics.item_id = the response's prompt_id (or
//     pair_id). Empty input lists read what the rollout, dedup, pairs and
//     rubrics stages committed in the run for the configured phase and step.
//     Rubrics (and the questions they need) are held in memory; responses
//     stream, one judgments shard per responses shard
//     (judgments/phase=…/step=…/part-NNNNN).
//   - Row count: exactly one judgment per (response, rubric of its item),
//     judgment_id "<response_id>|<rubric_id>". A response whose item has no
//     rubric gets none (and is counted in a log line).
//   - The judge sees the response without its thinking (internal/thinking)
//     and the rubric as the generator wrote it, its reasoning removed as the
//     official code removes it (prompts.JudgeRubricText), with its parsed
//     criteria (weights renormalized) for prompts that list them; a rubric
//     row that kept no text shows its criteria as rubric JSON.
//   - Modes. generative: one chat call per (response, rubric) at the judge
//     temperature; the reply is read as rubric.judge_reply says
//     (prompts.JudgeReply: strict, or the official reading), and a reply
//     that is not JSON, has no score, or a score that is not a number, NaN
//     or (strict) outside [0, 1] leaves score null with score_missing_reason
//     "<reason>: <detail>" and the raw reply kept. yesno: one Score request
//     per (response, rubric) whose suffixes are the criteria; P(yes)/(P(yes)+P(no))
//     per criterion (prompts.YesNoScore) goes to criterion_scores and the
//     renormalized weighted sum to score. A response's requests (one per
//     rubric of its item) are consecutive in the backend call, so that the
//     torch backend prefills the shared (question, response) prefix once
//     for all of them, and the responses to one item follow each other as
//     the rollouts hold them, so that it takes their question's tokens from
//     its cache after the first (torchbe.PlanPrefixes).
//   - Per-row failures, never NaN and never dropped: a rubric with no
//     criteria (empty_rubric), weights that sum to zero (zero_weights) or a
//     bad weight, a response whose generation failed, and a backend row
//     failure all give score null with the reason. A failure of the whole
//     backend call (every endpoint down) fails the stage; committed shards
//     stay for the rerun.
//   - Identity: judge_model (the backend's model id), judge_mode and
//     prompt_version (the judge prompt's version) on every row; the output
//     schema's metadata records the backend, model and prompt versions.
package judge

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/evolm/evolm/internal/lmstage"
	"github.com/evolm/evolm/internal/thinking"
	"github.com/evolm/evolm/method/prompts"
	"github.com/evolm/evolm/method/rules"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/serving/roles"
	"github.com/evolm/evolm/stages/rubrics"
)

// Name is the stage's name.
const Name = "judge"

// Config keys.
const (
	KeySource    = "source"
	KeyResponses = "responses"
	KeyRubrics   = "rubrics"
	KeyPrompts   = "prompts"
	KeyRole      = "role"
	KeyInvalid   = "invalid_rubric"
)

// Sources.
const (
	SourceRollouts = "rollouts"
	SourcePairs    = "pairs"
)

func init() {
	fields := []pipeline.Field{
		{Key: KeySource, Type: pipeline.TypeString, Default: SourceRollouts, Enum: []string{SourceRollouts, SourcePairs},
			Description: "responses to judge: policy rollouts (policy phase) or both answers of preference pairs (rubric phase)"},
		{Key: KeyResponses, Type: pipeline.TypeStrings, Default: []string{},
			Description: "rollouts or pairs Parquet files or globs; empty: what the rollout or pairs stage committed for this phase and step"},
		{Key: KeyRubrics, Type: pipeline.TypeStrings, Default: []string{},
			Description: "rubrics Parquet files or globs; empty: what the rubrics stage committed for this phase and step"},
		{Key: KeyPrompts, Type: pipeline.TypeStrings, Default: []string{},
			Description: "source=rollouts: prompts Parquet files or globs holding the questions; empty: the prompts files the rollouts' metadata names (the rollout stage records them), else the dedup stage's in this run"},
		{Key: KeyRole, Type: pipeline.TypeString, Default: schemas.RolePolicy,
			Description: "source=rollouts: judge only rollouts of this role"},
		{Key: KeyInvalid, Type: pipeline.TypeString, Default: rules.InvalidRawText, Enum: rules.InvalidPolicies,
			Description: "judging under a rubric that fails R_format: raw_text (its text as one criterion, as the loop, replay and eval do) or skip (its parsed criteria; none: the score is missing)"},
		{Key: lmstage.KeySeed, Type: pipeline.TypeInt, Default: 0, Description: "base seed; each judgment's seed derives from it and the row's key"},
	}
	fields = append(fields, lmstage.RunFields()...)
	pipeline.Register(pipeline.Spec{
		Name:    Name,
		Summary: "score every response under every rubric of its item with the frozen judge",
		Description: `Scores each (response, rubric) pair with the judge (the paper: generative at
temperature 0.6 by default, or yes/no log-probability scoring with the shared
(question, response) prefix reused across criteria). Unparseable or invalid
scores are recorded as missing with their reason, never NaN; when more than
pipeline.warn_failure_fraction of the scores are missing the stage warns with
the share and the commonest reason. A rubric that fails R_format is judged
under its raw text as one criterion (invalid_rubric: raw_text), as the loop
does; invalid_rubric: skip leaves its score missing. The judge (model,
backend, mode, sampling) is configured once in roles.judge.`,
		Inputs:  []string{schemas.Rollouts.Name, schemas.Pairs.Name, schemas.Rubrics.Name, schemas.Prompts.Name},
		Outputs: []string{schemas.Judgments.Name},
		Fields:  fields,
		Uses:    append(roles.Uses(roles.Judge), rubrics.Section),
		Moved:   roles.MovedStageKeys(roles.Judge),
		New:     func(cfg *pipeline.Config) (pipeline.Stage, error) { return newFromConfig(cfg) },
	})
}

// Stage is the judge stage.
type Stage struct {
	source, mode, role, invalid string
	responses, rubrics, prompt  []string
	spec                        lmstage.SampleSpec
	judge                       roles.Config
	batchRows                   int
	prompts                     *prompts.Set
	yn                          prompts.YesNo
	reply                       prompts.JudgeReply
	// judgeUnparsed asks the generative judge under a rubric that has no
	// criteria too, showing its text (Options.JudgeUnparsed).
	judgeUnparsed bool
}

func newFromConfig(cfg *pipeline.Config) (*Stage, error) {
	c, err := lmstage.ReadCommon(cfg, roles.Judge)
	if err != nil {
		return nil, err
	}
	rr, err := rubrics.ReadRules(cfg)
	if err != nil {
		return nil, err
	}
	return &Stage{
		source: cfg.String(KeySource), mode: c.Role.Mode, role: cfg.String(KeyRole), invalid: cfg.String(KeyInvalid),
		responses: cfg.Strings(KeyResponses), rubrics: cfg.Strings(KeyRubrics), prompt: cfg.Strings(KeyPrompts),
		spec: c.Spec, judge: c.Role, batchRows: c.Role.BatchRows, prompts: c.Prompts, yn: prompts.DefaultYesNo, reply: rr.JudgeReply,
	}, nil
}

func (s *Stage) promptName() prompts.Name {
	if s.mode == schemas.JudgeYesNo {
		return prompts.JudgeYesNo
	}
	return prompts.JudgeGenerative
}

// Response is one answer to judge.
type Response struct {
	ID       string // judgments.response_id
	ItemID   string // the rubrics' item_id
	Question string // filled from the prompts table for rollouts
	// HasQuestion is false when the prompts input lacks the response's prompt.
	HasQuestion bool
	Text        string  // the answer, thinking included
	Failed      *string // the generation's failure, if any
}

// PairResponses are the two answers of a pair as the judge scores them, a+
// then a−: ids rules.ChosenID and rules.RejectedID, item the pair (whose
// rubrics they are judged under).
func PairResponses(p *schemas.Pair) []Response {
	return []Response{
		{ID: rules.ChosenID(p.PairID), ItemID: p.PairID, Question: p.Question, HasQuestion: true, Text: p.Chosen},
		{ID: rules.RejectedID(p.PairID), ItemID: p.PairID, Question: p.Question, HasQuestion: true, Text: p.Rejected},
	}
}

// Run implements pipeline.Stage.
func (s *Stage) Run(ctx context.Context, env *pipeline.Env) error {
	parts := []pipeline.Partition{pipeline.Phase(s.spec.Phase), pipeline.Step(int(s.spec.Step))}
	rubFiles, err := lmstage.Inputs(env, s.rubrics, "rubrics", schemas.Rubrics.Name, parts...)
	if err != nil {
		return err
	}
	var respFiles []string
	if s.source == SourcePairs {
		respFiles, err = lmstage.Inputs(env, s.responses, "pairs", schemas.Pairs.Name)
	} else {
		respFiles, err = lmstage.Inputs(env, s.responses, "rollout", schemas.Rollouts.Name, parts...)
	}
	if err != nil {
		return err
	}
	byItem, err := loadRubrics(ctx, env, rubFiles)
	if err != nil {
		return err
	}
	for _, rs := range byItem {
		for i := range rs {
			rs[i] = rules.JudgingRubric(rs[i], s.invalid)
		}
	}
	var questions map[string]string
	if s.source == SourceRollouts {
		promptFiles, err := s.promptFiles(env, respFiles)
		if err != nil {
			return err
		}
		if questions, err = loadQuestions(ctx, env, promptFiles, byItem); err != nil {
			return err
		}
	}
	rc := s.judge
	rc.Callers = min(env.Parallelism, len(respFiles)) // MapShards' workers, one shard each
	b, err := roles.Open(rc, env.Log)
	if err != nil {
		return err
	}
	defer b.Close()
	j := &judge{Stage: s, b: b, version: s.prompts.Template(s.promptName()).Version, failures: &env.Failures}
	respSchema := schemas.Rollouts.Schema()
	if s.source == SourcePairs {
		respSchema = schemas.Pairs.Schema()
	}
	schema := lmstage.WithMeta(schemas.Judgments.Schema(), lmstage.Provenance(b, s.prompts, s.promptName()))
	var miss missingScores
	tasks := make([]pipeline.Task, len(respFiles))
	for i, f := range respFiles {
		tasks[i] = pipeline.Task{
			Output: pipeline.ShardPath(schemas.Judgments.Name, i, parts...),
			Schema: schema, Inputs: append([]string{f}, rubFiles...),
			Write: func(ctx context.Context, w *pipeline.ShardWriter) error {
				return pipeline.MapBatches(ctx, f, env.ReadOptions(respSchema), w, func(rec arrow.RecordBatch) (arrow.RecordBatch, error) {
					resps, err := s.read(rec, questions)
					if err != nil {
						return nil, err
					}
					out, unrubric, err := j.judge(ctx, resps, byItem)
					if err != nil {
						return nil, err
					}
					if unrubric > 0 {
						env.Log.Warn("responses without a rubric for their item", "file", f, "count", unrubric)
					}
					miss.add(out)
					return schemas.Judgments.Build(env.Mem, out), nil
				})
			},
		}
	}
	if err := env.MapShards(ctx, tasks); err != nil {
		return fmt.Errorf("judge: %w", err)
	}
	if w := miss.warning(env.Global.Float("pipeline.warn_failure_fraction")); w != "" {
		env.Log.Warn(w)
	}
	return nil
}

// judge scores responses against their items' rubrics.
type judge struct {
	*Stage
	b        *roles.Backend
	version  string
	failures *pipeline.RowFailures // backend calls and their row failures
}

// job is one (response, rubric) to score.
type job struct {
	row      schemas.Judgment
	question string
	answer   string
	rubric   string // the rubric's text as the judge sees it
	criteria []prompts.Criterion
	weights  []float64
}

func missing(reason string) *string { return &reason }

// judge returns one judgment per (response, rubric of its item) and the
// number of responses whose item has no rubric.
func (j *judge) judge(ctx context.Context, resps []Response, byItem map[string][]schemas.Rubric) ([]schemas.Judgment, int, error) {
	var out []schemas.Judgment
	var jobs []job
	var slots []int // jobs[k] fills out[slots[k]]
	unrubric := 0
	for _, r := range resps {
		rubs := byItem[r.ItemID]
		if len(rubs) == 0 {
			unrubric++
			continue
		}
		if !r.HasQuestion {
			return nil, 0, fmt.Errorf("response %s: prompt %s is not in the prompts input", r.ID, r.ItemID)
		}
		for _, rub := range rubs {
			row := schemas.Judgment{
				JudgmentID: rules.JudgmentID(r.ID, rub.RubricID), ResponseID: r.ID, RubricID: rub.RubricID,
				Phase: j.spec.Phase, Step: j.spec.Step, JudgeModel: j.b.Model, JudgeMode: j.mode,
				PromptVersion: j.version, CriterionScores: []float64{},
			}
			switch {
			case r.Failed != nil:
				row.ScoreMissingReason = missing("response_failed: " + *r.Failed)
			case len(rub.Criteria) == 0 && !(j.judgeUnparsed && j.mode == schemas.JudgeGenerative):
				detail := "rubric has no criteria"
				if rub.ParseError != nil {
					detail += " (" + *rub.ParseError + ")"
				}
				row.ScoreMissingReason = missing(string(prompts.ReasonEmptyRubric) + ": " + detail)
			}
			if row.ScoreMissingReason != nil {
				out = append(out, row)
				continue
			}
			jb := job{row: row, question: r.Question, answer: thinking.Strip(r.Text), rubric: prompts.JudgeRubricText(rub.RawText)}
			all := rub.ScoringLevels
			if all == nil {
				// A version-1 rubrics file kept no levels: read them from the
				// generator's text.
				all = schemas.RubricLevels(rub.RawText)
			}
			if len(all) != len(rub.Criteria) {
				all = nil
			}
			for k, c := range rub.Criteria {
				var levels []schemas.Level
				if all != nil {
					levels = all[k]
				}
				jb.criteria = append(jb.criteria, prompts.Criterion{Criterion: c.Criterion, Weight: c.Weight, Levels: levels})
				jb.weights = append(jb.weights, c.Weight)
			}
			slots = append(slots, len(out))
			out = append(out, row)
			jobs = append(jobs, jb)
		}
	}
	err := lmstage.Chunks(ctx, len(jobs), j.batchRows, func(start, end int) error {
		var done []schemas.Judgment
		var err error
		if j.mode == schemas.JudgeYesNo {
			done, err = j.yesno(ctx, jobs[start:end])
		} else {
			done, err = j.generative(ctx, jobs[start:end])
		}
		if err != nil {
			return err
		}
		for k, d := range done {
			out[slots[start+k]] = d
		}
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	return out, unrubric, nil
}

// scoring is one way of asking the judge, generative or yes/no: request
// turns a job into a backend request, send answers a batch of them in one
// call, meta gives an answer's row failure and model, and fill scores a row
// from its answer. failures counts the requests sent and those that failed
// on the backend.
type scoring[Req, Res any] struct {
	request  func(jb *job) (Req, error)
	send     func(context.Context, []Req) ([]Res, error)
	meta     func(res *Res) (*backend.RowFailure, string)
	fill     func(row *schemas.Judgment, jb *job, res *Res) error
	failures *pipeline.RowFailures
}

// run scores jobs: each row starts as its job's row; an error from request
// leaves the score missing with its reason and the job out of the backend
// call, and a failed answer leaves it missing with the failure's text. A
// non-empty answer model replaces the row's judge model. An error from send
// or fill, or a short answer, fails the whole batch.
func (sc scoring[Req, Res]) run(ctx context.Context, jobs []job) ([]schemas.Judgment, error) {
	out := make([]schemas.Judgment, len(jobs))
	var reqs []Req
	var idx []int
	for k := range jobs {
		out[k] = jobs[k].row
		req, err := sc.request(&jobs[k])
		if err != nil {
			out[k].ScoreMissingReason = missing(reasonText(err))
			continue
		}
		reqs = append(reqs, req)
		idx = append(idx, k)
	}
	if len(reqs) == 0 {
		return out, nil
	}
	resps, err := sc.send(ctx, reqs)
	if err != nil {
		return nil, err
	}
	if len(resps) != len(reqs) {
		return nil, fmt.Errorf("backend answered %d of %d requests", len(resps), len(reqs))
	}
	failed, first := 0, ""
	defer func() { sc.failures.Add(len(reqs), failed, first) }()
	for i := range resps {
		res, row := &resps[i], &out[idx[i]]
		failure, model := sc.meta(res)
		if failure != nil {
			row.ScoreMissingReason = missing(lmstage.FailureText(failure))
			if failed == 0 {
				first = *row.ScoreMissingReason
			}
			failed++
			continue
		}
		if model != "" {
			row.JudgeModel = model
		}
		if err := sc.fill(row, &jobs[idx[i]], res); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// generative asks the judge for a JSON verdict per job.
func (j *judge) generative(ctx context.Context, jobs []job) ([]schemas.Judgment, error) {
	return scoring[backend.GenerateRequest, backend.GenerateResponse]{
		request: func(jb *job) (backend.GenerateRequest, error) {
			text := jb.rubric
			if strings.TrimSpace(text) == "" && len(jb.criteria) > 0 {
				// A rubrics row that kept no text (built from criteria).
				var err error
				if text, err = prompts.RubricJSON(jb.criteria); err != nil {
					return backend.GenerateRequest{}, err
				}
			}
			msgs, err := j.prompts.JudgeGenerative(jb.question, jb.answer, prompts.Rubric{Text: text, Criteria: jb.criteria})
			if err != nil {
				return backend.GenerateRequest{}, err
			}
			seed := j.spec.ItemSeed(jb.row.JudgmentID)
			sp := j.spec.Sampling
			sp.Seed = &seed
			return backend.GenerateRequest{ID: jb.row.JudgmentID, Messages: msgs, Sampling: sp}, nil
		},
		send: j.b.Generate,
		meta: func(res *backend.GenerateResponse) (*backend.RowFailure, string) { return res.Failure, res.Model },
		fill: func(row *schemas.Judgment, _ *job, res *backend.GenerateResponse) error {
			if len(res.Completions) != 1 {
				return fmt.Errorf("request %s: %d completions, want 1", res.ID, len(res.Completions))
			}
			row.RawText = res.Completions[0].Text
			v, err := j.reply.Parse(row.RawText)
			if err != nil {
				row.ScoreMissingReason = missing(reasonText(err))
				return nil
			}
			score := v.Score
			row.Score = &score
			return nil
		},
		failures: j.failures,
	}.run(ctx, jobs)
}

// yesno scores every criterion of each job from next-token log-probs.
func (j *judge) yesno(ctx context.Context, jobs []job) ([]schemas.Judgment, error) {
	return scoring[backend.ScoreRequest, backend.ScoreResponse]{
		request: func(jb *job) (backend.ScoreRequest, error) {
			// Weights are checked before any model call: a zero-weight rubric
			// is a per-row failure, not a wasted forward pass.
			if _, err := prompts.WeightedScore(jb.weights, make([]float64, len(jb.weights))); err != nil {
				return backend.ScoreRequest{}, err
			}
			prefix, suffixes, err := j.prompts.JudgeYesNo(jb.question, jb.answer, jb.criteria)
			if err != nil {
				return backend.ScoreRequest{}, err
			}
			// P(yes) / (P(yes) + P(no)) needs the candidates' log-probs
			// relative to each other only: an in-process judge then runs
			// the head's candidate rows, not the whole vocabulary's.
			return backend.ScoreRequest{ID: jb.row.JudgmentID, Prefix: prefix, Suffixes: suffixes, Candidates: j.yn.Candidates(), AmongCandidates: true}, nil
		},
		send: j.b.Score,
		meta: func(res *backend.ScoreResponse) (*backend.RowFailure, string) { return res.Failure, res.Model },
		fill: func(row *schemas.Judgment, jb *job, res *backend.ScoreResponse) error {
			total, per, err := prompts.YesNoScore(j.yn, jb.weights, res.LogProbs)
			if err != nil {
				row.ScoreMissingReason = missing(reasonText(err))
				return nil
			}
			row.CriterionScores, row.Score = per, &total
			return nil
		},
		failures: j.failures,
	}.run(ctx, jobs)
}

// reasonText renders a scoring failure as "<reason>: <detail>".
func reasonText(err error) string {
	var se *prompts.ScoreError
	if errors.As(err, &se) {
		return se.Error()
	}
	if r := prompts.ReasonOf(err); r != "" {
		return string(r)
	}
	return "invalid: " + err.Error()
}
