package analyze

import (
	"context"
	"fmt"

	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/stages/export"
)

// Name is the stage's registered name.
const Name = "analyze-rubrics"

// Config keys of stages.analyze-rubrics.
const (
	KeyPhase = "phase"
	KeyPrint = "print"
)

func init() {
	pipeline.Register(pipeline.Spec{
		Name:    Name,
		Summary: "rubric-evolution statistics per step: abstract, concrete and constraint criteria, length, weights",
		Description: `Reads the run's rubrics table (every committed shard) and writes rubric_stats:
one row per (phase, step) with the share of criteria that are abstract labels,
that carry a concrete expected value and that are constraints, criteria per
rubric, mean criterion length, weight concentration (share of rubrics with one
criterion weighted >= 0.5) and the R_format rate. The table is also printed to
stderr. Classification rules: see the package doc of stages/analyze.`,
		Inputs:  []string{schemas.Rubrics.Name},
		Outputs: []string{StatsTable},
		Fields: []pipeline.Field{
			{Key: KeyPhase, Type: pipeline.TypeString, Default: "", Enum: []string{"", schemas.PhasePolicy, schemas.PhaseRubric},
				Description: "only rubrics of this phase; empty: both"},
			{Key: KeyPrint, Type: pipeline.TypeBool, Default: true, Description: "print the table to stderr"},
		},
		New: func(cfg *pipeline.Config) (pipeline.Stage, error) { return newAnalyzeFromConfig(cfg) },
	})
}

// Stage is the analyze-rubrics stage.
type Stage struct {
	Phase string // "" for both
	Print bool
}

func newAnalyzeFromConfig(cfg *pipeline.Config) (*Stage, error) {
	return &Stage{Phase: cfg.String(KeyPhase), Print: cfg.Bool(KeyPrint)}, nil
}

// Analyze streams the rubrics shards of run and returns the statistics per
// (phase, step), of one phase when phase is not "".
func Analyze(ctx context.Context, env *pipeline.Env, shards []export.Shard, phase string) ([]StepStats, error) {
	var acc Accumulator
	var rows []schemas.Rubric
	for _, sh := range shards {
		if phase != "" && sh.Phase != "" && sh.Phase != phase {
			continue
		}
		for rec, err := range pipeline.ReadShard(ctx, sh.Path, env.ReadOptions(schemas.Rubrics.Schema())) {
			if err != nil {
				return nil, err
			}
			rows = rows[:0]
			rows = append(rows, make([]schemas.Rubric, rec.NumRows())...)
			if err := schemas.Rubrics.ReadInto(rec, rows); err != nil {
				return nil, fmt.Errorf("shard %s: %w", sh.Path, err)
			}
			for i := range rows {
				if phase == "" || rows[i].Phase == phase {
					acc.Add(&rows[i])
				}
			}
		}
	}
	return acc.Stats(), nil
}

// Run computes the statistics and writes them as one shard.
func (s *Stage) Run(ctx context.Context, env *pipeline.Env) error {
	shards, err := export.TableShards(env.Run, schemas.Rubrics.Name)
	if err != nil {
		return err
	}
	inputs := make([]string, len(shards))
	for i, sh := range shards {
		inputs[i] = sh.Path
	}
	stats, err := Analyze(ctx, env, shards, s.Phase)
	if err != nil {
		return err
	}
	if s.Print {
		if err := WriteTable(env.Stderr, stats); err != nil {
			return err
		}
	}
	return env.MapShards(ctx, []pipeline.Task{{
		Output: pipeline.ShardPath(StatsTable, 0),
		Schema: StatsSchema,
		Inputs: inputs,
		Rows:   int64(len(stats)),
		Write: func(ctx context.Context, w *pipeline.ShardWriter) error {
			rec := BuildStats(env.Mem, stats)
			defer rec.Release()
			return w.Write(rec)
		},
	}})
}
