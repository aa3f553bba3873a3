// Package rollout is the rollout stage, `evolm rollout`: it samples n
// completions of every prompt with the policy and writes them to the
// rollouts table.
//
// Contract:
//
//   - Input: prompts shards (the files of `input`, or the shards the dedup
//     stage committed in the run). Output: one rollouts shard per input
//     shard, rollouts/phase=<phase>/step=<step>/role=policy/part-NNNNN,
//     holding exactly n rows per input prompt in input order, sample_idx
//     0..n−1.
//   - A prompt is sent as its conversation (messages, or its prompt text as
//     one user turn), after the policy's system prompt (role prompt
//     `policy`) when that renders to something and the conversation has no
//     system turn of its own. The backend applies the chat template.
//   - Row identity and seeds: rollout_id = <prompt_id>/<phase>/<step>/policy/<j>;
//     the prompt's request seed derives from `seed`, the prompt id, phase,
//     step and role (rules.DeriveSeed) and sample j records seed+j, the
//     seed the torch engine (and `evolm serve`) samples it with. Reruns and
//     both backends therefore sample the same rows.
//   - A row the backend could not generate is written with finish_reason
//     "error" and the reason in `error`, never dropped; a failure of the
//     whole backend call fails the stage (committed shards stay: rerun to
//     resume).
//   - Output metadata records the backend, the model and the policy prompt's
//     version.
package rollout

import (
	"context"
	"fmt"
	"maps"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/evolm/evolm/internal/lmstage"
	"github.com/evolm/evolm/method/prompts"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/serving/roles"
)

// Name is the stage's name.
const Name = "rollout"

// KeyInput lists the prompts files.
const KeyInput = "input"

func init() {
	fields := []pipeline.Field{
		{Key: KeyInput, Type: pipeline.TypeStrings, Default: []string{},
			Description: "prompts Parquet files or globs; empty: the prompts the dedup stage committed in the run"},
	}
	fields = append(fields, lmstage.RunFields()...)
	fields = append(fields, lmstage.SamplingFields(8)...)
	pipeline.Register(pipeline.Spec{
		Name:    Name,
		Summary: "sample n policy completions per prompt into the rollouts table",
		Description: `Samples n completions of every prompt with the policy (the paper: n = 8,
temperature 1.0) through the torch or openai backend, and writes one rollouts
row per sample with its token counts, finish reason, sampled-token log-probs,
model, sampling parameters, seed, phase and step. Failed rows are recorded
with finish_reason "error", never dropped. The policy (model, backend,
sampling) is configured once in roles.policy.`,
		Inputs:  []string{schemas.Prompts.Name},
		Outputs: []string{schemas.Rollouts.Name},
		Fields:  fields,
		Uses:    roles.Uses(roles.Policy),
		Moved:   roles.MovedStageKeys(roles.Policy),
		New:     func(cfg *pipeline.Config) (pipeline.Stage, error) { return newFromConfig(cfg) },
	})
}

// Stage is the rollout stage.
type Stage struct {
	input   []string
	spec    lmstage.SampleSpec
	role    roles.Config
	prompts *prompts.Set
}

func newFromConfig(cfg *pipeline.Config) (*Stage, error) {
	c, err := lmstage.ReadCommon(cfg, schemas.RolePolicy)
	if err != nil {
		return nil, err
	}
	if _, err := c.Prompts.Policy(); err != nil {
		return nil, cfg.At(roles.Section(roles.Policy)).Errorf(roles.KeyPromptFiles, "%v", err)
	}
	return &Stage{input: cfg.Strings(KeyInput), spec: c.Spec, role: c.Role, prompts: c.Prompts}, nil
}

// Run implements pipeline.Stage.
func (s *Stage) Run(ctx context.Context, env *pipeline.Env) error {
	files, err := lmstage.Inputs(env, s.input, "dedup", schemas.Prompts.Name)
	if err != nil {
		return err
	}
	rc := s.role
	rc.Callers = min(env.Parallelism, len(files)) // MapShards' workers, one shard each
	b, err := roles.Open(rc, env.Log)
	if err != nil {
		return err
	}
	defer b.Close()
	system, err := s.prompts.Policy()
	if err != nil {
		return err
	}
	meta := lmstage.Provenance(b, s.prompts, prompts.Policy)
	pf, err := lmstage.PromptsFilesMeta(files)
	if err != nil {
		return err
	}
	maps.Copy(meta, pf)
	tasks, err := lmstage.SampleTasks(env, b, s.role.BatchRows, s.spec, meta, files, schemas.Prompts.Schema(), func(rec arrow.RecordBatch) ([]lmstage.Item, error) {
		ps, err := schemas.Prompts.Read(rec)
		if err != nil {
			return nil, err
		}
		items := make([]lmstage.Item, len(ps))
		for k := range ps {
			items[k] = lmstage.Item{ID: ps[k].PromptID, Messages: Conversation(&ps[k], system)}
		}
		return items, nil
	})
	if err != nil {
		return err
	}
	if err := env.MapShards(ctx, tasks); err != nil {
		return fmt.Errorf("rollout: %w", err)
	}
	return nil
}

// Conversation is the chat a prompt is sent as: its messages (or its text
// as one user turn), after system when system is non-empty and the
// conversation has no system turn.
func Conversation(p *schemas.Prompt, system string) []backend.Message {
	var msgs []backend.Message
	if system != "" && (len(p.Messages) == 0 || p.Messages[0].Role != "system") {
		msgs = append(msgs, backend.Message{Role: "system", Content: system})
	}
	if len(p.Messages) == 0 {
		return append(msgs, backend.Message{Role: "user", Content: p.Prompt})
	}
	for _, m := range p.Messages {
		msgs = append(msgs, backend.Message{Role: m.Role, Content: m.Content})
	}
	return msgs
}
