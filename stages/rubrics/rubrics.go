// Package rubrics is the rubric sampling stage, `evolm rubrics`: the rubric
// generator writes n candidate rubrics per item, and each is parsed and
// checked against the rubric format (R_format, README.md, "The method").
//
// Contract:
//
//   - Input: prompts shards (source=prompts, the policy phase: one rubric per
//     question, shared by its group) or pairs shards (source=pairs, the
//     rubric phase: n candidates per pair, written from the pair's question
//     alone — the generator never sees a+ or a−, as in `evolm run` and
//     `evolm replay`). Empty `input` reads what the dedup (prompts) or pairs stage
//     committed in the run.
//   - Two outputs per input shard, made in two resumable passes: the
//     generator's samples go to the rollouts table
//     (rollouts/phase=…/step=…/role=rubric_generator/part-NNNNN, the rows
//     GRPO trains the rubric generator on), then each sample becomes one
//     rubrics row (rubrics/phase=…/step=…/part-NNNNN): n rows per item,
//     sample_idx 0..n−1, rubric_id = rollout_id.
//   - Parsing is schemas.ValidateRubricAs on the raw text (<think> stripped
//     there) under rubric.format, the R_format reading every stage shares
//     (Section): criteria are kept whenever they parse, format_ok is R_format
//     and parse_error says which rule failed. A generation that failed on
//     the backend is a rubrics row with format_ok false and the backend's
//     reason as parse_error.
//   - Seeds follow package rollout (role rubric_generator).
//   - Output metadata records the backend, the model and the rubric
//     prompt's version.
package rubrics

import (
	"context"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/evolm/evolm/internal/lmstage"
	"github.com/evolm/evolm/method/prompts"
	"github.com/evolm/evolm/method/rules"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/serving/roles"
)

// Name is the stage's name.
const Name = "rubrics"

// Config keys.
const (
	KeyInput  = "input"
	KeySource = "source"
)

// Sources.
const (
	SourcePrompts = "prompts"
	SourcePairs   = "pairs"
)

func init() {
	fields := []pipeline.Field{
		{Key: KeySource, Type: pipeline.TypeString, Default: SourcePrompts, Enum: []string{SourcePrompts, SourcePairs},
			Description: "what rubrics are written for: questions (policy phase) or preference pairs (rubric phase)"},
		{Key: KeyInput, Type: pipeline.TypeStrings, Default: []string{},
			Description: "prompts or pairs Parquet files or globs; empty: what the dedup or pairs stage committed in the run"},
	}
	fields = append(fields, lmstage.RunFields()...)
	fields = append(fields, lmstage.SamplingFields(1)...)
	pipeline.Register(pipeline.Spec{
		Name:    Name,
		Summary: "sample n rubrics per question or pair and check their format",
		Description: `Samples n rubrics per item with the rubric generator (the paper: temperature
0.6; one rubric per question in the policy phase, n = 8 candidates per pair in
the rubric phase), writes the generations to the rollouts table
(role=rubric_generator) and one rubrics row per generation with the parsed
criteria, format_ok (R_format) and the parse error. The rubric generator is
configured once in roles.rubric_generator (empty model: the policy's).`,
		Inputs:  []string{schemas.Prompts.Name, schemas.Pairs.Name},
		Outputs: []string{schemas.Rollouts.Name, schemas.Rubrics.Name},
		Fields:  fields,
		Uses:    append(roles.Uses(roles.RubricGenerator), Section),
		Moved:   moved(),
		New:     func(cfg *pipeline.Config) (pipeline.Stage, error) { return newFromConfig(cfg) },
	})
}

// Stage is the rubrics stage.
type Stage struct {
	source  string
	input   []string
	spec    lmstage.SampleSpec
	gen     roles.Config
	prompts *prompts.Set
	format  schemas.RubricFormat
}

// moved are the keys the stage no longer has: the rubric generator's role
// keys, and format, now the shared rubric.format.
func moved() map[string]string {
	m := roles.MovedStageKeys(roles.RubricGenerator)
	for k, v := range MovedFormat("format") {
		m[k] = v
	}
	return m
}

func newFromConfig(cfg *pipeline.Config) (*Stage, error) {
	c, err := lmstage.ReadCommon(cfg, schemas.RoleRubricGenerator)
	if err != nil {
		return nil, err
	}
	r, err := ReadRules(cfg)
	if err != nil {
		return nil, err
	}
	return &Stage{source: cfg.String(KeySource), input: cfg.Strings(KeyInput), spec: c.Spec, gen: c.Role, prompts: c.Prompts, format: r.Format}, nil
}

func (s *Stage) role() prompts.Name { return prompts.RubricQuestion }

// Run implements pipeline.Stage.
func (s *Stage) Run(ctx context.Context, env *pipeline.Env) error {
	var files []string
	var err error
	if s.source == SourcePairs {
		files, err = lmstage.Inputs(env, s.input, "pairs", schemas.Pairs.Name)
	} else {
		files, err = lmstage.Inputs(env, s.input, "dedup", schemas.Prompts.Name)
	}
	if err != nil {
		return err
	}
	rc := s.gen
	rc.Callers = min(env.Parallelism, len(files)) // MapShards' workers, one shard each
	b, err := roles.Open(rc, env.Log)
	if err != nil {
		return err
	}
	defer b.Close()
	meta := lmstage.Provenance(b, s.prompts, s.role())

	inSchema := schemas.Prompts.Schema()
	if s.source == SourcePairs {
		inSchema = schemas.Pairs.Schema()
	}

	// Pass 1: the generator's samples.
	gen, err := lmstage.SampleTasks(env, b, s.gen.BatchRows, s.spec, meta, files, inSchema, s.items)
	if err != nil {
		return err
	}
	if err := env.MapShards(ctx, gen); err != nil {
		return fmt.Errorf("rubrics: generate: %w", err)
	}

	// Pass 2: parse each sample into a rubrics row.
	rubSchema := lmstage.WithMeta(schemas.Rubrics.Schema(), meta)
	parse := make([]pipeline.Task, len(gen))
	for i, g := range gen {
		in := env.Out.Path(g.Output)
		parse[i] = pipeline.Task{
			Output: pipeline.ShardPath(schemas.Rubrics.Name, i, s.spec.Partitions()...),
			Schema: rubSchema, Inputs: []string{in}, Rows: g.Rows,
			Write: func(ctx context.Context, w *pipeline.ShardWriter) error {
				return pipeline.MapBatches(ctx, in, env.ReadOptions(schemas.Rollouts.Schema()), w, func(rec arrow.RecordBatch) (arrow.RecordBatch, error) {
					rs, err := schemas.Rollouts.Read(rec)
					if err != nil {
						return nil, err
					}
					out := make([]schemas.Rubric, len(rs))
					for k := range rs {
						out[k] = FromRolloutAs(&rs[k], s.format)
					}
					return schemas.Rubrics.Build(env.Mem, out), nil
				})
			},
		}
	}
	if err := env.MapShards(ctx, parse); err != nil {
		return fmt.Errorf("rubrics: parse: %w", err)
	}
	return nil
}

// items turns a batch of prompts or pairs into generator requests.
func (s *Stage) items(rec arrow.RecordBatch) ([]lmstage.Item, error) {
	if s.source == SourcePairs {
		ps, err := schemas.Pairs.Read(rec)
		if err != nil {
			return nil, err
		}
		items := make([]lmstage.Item, len(ps))
		for k := range ps {
			p := &ps[k]
			// The pair's question only, as the co-evolution loop and replay
			// write rubric-phase rubrics: the generator never sees a+ or a−.
			msgs, err := s.prompts.RubricForQuestion(p.Question)
			if err != nil {
				return nil, fmt.Errorf("pair %s: %w", p.PairID, err)
			}
			items[k] = lmstage.Item{ID: p.PairID, Messages: msgs}
		}
		return items, nil
	}
	ps, err := schemas.Prompts.Read(rec)
	if err != nil {
		return nil, err
	}
	items := make([]lmstage.Item, len(ps))
	for k := range ps {
		msgs, err := s.prompts.RubricForQuestion(ps[k].Prompt)
		if err != nil {
			return nil, fmt.Errorf("prompt %s: %w", ps[k].PromptID, err)
		}
		items[k] = lmstage.Item{ID: ps[k].PromptID, Messages: msgs}
	}
	return items, nil
}

// FromRollout parses a rubric generator's sample into a rubrics row,
// reading it strictly.
func FromRollout(r *schemas.Rollout) schemas.Rubric { return FromRolloutAs(r, schemas.FormatStrict) }

// FromRolloutAs parses a rubric generator's sample into a rubrics row under
// R_format reading f.
func FromRolloutAs(r *schemas.Rollout, f schemas.RubricFormat) schemas.Rubric {
	out := schemas.Rubric{
		RubricID: rules.RubricID(r.RolloutID), ItemID: r.PromptID, Phase: r.Phase, Step: r.Step, SampleIdx: r.SampleIdx,
		RolloutID: r.RolloutID, RawText: r.Text, Criteria: []schemas.Criterion{},
	}
	if r.Error != nil {
		msg := "generation failed: " + *r.Error
		out.ParseError = &msg
		return out
	}
	cs, err := schemas.ValidateRubricAs(r.Text, f)
	if cs != nil {
		out.Criteria = cs
		out.ScoringLevels = levelsFor(r.Text, len(cs))
	}
	if err != nil {
		msg := err.Error()
		out.ParseError = &msg
		return out
	}
	out.FormatOK = true
	return out
}

// levelsFor returns the scoring levels of raw's n criteria, one list per
// criterion (empty where a criterion has none), so that the judge sees the
// whole rubric.
func levelsFor(raw string, n int) [][]schemas.Level {
	out := make([][]schemas.Level, n)
	if lv := schemas.RubricLevels(raw); len(lv) == n {
		copy(out, lv)
	}
	for k := range out {
		if out[k] == nil {
			out[k] = []schemas.Level{}
		}
	}
	return out
}
