package export

import (
	"cmp"
	"context"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/evolm/evolm/method/rules"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
)

// joiner joins one step's rows.
type joiner struct {
	env     *pipeline.Env
	steps   map[stepKey]*schemas.StepMetrics
	prompts []pipeline.TableShard
}

// ResponsesSchema is the schema of export_responses
// (schemas.ExportResponses).
var ResponsesSchema = schemas.ExportResponses.Schema()

// PairsSchema is the schema of export_pairs (schemas.ExportPairs).
var PairsSchema = schemas.ExportPairs.Schema()

// stepMetrics returns the step's reward mean and KL, or nils.
func (j *joiner) stepMetrics(phase string, step int64) (*float64, *float64) {
	st, ok := j.steps[stepKey{phase, step}]
	if !ok {
		return nil, nil
	}
	r, kl := st.RewardMean, st.KL
	return &r, &kl
}

// promptIDs returns the prompt ids of the rollouts in shards (a projected
// read of one column).
func (j *joiner) promptIDs(ctx context.Context, shards []pipeline.TableShard, ids map[string]bool) error {
	for _, sh := range shards {
		for rec, err := range pipeline.ReadShard(ctx, sh.Path, j.env.ReadOptions(promptIDSchema)) {
			if err != nil {
				return err
			}
			a := rec.Column(0).(*array.String)
			for i := 0; i < a.Len(); i++ {
				ids[a.Value(i)] = true
			}
		}
	}
	return nil
}

var promptIDSchema = arrow.NewSchema([]arrow.Field{{Name: "prompt_id", Type: arrow.BinaryTypes.String}}, nil)

// promptTexts returns the text of each prompt id in ids found in the prompts
// table (a projected scan: prompt_id and prompt only).
func (j *joiner) promptTexts(ctx context.Context, ids map[string]bool) (map[string]string, error) {
	out := map[string]string{}
	for _, sh := range j.prompts {
		for rec, err := range pipeline.ReadShard(ctx, sh.Path, j.env.ReadOptions(promptTextSchema)) {
			if err != nil {
				return nil, err
			}
			pid, txt := rec.Column(0).(*array.String), rec.Column(1).(*array.String)
			for i := 0; i < pid.Len(); i++ {
				if id := pid.Value(i); ids[id] {
					out[id] = txt.Value(i)
				}
			}
		}
	}
	return out, nil
}

const batchRows = 4096

// writeRows writes the rows of one joined table t: for each item in order,
// one row per match (in the order matches gives them), or one row with a
// nil match when it has none; row makes each. A batch is flushed every
// batchRows rows.
func writeRows[T, M, R any](ctx context.Context, mem memory.Allocator, w *pipeline.ShardWriter, t *schemas.Table[R], items []T, matches func(*T) []*M, row func(item *T, match *M) R) error {
	b := t.NewBuilder(mem)
	defer b.Release()
	for i := range items {
		if err := ctx.Err(); err != nil {
			return err
		}
		ms := matches(&items[i])
		if len(ms) == 0 {
			r := row(&items[i], nil)
			b.Append(&r)
		}
		for _, m := range ms {
			r := row(&items[i], m)
			b.Append(&r)
		}
		if b.Len() >= batchRows {
			if err := b.Flush(w); err != nil {
				return err
			}
		}
	}
	return b.Flush(w)
}

// readStep reads one step's rows of t with the rubrics and judgments they
// join with.
func readStep[T any](ctx context.Context, env *pipeline.Env, t *schemas.Table[T], shards, rubShards, judgShards []pipeline.TableShard) ([]T, []schemas.Rubric, []schemas.Judgment, error) {
	rows, err := pipeline.ReadRows(ctx, env, t, shards)
	if err != nil {
		return nil, nil, nil, err
	}
	rubs, err := pipeline.ReadRows(ctx, env, schemas.Rubrics, rubShards)
	if err != nil {
		return nil, nil, nil, err
	}
	judgs, err := pipeline.ReadRows(ctx, env, schemas.Judgments, judgShards)
	if err != nil {
		return nil, nil, nil, err
	}
	return rows, rubs, judgs, nil
}

func (j *joiner) responses(ctx context.Context, w *pipeline.ShardWriter, step int64, rollShards, rubShards, judgShards []pipeline.TableShard, texts map[string]string) error {
	rolls, rubs, judgs, err := readStep(ctx, j.env, schemas.Rollouts, rollShards, rubShards, judgShards)
	if err != nil {
		return err
	}
	rolls = slices.DeleteFunc(rolls, func(r schemas.Rollout) bool {
		return r.Role != schemas.RolePolicy || r.Phase != schemas.PhasePolicy || r.Step != step
	})
	slices.SortFunc(rolls, func(a, b schemas.Rollout) int {
		return cmp.Or(strings.Compare(a.PromptID, b.PromptID), cmp.Compare(a.SampleIdx, b.SampleIdx), strings.Compare(a.RolloutID, b.RolloutID))
	})
	rubByID := map[string]*schemas.Rubric{}
	for i := range rubs {
		rubByID[rubs[i].RubricID] = &rubs[i]
	}
	judgByResp := map[string][]*schemas.Judgment{}
	for i := range judgs {
		judgByResp[judgs[i].ResponseID] = append(judgByResp[judgs[i].ResponseID], &judgs[i])
	}
	for _, js := range judgByResp {
		slices.SortFunc(js, func(a, b *schemas.Judgment) int { return strings.Compare(a.JudgmentID, b.JudgmentID) })
	}
	reward, kl := j.stepMetrics(schemas.PhasePolicy, step)

	row := func(r *schemas.Rollout, jd *schemas.Judgment) schemas.ExportResponse {
		out := schemas.ExportResponse{Step: r.Step, Phase: r.Phase, PromptID: r.PromptID, RolloutID: r.RolloutID, SampleIdx: r.SampleIdx,
			Response: r.Text, CompletionTokens: r.CompletionTokens, FinishReason: r.FinishReason, Model: r.Model, Checkpoint: r.Checkpoint,
			StepRewardMean: reward, StepKL: kl}
		if t, ok := texts[r.PromptID]; ok {
			out.Prompt = &t
		}
		if jd == nil {
			return out
		}
		out.RubricID = &jd.RubricID
		if rub := rubByID[jd.RubricID]; rub != nil {
			n := int32(len(rub.Criteria))
			out.RubricFormatOK, out.NCriteria, out.Criteria = &rub.FormatOK, &n, &rub.Criteria
		}
		out.JudgmentID, out.JudgeModel, out.Score = &jd.JudgmentID, &jd.JudgeModel, jd.Score
		out.CriterionScores, out.ScoreMissingReason = &jd.CriterionScores, jd.ScoreMissingReason
		return out
	}
	judgmentsOf := func(r *schemas.Rollout) []*schemas.Judgment { return judgByResp[r.RolloutID] }
	return writeRows(ctx, j.env.Mem, w, schemas.ExportResponses, rolls, judgmentsOf, row)
}

func (j *joiner) pairs(ctx context.Context, w *pipeline.ShardWriter, step int64, pairShards, rubShards, judgShards []pipeline.TableShard) error {
	prs, rubs, judgs, err := readStep(ctx, j.env, schemas.Pairs, pairShards, rubShards, judgShards)
	if err != nil {
		return err
	}
	prs = slices.DeleteFunc(prs, func(p schemas.Pair) bool { return p.Step != step })
	slices.SortFunc(prs, func(a, b schemas.Pair) int { return strings.Compare(a.PairID, b.PairID) })
	rubsByItem := map[string][]*schemas.Rubric{}
	for i := range rubs {
		if rubs[i].Phase == schemas.PhaseRubric {
			rubsByItem[rubs[i].ItemID] = append(rubsByItem[rubs[i].ItemID], &rubs[i])
		}
	}
	for _, rs := range rubsByItem {
		slices.SortFunc(rs, func(a, b *schemas.Rubric) int {
			return cmp.Or(cmp.Compare(a.SampleIdx, b.SampleIdx), strings.Compare(a.RubricID, b.RubricID))
		})
	}
	type key struct{ resp, rubric string }
	judgBy := map[key]*schemas.Judgment{}
	for i := range judgs {
		judgBy[key{judgs[i].ResponseID, judgs[i].RubricID}] = &judgs[i]
	}
	reward, kl := j.stepMetrics(schemas.PhaseRubric, step)

	row := func(p *schemas.Pair, rub *schemas.Rubric) schemas.ExportPair {
		out := schemas.ExportPair{Step: p.Step, Phase: schemas.PhaseRubric, PairID: p.PairID, PromptID: p.PromptID, Strategy: p.Strategy,
			Question: p.Question, Chosen: p.Chosen, Rejected: p.Rejected, ChosenStep: p.ChosenStep, RejectedStep: p.RejectedStep,
			InferredQuestion: p.InferredQuestion, StepRewardMean: reward, StepKL: kl}
		if rub == nil {
			return out
		}
		n := int32(len(rub.Criteria))
		out.RubricID, out.RubricSampleIdx, out.RubricFormatOK, out.NCriteria = &rub.RubricID, &rub.SampleIdx, &rub.FormatOK, &n
		jc, jr := judgBy[key{rules.ChosenID(p.PairID), rub.RubricID}], judgBy[key{rules.RejectedID(p.PairID), rub.RubricID}]
		if jc != nil {
			out.JudgeModel, out.ScoreChosen = &jc.JudgeModel, jc.Score
		}
		if jr != nil {
			out.ScoreRejected = jr.Score
			if out.JudgeModel == nil {
				out.JudgeModel = &jr.JudgeModel
			}
		}
		if out.ScoreChosen != nil && out.ScoreRejected != nil {
			m := *out.ScoreChosen - *out.ScoreRejected
			out.Margin = &m
		}
		return out
	}
	rubricsOf := func(p *schemas.Pair) []*schemas.Rubric { return rubsByItem[p.PairID] }
	return writeRows(ctx, j.env.Mem, w, schemas.ExportPairs, prs, rubricsOf, row)
}
