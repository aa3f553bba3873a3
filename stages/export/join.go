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

var criteriaType = arrow.ListOf(arrow.StructOf(
	arrow.Field{Name: "criterion", Type: arrow.BinaryTypes.String},
	arrow.Field{Name: "weight", Type: arrow.PrimitiveTypes.Float64},
))

func str(name string) arrow.Field { return arrow.Field{Name: name, Type: arrow.BinaryTypes.String} }
func optStr(name string) arrow.Field {
	return arrow.Field{Name: name, Type: arrow.BinaryTypes.String, Nullable: true}
}
func i64(name string) arrow.Field { return arrow.Field{Name: name, Type: arrow.PrimitiveTypes.Int64} }
func i32(name string) arrow.Field { return arrow.Field{Name: name, Type: arrow.PrimitiveTypes.Int32} }
func optI32(name string) arrow.Field {
	return arrow.Field{Name: name, Type: arrow.PrimitiveTypes.Int32, Nullable: true}
}
func optF64(name string) arrow.Field {
	return arrow.Field{Name: name, Type: arrow.PrimitiveTypes.Float64, Nullable: true}
}
func optBool(name string) arrow.Field {
	return arrow.Field{Name: name, Type: arrow.FixedWidthTypes.Boolean, Nullable: true}
}

func tableSchema(name string, fields ...arrow.Field) *arrow.Schema {
	md := arrow.NewMetadata([]string{schemas.MetaTable, schemas.MetaVersion}, []string{name, "1"})
	return arrow.NewSchema(fields, &md)
}

// ResponsesSchema is the schema of export_responses.
var ResponsesSchema = tableSchema(ResponsesTable,
	i64("step"), str("phase"), str("prompt_id"), optStr("prompt"), str("rollout_id"), i32("sample_idx"),
	str("response"), i32("completion_tokens"), str("finish_reason"), str("model"), str("checkpoint"),
	optStr("rubric_id"), optBool("rubric_format_ok"), optI32("n_criteria"),
	arrow.Field{Name: "criteria", Type: criteriaType, Nullable: true},
	optStr("judgment_id"), optStr("judge_model"), optF64("score"),
	arrow.Field{Name: "criterion_scores", Type: arrow.ListOf(arrow.PrimitiveTypes.Float64), Nullable: true},
	optStr("score_missing_reason"), optF64("step_reward_mean"), optF64("step_kl"),
)

// PairsSchema is the schema of export_pairs.
var PairsSchema = tableSchema(PairsTable,
	i64("step"), str("phase"), str("pair_id"), str("prompt_id"), str("strategy"), str("question"),
	str("chosen"), str("rejected"), i64("chosen_step"), i64("rejected_step"), optStr("inferred_question"),
	optStr("rubric_id"), optI32("rubric_sample_idx"), optBool("rubric_format_ok"), optI32("n_criteria"),
	optStr("judge_model"), optF64("score_chosen"), optF64("score_rejected"), optF64("margin"),
	optF64("step_reward_mean"), optF64("step_kl"),
)

// rowBuilder appends values to the fields of a record builder in order.
type rowBuilder struct {
	b *array.RecordBuilder
	i int
}

func (r *rowBuilder) next() array.Builder { f := r.b.Field(r.i); r.i++; return f }
func (r *rowBuilder) str(s string)        { r.next().(*array.StringBuilder).Append(s) }
func (r *rowBuilder) optStr(s *string)    { appendOpt(r.next().(*array.StringBuilder), s) }
func (r *rowBuilder) i64(v int64)         { r.next().(*array.Int64Builder).Append(v) }
func (r *rowBuilder) i32(v int32)         { r.next().(*array.Int32Builder).Append(v) }
func (r *rowBuilder) optI32(v *int32)     { appendOpt(r.next().(*array.Int32Builder), v) }
func (r *rowBuilder) optF64(v *float64)   { appendOpt(r.next().(*array.Float64Builder), v) }
func (r *rowBuilder) optBool(v *bool)     { appendOpt(r.next().(*array.BooleanBuilder), v) }

// appendOpt appends *v to b, or a null when v is nil.
func appendOpt[V any, B interface {
	Append(V)
	AppendNull()
}](b B, v *V) {
	if v != nil {
		b.Append(*v)
	} else {
		b.AppendNull()
	}
}

// list appends the next list value: a null when !ok (and returns nil), or a
// list whose elements the caller appends to the returned value builder.
func (r *rowBuilder) list(ok bool) array.Builder {
	lb := r.next().(*array.ListBuilder)
	if !ok {
		lb.AppendNull()
		return nil
	}
	lb.Append(true)
	return lb.ValueBuilder()
}
func (r *rowBuilder) criteria(c []schemas.Criterion, ok bool) {
	if vb := r.list(ok); vb != nil {
		sb := vb.(*array.StructBuilder)
		for _, x := range c {
			sb.Append(true)
			sb.FieldBuilder(0).(*array.StringBuilder).Append(x.Criterion)
			sb.FieldBuilder(1).(*array.Float64Builder).Append(x.Weight)
		}
	}
}
func (r *rowBuilder) f64s(v []float64, ok bool) {
	if vb := r.list(ok); vb != nil {
		vb.(*array.Float64Builder).AppendValues(v, nil)
	}
}

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

// flush writes the builder's rows as one batch.
func flush(w *pipeline.ShardWriter, b *array.RecordBuilder) error {
	rec := b.NewRecordBatch()
	defer rec.Release()
	if rec.NumRows() == 0 {
		return nil
	}
	return w.Write(rec)
}

const batchRows = 4096

// writeRows writes the rows of one joined table: for each item in order, one
// row per match (in the order matches gives them), or one row with a nil
// match when it has none. row appends a row's fields through rb; a batch is
// flushed every batchRows rows.
func writeRows[T, M any](ctx context.Context, mem memory.Allocator, w *pipeline.ShardWriter, schema *arrow.Schema, items []T, matches func(*T) []*M, row func(rb *rowBuilder, item *T, match *M)) error {
	b := array.NewRecordBuilder(mem, schema)
	defer b.Release()
	for i := range items {
		if err := ctx.Err(); err != nil {
			return err
		}
		ms := matches(&items[i])
		if len(ms) == 0 {
			row(&rowBuilder{b: b}, &items[i], nil)
		}
		for _, m := range ms {
			row(&rowBuilder{b: b}, &items[i], m)
		}
		if b.Field(0).Len() >= batchRows {
			if err := flush(w, b); err != nil {
				return err
			}
		}
	}
	return flush(w, b)
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

	row := func(rb *rowBuilder, r *schemas.Rollout, jd *schemas.Judgment) {
		rb.i64(r.Step)
		rb.str(r.Phase)
		rb.str(r.PromptID)
		if t, ok := texts[r.PromptID]; ok {
			rb.optStr(&t)
		} else {
			rb.optStr(nil)
		}
		rb.str(r.RolloutID)
		rb.i32(r.SampleIdx)
		rb.str(r.Text)
		rb.i32(r.CompletionTokens)
		rb.str(r.FinishReason)
		rb.str(r.Model)
		rb.str(r.Checkpoint)
		var rub *schemas.Rubric
		if jd != nil {
			rub = rubByID[jd.RubricID]
		}
		if rub != nil {
			n := int32(len(rub.Criteria))
			rb.optStr(&rub.RubricID)
			rb.optBool(&rub.FormatOK)
			rb.optI32(&n)
			rb.criteria(rub.Criteria, true)
		} else {
			var rid *string
			if jd != nil {
				rid = &jd.RubricID
			}
			rb.optStr(rid)
			rb.optBool(nil)
			rb.optI32(nil)
			rb.criteria(nil, false)
		}
		if jd != nil {
			rb.optStr(&jd.JudgmentID)
			rb.optStr(&jd.JudgeModel)
			rb.optF64(jd.Score)
			rb.f64s(jd.CriterionScores, true)
			rb.optStr(jd.ScoreMissingReason)
		} else {
			rb.optStr(nil)
			rb.optStr(nil)
			rb.optF64(nil)
			rb.f64s(nil, false)
			rb.optStr(nil)
		}
		rb.optF64(reward)
		rb.optF64(kl)
	}
	judgmentsOf := func(r *schemas.Rollout) []*schemas.Judgment { return judgByResp[r.RolloutID] }
	return writeRows(ctx, j.env.Mem, w, ResponsesSchema, rolls, judgmentsOf, row)
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

	row := func(rb *rowBuilder, p *schemas.Pair, rub *schemas.Rubric) {
		rb.i64(p.Step)
		rb.str(schemas.PhaseRubric)
		rb.str(p.PairID)
		rb.str(p.PromptID)
		rb.str(p.Strategy)
		rb.str(p.Question)
		rb.str(p.Chosen)
		rb.str(p.Rejected)
		rb.i64(p.ChosenStep)
		rb.i64(p.RejectedStep)
		rb.optStr(p.InferredQuestion)
		if rub == nil {
			for range 8 {
				rb.next().AppendNull()
			}
		} else {
			n := int32(len(rub.Criteria))
			rb.optStr(&rub.RubricID)
			rb.optI32(&rub.SampleIdx)
			rb.optBool(&rub.FormatOK)
			rb.optI32(&n)
			jc, jr := judgBy[key{rules.ChosenID(p.PairID), rub.RubricID}], judgBy[key{rules.RejectedID(p.PairID), rub.RubricID}]
			var model *string
			var sc, sr, margin *float64
			if jc != nil {
				model, sc = &jc.JudgeModel, jc.Score
			}
			if jr != nil {
				sr = jr.Score
				if model == nil {
					model = &jr.JudgeModel
				}
			}
			if sc != nil && sr != nil {
				m := *sc - *sr
				margin = &m
			}
			rb.optStr(model)
			rb.optF64(sc)
			rb.optF64(sr)
			rb.optF64(margin)
		}
		rb.optF64(reward)
		rb.optF64(kl)
	}
	rubricsOf := func(p *schemas.Pair) []*schemas.Rubric { return rubsByItem[p.PairID] }
	return writeRows(ctx, j.env.Mem, w, PairsSchema, prs, rubricsOf, row)
}
