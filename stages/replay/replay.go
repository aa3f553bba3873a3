// Package replay is `evolm replay`, the cross-judge experiment: it re-scores
// a finished (or running) run's stored preference pairs with another judge,
// another rubric generator checkpoint, or both, into a NEW run directory,
// and reports discriminative accuracy (the share of (pair, rubric) with
// s(a+) > s(a−)) overall, per strategy and per step.
//
// # Contract
//
//   - source: a run directory (it must hold _manifests/). It is only read:
//     nothing is created, written or removed under it, and the target run
//     (run.dir / --run) must be another directory.
//   - Inputs: the source's committed pairs shards (table pairs, phase=rubric
//     step partitions) and, when the rubrics are reused, its rubric-phase
//     rubrics (item_id = pair_id).
//   - Rubrics: new_rubrics false reuses the source's rubrics; true has the
//     rubric generator of roles.rubric_generator sample n candidates per
//     pair from the question alone, as the co-evolution loop writes
//     rubric-phase rubrics.
//   - Settings: the judge, the rubric generator and the rubric rules start
//     from the source run's saved config.yaml (as `evolm run` wrote it):
//     only what the command sets (--config, env vars, flags) overrides it,
//     and each key it changed is logged. A source without config.yaml
//     starts from the defaults.
//   - Judge: roles.judge (model, mode, sampling, prompts, backend); one
//     judgment per (answer, rubric), response ids
//     "<pair_id>/chosen" and "<pair_id>/rejected". A rubric failing R_format
//     is judged as the loop judges it (invalid_rubric, rules.JudgingRubric); the
//     rubrics written are the source's (or generator's) rows, unchanged.
//   - Outputs in the target run, per source step: pairs (copied rows),
//     rubrics (reused or new) and judgments, all under
//     <table>/phase=rubric/step=N/; then replay_results
//     (replay_results/part-00000.parquet), printed to stderr, each accuracy
//     with its coverage (the share of (pair, rubric) with both scores). A
//     rerun resumes after the steps whose judgments are committed.
//   - Failures: a step whose every judge (or generator) call failed on the
//     backend stops the replay before anything of it is written; an overall
//     coverage below min_coverage fails it after the results are printed.
package replay

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/evolm/evolm/internal/lmstage"
	"github.com/evolm/evolm/method/rules"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/serving/roles"
	"github.com/evolm/evolm/stages/eval"
	"github.com/evolm/evolm/stages/export"
	"github.com/evolm/evolm/stages/judge"
	"github.com/evolm/evolm/stages/rubrics"
)

// Name is the stage's registered name.
const Name = "replay"

// Config keys of stages.replay.
const (
	KeySource        = "source"
	KeyNewRubrics    = "new_rubrics"
	KeyN             = lmstage.KeyN
	KeySeed          = lmstage.KeySeed
	KeySteps         = "steps"
	KeyInvalidRubric = "invalid_rubric"
	KeyMinCoverage   = "min_coverage"
)

func init() {
	pipeline.Register(pipeline.Spec{
		Name:    Name,
		Summary: "re-score a run's stored pairs with another judge and/or rubric generator into a new run",
		Description: `Reads the pairs (and, unless new_rubrics is set, the rubrics) of the source
run, judges a+ and a− under every rubric with the judge of roles.judge (set
--judge-model to replay with another judge), and writes pairs, rubrics, judgments and
replay_results (discriminative accuracy overall, per strategy and per step) into
the target run. The source run is never modified.`,
		Inputs:  []string{schemas.Pairs.Name, schemas.Rubrics.Name},
		Outputs: []string{schemas.Pairs.Name, schemas.Rubrics.Name, schemas.Judgments.Name, ResultsTable},
		Fields: []pipeline.Field{
			{Key: KeySource, Type: pipeline.TypeString, Default: "", Required: true, Description: "the source run directory (read only)", Example: "runs/demo"},
			{Key: KeyNewRubrics, Type: pipeline.TypeBool, Default: false,
				Description: "write new rubrics with the rubric generator of roles.rubric_generator; false: reuse the source's rubrics"},
			{Key: KeyN, Type: pipeline.TypeInt, Default: 8, Min: pipeline.Bound(1), Description: "new_rubrics: candidate rubrics per pair"},
			{Key: KeySeed, Type: pipeline.TypeInt, Default: 0, Description: "base seed of rubric and judge sampling; each row's seed derives from it and the row's key"},
			{Key: KeySteps, Type: pipeline.TypeString, Default: "", Description: "source steps to replay (e.g. 10-20,25); empty: all"},
			{Key: KeyInvalidRubric, Type: pipeline.TypeString, Default: rules.InvalidRawText, Enum: rules.InvalidPolicies,
				Description: "judging under a rubric that fails R_format: raw_text (its text as one criterion, as the loop does) or skip"},
			{Key: KeyMinCoverage, Type: pipeline.TypeFloat, Default: 0.5, Min: pipeline.Bound(0), Max: pipeline.Bound(1),
				Description: "fail when fewer than this share of (pair, rubric) have both scores (the accuracy covers only those); 0 accepts any coverage"},
		},
		// The judge, rubric generator and rubric rules start from the source
		// run's saved config.yaml: the command overrides only what it sets.
		Base: func(cfg *pipeline.Config) string { return sourceConfig(cfg.String(KeySource)) },
		Uses: append(roles.Uses(roles.RubricGenerator, roles.Judge), rubrics.Section),
		Moved: map[string]string{
			"generator_model": roles.Section(roles.RubricGenerator) + "." + roles.KeyModel + " (with stages.replay.new_rubrics: true)",
			"judge_model":     roles.Section(roles.Judge) + "." + roles.KeyModel,
		},
		New: func(cfg *pipeline.Config) (pipeline.Stage, error) { return newReplayFromConfig(cfg) },
	})
}

// Stage is the replay stage.
type Stage struct {
	Source        string
	NewRubrics    bool
	Steps         export.StepSet
	InvalidRubric string
	MinCoverage   float64
	cfg           *pipeline.Config // the stage's view: its roles
}

// sourceConfig returns the source run's saved config (config.yaml, which
// `evolm run` writes), or "" when it has none.
func sourceConfig(source string) string {
	if source == "" {
		return ""
	}
	p := filepath.Join(source, "config.yaml")
	if st, err := os.Stat(p); err != nil || !st.Mode().IsRegular() {
		return ""
	}
	return p
}

func newReplayFromConfig(cfg *pipeline.Config) (*Stage, error) {
	steps, err := export.ParseSteps(cfg.String(KeySteps))
	if err != nil {
		return nil, cfg.Errorf(KeySteps, "%v", err)
	}
	s := &Stage{Source: cfg.String(KeySource), NewRubrics: cfg.Bool(KeyNewRubrics), Steps: steps,
		InvalidRubric: cfg.String(KeyInvalidRubric), MinCoverage: cfg.Float(KeyMinCoverage), cfg: cfg}
	if s.Source == "" {
		return nil, cfg.Unsetf(KeySource, "no source run given")
	}
	return s, nil
}

// ErrSameRun is returned when the target run is the source run.
var ErrSameRun = errors.New("replay writes a new run: the target run directory is the source")

// sourceRun checks and opens the source read-only (without OpenRun, which
// would create _manifests/).
func sourceRun(source, target string) (*pipeline.Run, error) {
	st, err := os.Stat(filepath.Join(source, "_manifests"))
	if err != nil || !st.IsDir() {
		return nil, fmt.Errorf("source %s: not a run directory (no _manifests/)", source)
	}
	a, err1 := filepath.EvalSymlinks(source)
	b, err2 := filepath.EvalSymlinks(target)
	if err1 == nil && err2 == nil {
		if aa, err := filepath.Abs(a); err == nil {
			if bb, err := filepath.Abs(b); err == nil && aa == bb {
				return nil, fmt.Errorf("source %s, target %s: %w", source, target, ErrSameRun)
			}
		}
	}
	return &pipeline.Run{Dir: source}, nil
}

// Run replays every source step with pairs, then writes the results.
func (s *Stage) Run(ctx context.Context, env *pipeline.Env) error {
	src, err := sourceRun(s.Source, env.Run.Dir)
	if err != nil {
		return err
	}
	pairShards, err := src.TableShards(schemas.Pairs.Name)
	if err != nil {
		return fmt.Errorf("source: %w", err)
	}
	var rubShards []pipeline.TableShard
	if !s.NewRubrics {
		if rubShards, err = src.TableShards(schemas.Rubrics.Name); err != nil {
			return fmt.Errorf("source (rubrics are reused: set new_rubrics to write new ones): %w", err)
		}
	}
	pairsByStep, rubsByStep := map[int64][]pipeline.TableShard{}, map[int64][]pipeline.TableShard{}
	var steps []int64
	for _, sh := range pairShards {
		if sh.Step < 0 {
			return fmt.Errorf("source %s: pairs shard %s has no step=… partition", s.Source, sh.Rel)
		}
		if !s.Steps.Has(sh.Step) {
			continue
		}
		if _, ok := pairsByStep[sh.Step]; !ok {
			steps = append(steps, sh.Step)
		}
		pairsByStep[sh.Step] = append(pairsByStep[sh.Step], sh)
	}
	for _, sh := range rubShards {
		if sh.Phase == schemas.PhaseRubric || sh.Phase == "" {
			rubsByStep[sh.Step] = append(rubsByStep[sh.Step], sh)
		}
	}
	jf, err := eval.OpenJudge(s.cfg, env.Log)
	if err != nil {
		return err
	}
	defer jf.Backend.Close()
	var gen *eval.Generator
	if s.NewRubrics {
		if gen, err = eval.OpenGenerator(s.cfg, env.Log); err != nil {
			return err
		}
		defer gen.Backend.Close()
	}
	var allPairs []schemas.Pair
	var allJudgments []schemas.Judgment
	for _, step := range steps {
		pairs, js, err := s.replayStep(ctx, env, step, pairsByStep[step], rubsByStep[step], jf, gen)
		if err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
		allPairs, allJudgments = append(allPairs, pairs...), append(allJudgments, js...)
	}
	acc := Discriminate(allPairs, allJudgments)
	if err := WriteTable(env.Stderr, acc); err != nil {
		return err
	}
	if err := CheckCoverage(acc, s.MinCoverage); err != nil {
		return err
	}
	var inputs []string
	for _, sh := range pairShards {
		inputs = append(inputs, sh.Path)
	}
	return env.MapShards(ctx, []pipeline.Task{{
		Output: pipeline.ShardPath(ResultsTable, 0), Schema: ResultsSchema, Inputs: inputs, Rows: int64(len(acc)),
		Write: pipeline.WriteBatch(func() arrow.RecordBatch { return BuildResults(env.Mem, acc) }),
	}})
}

// replayStep judges one step's pairs and commits its pairs, rubrics and
// judgments shards in the target run. A step whose judgments shard is
// already committed is read back instead of judged again.
func (s *Stage) replayStep(ctx context.Context, env *pipeline.Env, step int64, pairShards, rubShards []pipeline.TableShard, jf *eval.JudgeFactory, gen *eval.Generator) ([]schemas.Pair, []schemas.Judgment, error) {
	parts := []pipeline.Partition{pipeline.Phase(schemas.PhaseRubric), pipeline.Step(int(step))}
	judgPath := pipeline.ShardPath(schemas.Judgments.Name, 0, parts...)
	pairs, err := pipeline.ReadRows(ctx, env, schemas.Pairs, pairShards)
	if err != nil {
		return nil, nil, err
	}
	m, err := env.Out.Manifest(env.Stage)
	if err != nil {
		return nil, nil, err
	}
	if _, ok := m.Shard(judgPath); ok {
		js, err := pipeline.ReadRows(ctx, env, schemas.Judgments, []pipeline.TableShard{{Path: env.Out.Path(judgPath)}})
		return pairs, js, err
	}
	byItem := map[string][]schemas.Rubric{}
	var rubs []schemas.Rubric
	if gen == nil {
		all, err := pipeline.ReadRows(ctx, env, schemas.Rubrics, rubShards)
		if err != nil {
			return nil, nil, err
		}
		inPairs := map[string]bool{}
		for _, p := range pairs {
			inPairs[p.PairID] = true
		}
		for _, r := range all {
			if inPairs[r.ItemID] {
				rubs = append(rubs, r)
			}
		}
	} else {
		spec := gen.Spec
		spec.Role, spec.Phase, spec.Step = schemas.RoleRubricGenerator, schemas.PhaseRubric, step
		items := make([]lmstage.Item, len(pairs))
		for k := range pairs {
			p := &pairs[k]
			// The question only, as the co-evolution loop writes rubric-phase
			// rubrics, so a replayed generator is compared like for like.
			msgs, err := gen.Prompts.RubricForQuestion(p.Question)
			if err != nil {
				return nil, nil, fmt.Errorf("pair %s: %w", p.PairID, err)
			}
			items[k] = lmstage.Item{ID: p.PairID, Messages: msgs}
		}
		rolls, err := lmstage.Sample(ctx, gen.Backend, gen.BatchRows, spec, items)
		if err != nil {
			return nil, nil, fmt.Errorf("rubric generator: %w", err)
		}
		var f pipeline.RowFailures
		lmstage.RecordFailures(&f, rolls)
		if err := allFailed(env, &f, "rubric generator", step); err != nil {
			return nil, nil, err
		}
		for i := range rolls {
			rubs = append(rubs, rubrics.FromRolloutAs(&rolls[i], jf.Rules.Format))
		}
	}
	for _, r := range rubs {
		byItem[r.ItemID] = append(byItem[r.ItemID], rules.JudgingRubric(r, s.InvalidRubric))
	}
	var resps []judge.Response
	for _, p := range pairs {
		resps = append(resps, judge.PairResponses(&p)...)
	}
	jd := jf.New(schemas.PhaseRubric, step)
	js, _, err := jd.Judge(ctx, resps, byItem)
	if err != nil {
		return nil, nil, fmt.Errorf("judge: %w", err)
	}
	if err := allFailed(env, jd.Failures(), "judge", step); err != nil {
		return nil, nil, err
	}
	var inputs []string
	for _, sh := range append(append([]pipeline.TableShard{}, pairShards...), rubShards...) {
		inputs = append(inputs, sh.Path)
	}
	// Judgments last: their commit marks the step done.
	tasks := []pipeline.Task{
		tableTask(env, schemas.Pairs, pipeline.ShardPath(schemas.Pairs.Name, 0, parts...), inputs, pairs),
		tableTask(env, schemas.Rubrics, pipeline.ShardPath(schemas.Rubrics.Name, 0, parts...), inputs, rubs),
	}
	if err := env.MapShards(ctx, tasks); err != nil {
		return nil, nil, err
	}
	if err := env.MapShards(ctx, []pipeline.Task{tableTask(env, schemas.Judgments, judgPath, inputs, js)}); err != nil {
		return nil, nil, err
	}
	return pairs, js, nil
}

// allFailed adds a step's model calls to the stage's failure counts, and
// returns an error when every one of them failed on the backend (a model id
// the server does not serve, an unreachable endpoint): nothing of the step
// is written, and the replay stops there.
func allFailed(env *pipeline.Env, f *pipeline.RowFailures, who string, step int64) error {
	rows, failed, first := f.Counts()
	env.Failures.Add(int(rows), int(failed), first)
	if rows > 0 && failed == rows {
		return fmt.Errorf("%s: %w: %d of %d calls of step %d; the first: %s (nothing of the step was written: check the model, the server's --model-id and the endpoints)",
			who, pipeline.ErrAllRowsFailed, failed, rows, step, first)
	}
	return nil
}

func tableTask[T any](env *pipeline.Env, t *schemas.Table[T], rel string, inputs []string, rows []T) pipeline.Task {
	return pipeline.Task{Output: rel, Schema: t.Schema(), Inputs: inputs, Rows: int64(len(rows)),
		Write: func(ctx context.Context, w *pipeline.ShardWriter) error {
			if len(rows) == 0 {
				return nil
			}
			rec := t.Build(env.Mem, rows)
			defer rec.Release()
			return w.Write(rec)
		}}
}
