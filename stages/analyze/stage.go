package analyze

import (
	"context"
	"fmt"
	"github.com/apache/arrow-go/v18/arrow"

	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
)

// Name is the stage's registered name.
const Name = "analyze-rubrics"

// Config keys of stages.analyze-rubrics.
const (
	KeyPhase       = "phase"
	KeyPrint       = "print"
	KeyDefinitions = "definitions"
)

// Definitions of the rubric statistics (key definitions).
const (
	// DefOfficial are the official script's definitions (label-only,
	// specific, constraint; OfficialRubricStats).
	DefOfficial = "official"
	// DefEvolm is evolm's classifier (abstract, concrete, constraint; Classify).
	DefEvolm = "evolm"
)

func init() {
	pipeline.Register(pipeline.Spec{
		Name:    Name,
		Summary: "rubric-evolution statistics per step: label-only, specific and constraint criteria (official definitions or evolm's)",
		Description: `Reads the run's rubrics table (every committed shard) and writes, one row per
(phase, step), both definitions of the rubric-evolution statistics:
rubric_stats_official, the official EVOLM script's (rubric_aggregate_stats.py:
label-only <= 40 characters, specific and constraint patterns, criteria per
rubric, averaged per rubric, then per prompt, then over prompts, from the raw
generator output), and rubric_stats, evolm's richer classifier (abstract
labels, concrete expected values, constraints, criteria per rubric, mean
criterion length, weight concentration, R_format rate). The definitions key
chooses the table printed to stderr. Rules: see the package doc of
stages/analyze.`,
		Inputs:  []string{schemas.Rubrics.Name},
		Outputs: []string{OfficialStatsTable, StatsTable},
		Fields: []pipeline.Field{
			{Key: KeyPhase, Type: pipeline.TypeString, Default: "", Enum: []string{"", schemas.PhasePolicy, schemas.PhaseRubric},
				Description: "only rubrics of this phase; empty: both"},
			{Key: KeyPrint, Type: pipeline.TypeBool, Default: true, Description: "print the table to stderr"},
			{Key: KeyDefinitions, Type: pipeline.TypeString, Default: DefOfficial, Enum: []string{DefOfficial, DefEvolm},
				Description: "statistics printed: official (the EVOLM script's, table rubric_stats_official) or evolm (the richer classifier, table rubric_stats); both tables are written"},
		},
		// Derived from the run: a rerun with other settings replaces the
		// tables once the new ones are complete.
		Replace: true,
		New:     func(cfg *pipeline.Config) (pipeline.Stage, error) { return newAnalyzeFromConfig(cfg) },
	})
}

// Stage is the analyze-rubrics stage.
type Stage struct {
	Phase       string // "" for both
	Print       bool
	Definitions string // DefOfficial or DefEvolm: the table printed
}

func newAnalyzeFromConfig(cfg *pipeline.Config) (*Stage, error) {
	return &Stage{Phase: cfg.String(KeyPhase), Print: cfg.Bool(KeyPrint), Definitions: cfg.String(KeyDefinitions)}, nil
}

// Analyze streams the rubrics shards of run and returns the statistics per
// (phase, step), of one phase when phase is not "", by both definitions.
func Analyze(ctx context.Context, env *pipeline.Env, shards []pipeline.TableShard, phase string) ([]StepStats, []OfficialStepStats, error) {
	var acc Accumulator
	var off OfficialAccumulator
	var rows []schemas.Rubric
	for _, sh := range shards {
		if phase != "" && sh.Phase != "" && sh.Phase != phase {
			continue
		}
		for rec, err := range pipeline.ReadShard(ctx, sh.Path, env.ReadOptions(schemas.Rubrics.Schema())) {
			if err != nil {
				return nil, nil, err
			}
			rows = rows[:0]
			rows = append(rows, make([]schemas.Rubric, rec.NumRows())...)
			if err := schemas.Rubrics.ReadInto(rec, rows); err != nil {
				return nil, nil, fmt.Errorf("shard %s: %w", sh.Path, err)
			}
			for i := range rows {
				if phase == "" || rows[i].Phase == phase {
					acc.Add(&rows[i])
					off.Add(&rows[i])
				}
			}
		}
	}
	return acc.Stats(), off.Stats(), nil
}

// Run computes the statistics and writes one shard of each table.
func (s *Stage) Run(ctx context.Context, env *pipeline.Env) error {
	shards, err := env.Run.TableShards(schemas.Rubrics.Name)
	if err != nil {
		return err
	}
	inputs := make([]string, len(shards))
	for i, sh := range shards {
		inputs[i] = sh.Path
	}
	stats, official, err := Analyze(ctx, env, shards, s.Phase)
	if err != nil {
		return err
	}
	if s.Print {
		if s.Definitions == DefEvolm {
			err = WriteTable(env.Stderr, stats)
		} else {
			err = WriteOfficialTable(env.Stderr, official)
		}
		if err != nil {
			return err
		}
	}
	return env.MapShards(ctx, []pipeline.Task{{
		Output: pipeline.ShardPath(OfficialStatsTable, 0),
		Schema: OfficialStatsSchema,
		Inputs: inputs,
		Rows:   int64(len(official)),
		Write:  pipeline.WriteBatch(func() arrow.RecordBatch { return BuildOfficialStats(env.Mem, official) }),
	}, {
		Output: pipeline.ShardPath(StatsTable, 0),
		Schema: StatsSchema,
		Inputs: inputs,
		Rows:   int64(len(stats)),
		Write:  pipeline.WriteBatch(func() arrow.RecordBatch { return BuildStats(env.Mem, stats) }),
	}})
}
