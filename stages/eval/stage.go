package eval

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/evolm/evolm/datasets"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/stages/internal/lmstage"
	"github.com/evolm/evolm/stages/judge"
	"github.com/evolm/evolm/stages/prompts"
	"github.com/evolm/evolm/stages/rubrics"
)

// Name is the stage's registered name.
const Name = "eval"

// Config keys of stages.eval.
const (
	KeyBenchmark      = "benchmark"
	KeyInput          = "input"
	KeyLimit          = "limit"
	KeyBatch          = "batch"
	KeySamples        = "bootstrap_samples"
	KeyBootSeed       = "bootstrap_seed"
	KeyGeneratorModel = "generator_model"
	KeyJudgeModel     = "judge_model"
	KeyInvalidRubric  = "invalid_rubric"
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
The generator and judge are configured as for the run: the stages.rubrics.*
and stages.judge.* sections (backend, sampling, judge mode, prompts), with
generator_model and judge_model overriding their model.`,
		Inputs:  []string{"external"},
		Outputs: []string{ResultsTable, ItemsTable, RubricsTable, JudgmentsTable},
		Fields: []pipeline.Field{
			{Key: KeyBenchmark, Type: pipeline.TypeString, Default: BenchRewardBench2, Enum: []string{BenchRewardBench2, BenchJudgeBench, BenchPairwise},
				Description: "layout of the input files"},
			{Key: KeyInput, Type: pipeline.TypeStrings, Default: []string{}, Required: true,
				Description: "benchmark files or directories (Parquet or JSONL, published layout)", Example: []string{"data/reward-bench-2/data"}},
			{Key: KeyLimit, Type: pipeline.TypeInt, Default: 0, Description: "evaluate only the first N items (0: all), for smoke runs"},
			{Key: KeyBatch, Type: pipeline.TypeInt, Default: 64, Description: "prompts per rubric/judge call"},
			{Key: KeySamples, Type: pipeline.TypeInt, Default: 1000, Description: "bootstrap resamples per interval"},
			{Key: KeyBootSeed, Type: pipeline.TypeInt, Default: 0, Description: "bootstrap seed"},
			{Key: KeyGeneratorModel, Type: pipeline.TypeString, Default: "", Description: "rubric generator model; empty: stages.rubrics.model"},
			{Key: KeyJudgeModel, Type: pipeline.TypeString, Default: "", Description: "judge model; empty: stages.judge.model"},
			{Key: KeyInvalidRubric, Type: pipeline.TypeString, Default: InvalidRawText, Enum: []string{InvalidRawText, InvalidSkip},
				Description: "judging under a rubric that fails R_format: raw_text (its text as one criterion, as the loop does) or skip"},
		},
		New: func(cfg *pipeline.Config) (pipeline.Stage, error) { return newEvalFromConfig(cfg) },
	})
}

// Stage is the eval stage.
type Stage struct {
	Benchmark      string
	Input          []string
	Limit, Batch   int
	Bootstrap      Bootstrap
	GeneratorModel string
	JudgeModel     string
	InvalidRubric  string
}

func newEvalFromConfig(cfg *pipeline.Config) (*Stage, error) {
	s := &Stage{
		Benchmark: cfg.String(KeyBenchmark), Input: cfg.Strings(KeyInput), Limit: cfg.Int(KeyLimit), Batch: cfg.Int(KeyBatch),
		Bootstrap:      Bootstrap{Samples: cfg.Int(KeySamples), Seed: uint64(cfg.Int(KeyBootSeed))},
		GeneratorModel: cfg.String(KeyGeneratorModel), JudgeModel: cfg.String(KeyJudgeModel),
		InvalidRubric: cfg.String(KeyInvalidRubric),
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

// stageSection returns the config section of a registered stage as merged in
// global, with its model replaced when model is not empty.
func stageSection(global *pipeline.Config, stage, model string) (*pipeline.Config, error) {
	vals := global.Section("stages." + stage).Map()
	if model != "" {
		vals[lmstage.KeyModel] = model
	}
	return pipeline.StageConfig(stage, vals)
}

// Generator is an opened rubric generator.
type Generator struct {
	Backend   *lmstage.Backend
	Spec      lmstage.SampleSpec // sampling from stages.rubrics (n, temperature …)
	Prompts   *prompts.Set
	BatchRows int
}

// OpenGenerator opens the rubric generator configured in global's
// stages.rubrics section, with its model replaced by model when not empty.
// The caller closes g.Backend.
func OpenGenerator(global *pipeline.Config, model string, log *slog.Logger) (*Generator, error) {
	cfg, err := stageSection(global, rubrics.Name, model)
	if err != nil {
		return nil, err
	}
	bc, err := lmstage.ReadBackend(cfg)
	if err != nil {
		return nil, fmt.Errorf("rubric generator: %w", err)
	}
	spec, err := lmstage.ReadSampleSpec(cfg, schemas.RoleRubricGenerator)
	if err != nil {
		return nil, fmt.Errorf("rubric generator: %w", err)
	}
	set, err := lmstage.Prompts(cfg)
	if err != nil {
		return nil, err
	}
	b, err := lmstage.Open(bc, log)
	if err != nil {
		return nil, fmt.Errorf("rubric generator: %w", err)
	}
	return &Generator{Backend: b, Spec: spec, Prompts: set, BatchRows: bc.BatchRows}, nil
}

// JudgeFactory is an opened judge backend; New makes a judge that records
// the given phase and step in its judgments.
type JudgeFactory struct {
	Backend   *lmstage.Backend
	Mode      string
	Spec      lmstage.SampleSpec
	Prompts   *prompts.Set
	BatchRows int
}

// New returns a judge writing judgments of phase and step.
func (f *JudgeFactory) New(phase string, step int64) *judge.Judge {
	spec := f.Spec
	spec.Phase, spec.Step = phase, step
	return judge.New(f.Backend, judge.Options{Mode: f.Mode, Prompts: f.Prompts, Spec: spec, BatchRows: f.BatchRows})
}

// OpenJudge opens the judge configured in global's stages.judge section, with
// its model replaced by model when not empty. The caller closes f.Backend.
func OpenJudge(global *pipeline.Config, model string, log *slog.Logger) (*JudgeFactory, error) {
	cfg, err := stageSection(global, judge.Name, model)
	if err != nil {
		return nil, err
	}
	bc, err := lmstage.ReadBackend(cfg)
	if err != nil {
		return nil, fmt.Errorf("judge: %w", err)
	}
	spec, err := lmstage.ReadSampleSpec(cfg, schemas.RoleJudge)
	if err != nil {
		return nil, fmt.Errorf("judge: %w", err)
	}
	set, err := lmstage.Prompts(cfg)
	if err != nil {
		return nil, err
	}
	b, err := lmstage.Open(bc, log)
	if err != nil {
		return nil, fmt.Errorf("judge: %w", err)
	}
	return &JudgeFactory{Backend: b, Mode: cfg.String(judge.KeyMode), Spec: spec, Prompts: set, BatchRows: bc.BatchRows}, nil
}

// OpenRubricJudge opens the rubric generator and the judge as configured in
// global (see OpenGenerator, OpenJudge). The caller calls the returned close.
func OpenRubricJudge(global *pipeline.Config, genModel, judgeModel string, log *slog.Logger) (*RubricJudge, func(), error) {
	g, err := OpenGenerator(global, genModel, log)
	if err != nil {
		return nil, nil, err
	}
	jf, err := OpenJudge(global, judgeModel, log)
	if err != nil {
		g.Backend.Close()
		return nil, nil, err
	}
	rj := &RubricJudge{Generator: g.Backend, GenSpec: g.Spec, Prompts: g.Prompts,
		Judge: jf.New(g.Spec.Phase, g.Spec.Step), BatchRows: g.BatchRows}
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
	scorer, closeFn, err := OpenRubricJudge(env.Global, s.GeneratorModel, s.JudgeModel, env.Log)
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
	if err := WriteTable(env.Stderr, rep); err != nil {
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
			Write: func(ctx context.Context, w *pipeline.ShardWriter) error {
				rec := schemas.Rubrics.Build(env.Mem, rj.Rubrics)
				defer rec.Release()
				return w.Write(rec)
			}},
		{Output: pipeline.ShardPath(JudgmentsTable, i), Schema: schemas.Judgments.Schema(), Inputs: inputs, Rows: int64(len(rj.Judgments)),
			Write: func(ctx context.Context, w *pipeline.ShardWriter) error {
				rec := schemas.Judgments.Build(env.Mem, rj.Judgments)
				defer rec.Release()
				return w.Write(rec)
			}},
	})
}

func limit[T any](xs []T, n int) []T {
	if n > 0 && n < len(xs) {
		return xs[:n]
	}
	return xs
}
