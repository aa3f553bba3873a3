// Package export is the `evolm export` stage: it joins a run's rollouts,
// rubrics, judgments, pairs, prompts and steps into analysis tables that
// DuckDB, polars and pandas read as they are.
//
// # Contract
//
// Inputs: the committed shards of every table (whichever stage committed
// them; pipeline.Run.TableShards). rollouts, rubrics, judgments and steps are
// required: a run without one of them is an error naming the run and the
// table (pipeline.ErrMissingTable). prompts and pairs are optional: without
// prompts the prompt column is null; without pairs no pair rows are written.
//
// Outputs: export_responses and export_pairs one shard per step (so the
// join holds one step in memory, never the run), export_steps one shard;
// each sorted and written through the pipeline's shard writer (zstd,
// statistics, schema and provenance in the metadata). The shards sit flat
// in their table's directory, not in Hive partition directories: every file
// keeps its step and phase columns, so a plain
// read_parquet('runs/<run>/export_responses/*.parquet') is analysis-ready.
// The output is derived from the run: a rerun with other settings (another
// --steps, say) replaces it, once the new export is complete (pipeline
// Spec.Replace).
//
//   - export_responses/part-<step>.parquet (the step zero-padded to five
//     digits: part-00012.parquet): one row
//     per policy response and judgment (a response judged twice has two
//     rows; one never judged has one, with null score): the prompt, the
//     response, its rubric (criteria, R_format), the judge's score and
//     per-criterion scores, and the step's reward and KL. Sorted by
//     prompt_id, sample_idx, judgment_id.
//   - export_pairs/part-<step>.parquet: one row per
//     (pair, candidate rubric): the pair (strategy, question, a+, a−, their
//     steps), the rubric, the judge's scores of a+ and a− under it and the
//     margin s(a+) − s(a−) (null when either is missing). A pair with no
//     rubric has one row with null rubric columns. Sorted by pair_id,
//     rubric_sample_idx.
//   - export_steps/part-00000.parquet: the steps table, sorted by step and
//     phase.
//
// Filters: steps ("10-20,25": ranges and single steps, inclusive) and phase
// ("policy" writes responses, "rubric" pairs; empty: both). The steps table
// is filtered by both.
//
// Joins: judgments.response_id = rollouts.rollout_id (responses) or
// "<pair_id>/chosen" | "<pair_id>/rejected" (pairs); judgments.rubric_id =
// rubrics.rubric_id; rubrics.item_id = pairs.pair_id for candidate rubrics;
// steps by (step, phase). Rows of a table are matched within the same step.
package export

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
)

// Name is the stage's registered name.
const Name = "export"

// promptBlockSteps is how many steps share one scan of the prompts table.
const promptBlockSteps = 64

// Output tables.
const (
	ResponsesTable = "export_responses"
	PairsTable     = "export_pairs"
	StepsTable     = "export_steps"
)

// Config keys of stages.export.
const (
	KeySteps = "steps"
	KeyPhase = "phase"
)

func init() {
	pipeline.Register(pipeline.Spec{
		Name:    Name,
		Summary: "join rollouts, rubrics, judgments, pairs and steps into analysis tables (one row per response, per pair)",
		Description: `Writes export_responses (one row per policy response and judgment: prompt,
response, rubric, score, step metrics) and export_pairs (one row per pair and
candidate rubric: strategy, both scores and the margin) as one sorted zstd
shard per step (part-<step>.parquet, the step in five digits: part-00012.parquet),
streamed step by step, and export_steps (the steps table) as one shard,
part-00000.parquet. Every file carries its step and phase columns, so DuckDB
(read_parquet('runs/<run>/export_responses/*.parquet')), polars and pandas read
them as they are. The export is derived from the run: rerunning it with other
settings replaces it (the old export stays until the new one is complete), so
no --fresh is needed.`,
		Inputs:  []string{schemas.Rollouts.Name, schemas.Rubrics.Name, schemas.Judgments.Name, schemas.Steps.Name, schemas.Pairs.Name, schemas.Prompts.Name},
		Outputs: []string{ResponsesTable, PairsTable, StepsTable},
		Fields: []pipeline.Field{
			{Key: KeySteps, Type: pipeline.TypeString, Default: "",
				Description: "steps to export: comma-separated steps and inclusive ranges; empty: all", Example: "10-20,25"},
			{Key: KeyPhase, Type: pipeline.TypeString, Default: "", Enum: []string{"", schemas.PhasePolicy, schemas.PhaseRubric},
				Description: "phase to export: policy (responses) or rubric (pairs); empty: both"},
		},
		// Derived from the run: other settings replace the export.
		Replace: true,
		New:     func(cfg *pipeline.Config) (pipeline.Stage, error) { return newExportFromConfig(cfg) },
	})
}

// Stage is the export stage.
type Stage struct {
	Steps StepSet
	Phase string
}

func newExportFromConfig(cfg *pipeline.Config) (*Stage, error) {
	steps, err := ParseSteps(cfg.String(KeySteps))
	if err != nil {
		return nil, cfg.Errorf(KeySteps, "%v", err)
	}
	return &Stage{Steps: steps, Phase: cfg.String(KeyPhase)}, nil
}

// StepSet is a set of steps given as inclusive ranges; the zero value holds
// every step.
type StepSet struct{ ranges [][2]int64 }

// ParseSteps parses "10-20,25" (spaces allowed); "" is every step.
func ParseSteps(s string) (StepSet, error) {
	var set StepSet
	if strings.TrimSpace(s) == "" {
		return set, nil
	}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.ParseInt(strings.TrimSpace(lo), 10, 64)
		if err != nil || a < 0 {
			return StepSet{}, fmt.Errorf("step %q in %q: want N or N-M with N, M ≥ 0", part, s)
		}
		b := a
		if isRange {
			if b, err = strconv.ParseInt(strings.TrimSpace(hi), 10, 64); err != nil || b < a {
				return StepSet{}, fmt.Errorf("range %q in %q: want N-M with 0 ≤ N ≤ M", part, s)
			}
		}
		set.ranges = append(set.ranges, [2]int64{a, b})
	}
	return set, nil
}

// Has reports whether step is in the set.
func (s StepSet) Has(step int64) bool {
	if len(s.ranges) == 0 {
		return true
	}
	for _, r := range s.ranges {
		if step >= r[0] && step <= r[1] {
			return true
		}
	}
	return false
}

// Run writes the export tables.
func (s *Stage) Run(ctx context.Context, env *pipeline.Env) error {
	req := map[string][]pipeline.TableShard{}
	for _, t := range []string{schemas.Rollouts.Name, schemas.Rubrics.Name, schemas.Judgments.Name, schemas.Steps.Name} {
		sh, err := env.Run.TableShards(t)
		if err != nil {
			return err
		}
		req[t] = sh
	}
	opt := map[string][]pipeline.TableShard{}
	for _, t := range []string{schemas.Pairs.Name, schemas.Prompts.Name} {
		sh, err := env.Run.TableShards(t)
		if err != nil && !errors.Is(err, pipeline.ErrMissingTable) {
			return err
		}
		opt[t] = sh
	}
	steps, err := pipeline.ReadRows(ctx, env, schemas.Steps, req[schemas.Steps.Name])
	if err != nil {
		return err
	}
	stepByKey := map[stepKey]*schemas.StepMetrics{}
	var keptSteps []schemas.StepMetrics
	for i := range steps {
		st := &steps[i]
		stepByKey[stepKey{st.Phase, st.Step}] = st
		if s.Steps.Has(st.Step) && (s.Phase == "" || s.Phase == st.Phase) {
			keptSteps = append(keptSteps, *st)
		}
	}
	slices.SortFunc(keptSteps, func(a, b schemas.StepMetrics) int {
		return cmp.Or(cmp.Compare(a.Step, b.Step), cmp.Compare(a.Phase, b.Phase))
	})
	j := &joiner{env: env, steps: stepByKey, prompts: opt[schemas.Prompts.Name]}

	var tasks []pipeline.Task
	byStep := func(shards []pipeline.TableShard, phase string) map[int64][]pipeline.TableShard {
		m := map[int64][]pipeline.TableShard{}
		for _, sh := range shards {
			if sh.Step < 0 {
				continue
			}
			if (phase == "" || sh.Phase == "" || sh.Phase == phase) && s.Steps.Has(sh.Step) {
				m[sh.Step] = append(m[sh.Step], sh)
			}
		}
		return m
	}
	for _, sh := range append(append(append([]pipeline.TableShard{}, req[schemas.Rollouts.Name]...), req[schemas.Rubrics.Name]...), req[schemas.Judgments.Name]...) {
		if sh.Step < 0 {
			return fmt.Errorf("run %s: shard %s has no step=… partition; export joins step by step", env.Run.Dir, sh.Rel)
		}
	}
	if s.Phase != schemas.PhaseRubric {
		rolls := byStep(req[schemas.Rollouts.Name], schemas.PhasePolicy)
		rubs := byStep(req[schemas.Rubrics.Name], schemas.PhasePolicy)
		judg := byStep(req[schemas.Judgments.Name], schemas.PhasePolicy)
		// Prompt texts are looked up once per block of steps: one projected
		// scan of the prompts table per block, holding only that block's texts.
		stepList := slices.Sorted(maps.Keys(rolls))
		for start := 0; start < len(stepList); start += promptBlockSteps {
			block := stepList[start:min(start+promptBlockSteps, len(stepList))]
			ids := map[string]bool{}
			for _, step := range block {
				if err := j.promptIDs(ctx, rolls[step], ids); err != nil {
					return err
				}
			}
			texts, err := j.promptTexts(ctx, ids)
			if err != nil {
				return err
			}
			var tasks []pipeline.Task
			for _, step := range block {
				tasks = append(tasks, pipeline.Task{
					Output: pipeline.ShardPath(ResponsesTable, int(step)),
					Schema: ResponsesSchema, Inputs: inputs(rolls[step], rubs[step], judg[step], opt[schemas.Prompts.Name]),
					Write: func(ctx context.Context, w *pipeline.ShardWriter) error {
						return j.responses(ctx, w, step, rolls[step], rubs[step], judg[step], texts)
					},
				})
			}
			if err := env.MapShards(ctx, tasks); err != nil {
				return err
			}
		}
	}
	if s.Phase != schemas.PhasePolicy {
		prs := byStep(opt[schemas.Pairs.Name], schemas.PhaseRubric)
		rubs := byStep(req[schemas.Rubrics.Name], schemas.PhaseRubric)
		judg := byStep(req[schemas.Judgments.Name], schemas.PhaseRubric)
		for _, step := range slices.Sorted(maps.Keys(prs)) {
			in := inputs(prs[step], rubs[step], judg[step])
			tasks = append(tasks, pipeline.Task{
				Output: pipeline.ShardPath(PairsTable, int(step)),
				Schema: PairsSchema, Inputs: in,
				Write: func(ctx context.Context, w *pipeline.ShardWriter) error {
					return j.pairs(ctx, w, step, prs[step], rubs[step], judg[step])
				},
			})
		}
	}
	tasks = append(tasks, pipeline.Task{
		Output: pipeline.ShardPath(StepsTable, 0), Schema: schemas.Steps.Schema(),
		Inputs: inputs(req[schemas.Steps.Name]), Rows: int64(len(keptSteps)),
		Write: pipeline.WriteBatch(func() arrow.RecordBatch { return schemas.Steps.Build(env.Mem, keptSteps) }),
	})
	return env.MapShards(ctx, tasks)
}

type stepKey struct {
	phase string
	step  int64
}

func inputs(groups ...[]pipeline.TableShard) []string {
	var out []string
	for _, g := range groups {
		for _, sh := range g {
			out = append(out, sh.Path)
		}
	}
	return out
}

// promptTextSchema projects the prompts table onto the join key and text.
var promptTextSchema = arrow.NewSchema([]arrow.Field{
	{Name: "prompt_id", Type: arrow.BinaryTypes.String},
	{Name: "prompt", Type: arrow.BinaryTypes.String},
}, nil)
