package eval

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/evolm/evolm/datasets"
	"github.com/evolm/evolm/internal/lmstage"
	"github.com/evolm/evolm/method/prompts"
	"github.com/evolm/evolm/method/rules"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/serving/roles"
	"github.com/evolm/evolm/stages/judge"
	"github.com/evolm/evolm/stages/rubrics"
)

// Name is the stage's registered name.
const Name = "eval"

// Config keys of stages.eval.
const (
	KeyBenchmark     = "benchmark"
	KeyInput         = "input"
	KeyLimit         = "limit"
	KeyBatch         = "batch"
	KeySamples       = "bootstrap_samples"
	KeyBootSeed      = "bootstrap_seed"
	KeySeed          = lmstage.KeySeed
	KeyInvalidRubric = "invalid_rubric"
	KeyMinCoverage   = "min_coverage"
)

func init() {
	pipeline.Register(pipeline.Spec{
		Name:    Name,
		Summary: "evaluate the rubric generator + judge on RewardBench-2, JudgeBench or a pairwise file",
		Description: `For each benchmark prompt the rubric generator writes a rubric and the judge
scores every completion under it; the official rules turn the scores into
accuracy per subset with bootstrap confidence intervals (RewardBench-2:
best-of-4 with ties at the top scored 1/#tied, the weighted Ties score, the
mean of six subsets; JudgeBench: both orders, decided by vote; pairwise:
chosen > rejected). Writes eval_results, eval_items and the rubrics and
judgments made (eval_rubrics, eval_judgments) and prints the table.
The generator and judge are the run's: roles.rubric_generator and roles.judge
(model, backend, sampling, judge mode, prompts); evaluate a checkpoint with
--rubric-generator-model DIR.`,
		Inputs:  []string{"external"},
		Outputs: []string{ResultsTable, ItemsTable, RubricsTable, JudgmentsTable},
		Fields: []pipeline.Field{
			{Key: KeyBenchmark, Type: pipeline.TypeString, Default: BenchRewardBench2, Enum: []string{BenchRewardBench2, BenchJudgeBench, BenchPairwise},
				Description: "layout of the input files"},
			{Key: KeyInput, Type: pipeline.TypeStrings, Default: []string{}, Required: true,
				Description: "benchmark files or directories (Parquet or JSONL, published layout)", Example: []string{"data/reward-bench-2/data"}},
			{Key: KeyLimit, Type: pipeline.TypeInt, Default: 0, Min: pipeline.Bound(0), Description: "evaluate only the first N items (0: all), for smoke runs"},
			{Key: KeyBatch, Type: pipeline.TypeInt, Default: 64, Min: pipeline.Bound(1), Max: pipeline.Bound(1 << 16), Description: "prompts per rubric/judge call"},
			{Key: KeySamples, Type: pipeline.TypeInt, Default: 1000, Min: pipeline.Bound(1), Max: pipeline.Bound(1_000_000), Description: "bootstrap resamples per interval"},
			{Key: KeyBootSeed, Type: pipeline.TypeInt, Default: 0, Description: "bootstrap seed"},
			{Key: KeySeed, Type: pipeline.TypeInt, Default: 0, Description: "base seed of rubric and judge sampling; each row's seed derives from it and the row's key"},
			{Key: KeyInvalidRubric, Type: pipeline.TypeString, Default: rules.InvalidRawText, Enum: rules.InvalidPolicies,
				Description: "judging under a rubric that fails R_format: raw_text (its text as one criterion, as the loop does) or skip"},
			{Key: KeyMinCoverage, Type: pipeline.TypeFloat, Default: 0.5, Min: pipeline.Bound(0), Max: pipeline.Bound(1),
				Description: "fail when fewer than this share of the items have every score (a missing score counts as a loss); 0 accepts any coverage"},
		},
		Uses:  append(roles.Uses(roles.RubricGenerator, roles.Judge), rubrics.Section),
		Moved: map[string]string{"generator_model": roles.Section(roles.RubricGenerator) + "." + roles.KeyModel, "judge_model": roles.Section(roles.Judge) + "." + roles.KeyModel},
		New:   func(cfg *pipeline.Config) (pipeline.Stage, error) { return newEvalFromConfig(cfg) },
	})
}

// Stage is the eval stage.
type Stage struct {
	Benchmark     string
	Input         []string
	Limit, Batch  int
	Bootstrap     Bootstrap
	InvalidRubric string
	MinCoverage   float64
	cfg           *pipeline.Config // the stage's view: its roles
}

func newEvalFromConfig(cfg *pipeline.Config) (*Stage, error) {
	s := &Stage{
		Benchmark: cfg.String(KeyBenchmark), Input: cfg.Strings(KeyInput), Limit: cfg.Int(KeyLimit), Batch: cfg.Int(KeyBatch),
		Bootstrap:     Bootstrap{Samples: cfg.Int(KeySamples), Seed: uint64(cfg.Int(KeyBootSeed))},
		InvalidRubric: cfg.String(KeyInvalidRubric), MinCoverage: cfg.Float(KeyMinCoverage), cfg: cfg,
	}
	switch {
	case s.Limit < 0:
		return nil, cfg.Errorf(KeyLimit, "%d, want >= 0", s.Limit)
	case s.Batch <= 0:
		return nil, cfg.Errorf(KeyBatch, "%d, want > 0", s.Batch)
	case s.Bootstrap.Samples <= 0:
		return nil, cfg.Errorf(KeySamples, "%d, want > 0", s.Bootstrap.Samples)
	case cfg.Int(KeyBootSeed) < 0:
		return nil, cfg.Errorf(KeyBootSeed, "%d, want >= 0", cfg.Int(KeyBootSeed))
	case len(s.Input) == 0:
		return nil, cfg.Unsetf(KeyInput, "no benchmark files given")
	}
	return s, nil
}

// Generator is an opened rubric generator.
type Generator struct {
	Backend   *roles.Backend
	Spec      lmstage.SampleSpec // the role's sampling; N 1, seed from the stage
	Prompts   *prompts.Set
	BatchRows int
}

// OpenGenerator opens the rubric generator of roles.rubric_generator (cfg is
// a stage's view that uses it); its rows record the base seed and n of the
// stage's seed and n keys, when it has them. The caller closes g.Backend.
func OpenGenerator(cfg *pipeline.Config, log *slog.Logger) (*Generator, error) {
	rc, set, b, err := openRole(cfg, roles.RubricGenerator, log)
	if err != nil {
		return nil, err
	}
	return &Generator{Backend: b, Spec: lmstage.ReadSampleSpec(cfg, rc), Prompts: set, BatchRows: rc.BatchRows}, nil
}

// JudgeFactory is an opened judge backend; New makes a judge that records
// the given phase and step in its judgments.
type JudgeFactory struct {
	Backend *roles.Backend
	Mode    string
	// Rules are the rubric section's (rubric.format, rubric.judge_reply).
	Rules     rubrics.Rules
	Spec      lmstage.SampleSpec
	Prompts   *prompts.Set
	BatchRows int
}

// New returns a judge writing judgments of phase and step.
func (f *JudgeFactory) New(phase string, step int64) *judge.Judge {
	spec := f.Spec
	spec.Phase, spec.Step = phase, step
	return judge.New(f.Backend, judge.Options{Mode: f.Mode, Prompts: f.Prompts, Spec: spec, BatchRows: f.BatchRows, Reply: f.Rules.JudgeReply})
}

// OpenJudge opens the judge of roles.judge (cfg is a stage's view that uses
// it). The caller closes f.Backend.
func OpenJudge(cfg *pipeline.Config, log *slog.Logger) (*JudgeFactory, error) {
	rr, err := rubrics.ReadRules(cfg)
	if err != nil {
		return nil, err
	}
	rc, set, b, err := openRole(cfg, roles.Judge, log)
	if err != nil {
		return nil, err
	}
	spec := lmstage.ReadSampleSpec(cfg, rc)
	spec.N = 1
	return &JudgeFactory{Backend: b, Mode: rc.Mode, Rules: rr, Spec: spec, Prompts: set, BatchRows: rc.BatchRows}, nil
}

// openRole reads role's config from cfg and its prompt set, and opens its
// backend (the caller closes it).
func openRole(cfg *pipeline.Config, role string, log *slog.Logger) (roles.Config, *prompts.Set, *roles.Backend, error) {
	rc, err := roles.Read(cfg, role)
	if err != nil {
		return rc, nil, nil, err
	}
	set, err := roles.Prompts(rc)
	if err != nil {
		return rc, nil, nil, err
	}
	b, err := roles.Open(rc, log)
	return rc, set, b, err
}

// OpenRubricJudge opens the rubric generator and the judge of cfg's roles
// (see OpenGenerator, OpenJudge). The caller calls the returned close.
func OpenRubricJudge(cfg *pipeline.Config, log *slog.Logger) (*RubricJudge, func(), error) {
	g, err := OpenGenerator(cfg, log)
	if err != nil {
		return nil, nil, err
	}
	jf, err := OpenJudge(cfg, log)
	if err != nil {
		g.Backend.Close()
		return nil, nil, err
	}
	rj := &RubricJudge{Generator: g.Backend, GenSpec: g.Spec, Prompts: g.Prompts,
		Judge: jf.New(g.Spec.Phase, g.Spec.Step), BatchRows: g.BatchRows, Format: jf.Rules.Format}
	return rj, func() { g.Backend.Close(); jf.Backend.Close() }, nil
}

// Run loads the benchmark, scores it with the rubric generator and judge,
// writes eval_results and eval_items, and prints the table to stderr.
func (s *Stage) Run(ctx context.Context, env *pipeline.Env) error {
	files, err := datasets.ResolveInputs(s.Input)
	if err != nil {
		return err
	}
	// Load (and so check the layout) before opening any model.
	var rb2 []datasets.RewardBench2Item
	var jb []datasets.JudgeBenchItem
	var pw []datasets.PairwiseItem
	switch s.Benchmark {
	case BenchRewardBench2:
		rb2, err = datasets.LoadRewardBench2(env.Mem, files)
		rb2 = limit(rb2, s.Limit)
	case BenchJudgeBench:
		jb, err = datasets.LoadJudgeBench(env.Mem, files)
		jb = limit(jb, s.Limit)
	case BenchPairwise:
		pw, err = datasets.LoadPairwise(env.Mem, files)
		pw = limit(pw, s.Limit)
	}
	if err != nil {
		return err
	}
	scorer, closeFn, err := OpenRubricJudge(s.cfg, env.Log)
	if err != nil {
		return err
	}
	defer closeFn()
	scorer.InvalidRubric = s.InvalidRubric
	var rep Report
	switch s.Benchmark {
	case BenchRewardBench2:
		rep, err = EvalRewardBench2(ctx, scorer, rb2, s.Batch, s.Bootstrap)
	case BenchJudgeBench:
		rep, err = EvalJudgeBench(ctx, scorer, jb, s.Batch, s.Bootstrap)
	case BenchPairwise:
		rep, err = EvalPairwise(ctx, scorer, pw, s.Batch, s.Bootstrap)
	}
	if err != nil {
		return err
	}
	// A judge that failed on every call (a model id the server does not
	// serve, an unreachable endpoint) scores nothing: the table would show
	// ties. That is an error, as in the judge stage (pipeline.RowFailures).
	// So is a generator that failed on every call: no rubric, nothing to
	// judge under.
	grows, gfailed, gfirst := scorer.GenFailures.Counts()
	env.Failures.Add(int(grows), int(gfailed), gfirst)
	if grows > 0 && gfailed == grows {
		return fmt.Errorf("rubric generator: %w: %d of %d calls; the first: %s (nothing was scored: check the generator's model, the server's --model-id and the endpoints)",
			pipeline.ErrAllRowsFailed, gfailed, grows, gfirst)
	}
	rows, failed, first := scorer.Judge.Failures().Counts()
	env.Failures.Add(int(rows), int(failed), first)
	if rows > 0 && failed == rows {
		return fmt.Errorf("judge: %w: %d of %d rows; the first: %s (nothing was scored: check the judge's model, the server's --model-id and the endpoints)",
			pipeline.ErrAllRowsFailed, failed, rows, first)
	}
	if err := WriteTable(env.Stderr, rep); err != nil {
		return err
	}
	if err := CheckCoverage(rep, s.MinCoverage); err != nil {
		return err
	}
	if err := WriteReports(ctx, env, files, rep); err != nil {
		return err
	}
	return writeModelRows(ctx, env, files, rep.Benchmark, scorer)
}

// writeModelRows writes the rubrics and judgments the scorer made, with the
// run tables' schemas, as eval_rubrics/part-<b> and eval_judgments/part-<b>:
// apart from the training tables, so that analyses of a run are not mixed
// with its evaluation.
func writeModelRows(ctx context.Context, env *pipeline.Env, inputs []string, bench string, rj *RubricJudge) error {
	i := benchIndex[bench]
	return env.MapShards(ctx, []pipeline.Task{
		{Output: pipeline.ShardPath(RubricsTable, i), Schema: schemas.Rubrics.Schema(), Inputs: inputs, Rows: int64(len(rj.Rubrics)),
			Write: pipeline.WriteBatch(func() arrow.RecordBatch { return schemas.Rubrics.Build(env.Mem, rj.Rubrics) })},
		{Output: pipeline.ShardPath(JudgmentsTable, i), Schema: schemas.Judgments.Schema(), Inputs: inputs, Rows: int64(len(rj.Judgments)),
			Write: pipeline.WriteBatch(func() arrow.RecordBatch { return schemas.Judgments.Build(env.Mem, rj.Judgments) })},
	})
}

func limit[T any](xs []T, n int) []T {
	if n > 0 && n < len(xs) {
		return xs[:n]
	}
	return xs
}
