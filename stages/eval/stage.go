package eval

import (
	"context"
	"fmt"

	"github.com/evolm/evolm/datasets"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/stages/internal/lmstage"
	"github.com/evolm/evolm/stages/judge"
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
chosen > rejected). Writes eval_results and eval_items and prints the table.
The generator and judge are configured as for the run: the stages.rubrics.*
and stages.judge.* sections (backend, sampling, judge mode, prompts), with
generator_model and judge_model overriding their model.`,
		Inputs:  []string{"external"},
		Outputs: []string{ResultsTable, ItemsTable},
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
}

func newEvalFromConfig(cfg *pipeline.Config) (*Stage, error) {
	s := &Stage{
		Benchmark: cfg.String(KeyBenchmark), Input: cfg.Strings(KeyInput), Limit: cfg.Int(KeyLimit), Batch: cfg.Int(KeyBatch),
		Bootstrap:      Bootstrap{Samples: cfg.Int(KeySamples), Seed: uint64(cfg.Int(KeyBootSeed))},
		GeneratorModel: cfg.String(KeyGeneratorModel), JudgeModel: cfg.String(KeyJudgeModel),
	}
	switch {
	case len(s.Input) == 0:
		return nil, cfg.Errorf(KeyInput, "no benchmark files given")
	case s.Limit < 0:
		return nil, cfg.Errorf(KeyLimit, "%d, want >= 0", s.Limit)
	case s.Batch <= 0:
		return nil, cfg.Errorf(KeyBatch, "%d, want > 0", s.Batch)
	case s.Bootstrap.Samples <= 0:
		return nil, cfg.Errorf(KeySamples, "%d, want > 0", s.Bootstrap.Samples)
	case cfg.Int(KeyBootSeed) < 0:
		return nil, cfg.Errorf(KeyBootSeed, "%d, want >= 0", cfg.Int(KeyBootSeed))
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

// OpenRubricJudge opens the rubric generator and judge configured in global
// (sections stages.rubrics and stages.judge, models overridden when given).
// The caller closes the returned func.
func OpenRubricJudge(global *pipeline.Config, genModel, judgeModel string, env *pipeline.Env) (*RubricJudge, func(), error) {
	gcfg, err := stageSection(global, rubrics.Name, genModel)
	if err != nil {
		return nil, nil, err
	}
	jcfg, err := stageSection(global, judge.Name, judgeModel)
	if err != nil {
		return nil, nil, err
	}
	gbc, err := lmstage.ReadBackend(gcfg)
	if err != nil {
		return nil, nil, fmt.Errorf("rubric generator: %w", err)
	}
	jbc, err := lmstage.ReadBackend(jcfg)
	if err != nil {
		return nil, nil, fmt.Errorf("judge: %w", err)
	}
	gspec, err := lmstage.ReadSampleSpec(gcfg, schemas.RoleRubricGenerator)
	if err != nil {
		return nil, nil, fmt.Errorf("rubric generator: %w", err)
	}
	jspec, err := lmstage.ReadSampleSpec(jcfg, schemas.RoleJudge)
	if err != nil {
		return nil, nil, fmt.Errorf("judge: %w", err)
	}
	gset, err := lmstage.Prompts(gcfg)
	if err != nil {
		return nil, nil, err
	}
	jset, err := lmstage.Prompts(jcfg)
	if err != nil {
		return nil, nil, err
	}
	gen, err := lmstage.Open(gbc, env.Log)
	if err != nil {
		return nil, nil, fmt.Errorf("rubric generator: %w", err)
	}
	jb, err := lmstage.Open(jbc, env.Log)
	if err != nil {
		gen.Close()
		return nil, nil, fmt.Errorf("judge: %w", err)
	}
	j := judge.New(jb, judge.Options{Mode: jcfg.String(judge.KeyMode), Prompts: jset, Spec: jspec, BatchRows: jbc.BatchRows})
	rj := &RubricJudge{Generator: gen, GenSpec: gspec, Prompts: gset, Judge: j, BatchRows: gbc.BatchRows}
	return rj, func() { gen.Close(); jb.Close() }, nil
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
	scorer, closeFn, err := OpenRubricJudge(env.Global, s.GeneratorModel, s.JudgeModel, env)
	if err != nil {
		return err
	}
	defer closeFn()
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
	return WriteReports(ctx, env, files, rep)
}

func limit[T any](xs []T, n int) []T {
	if n > 0 && n < len(xs) {
		return xs[:n]
	}
	return xs
}
