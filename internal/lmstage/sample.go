package lmstage

import (
	"context"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/evolm/evolm/method/prompts"
	"github.com/evolm/evolm/method/rules"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/serving/roles"
)

// Config keys of a sampling stage.
const (
	KeyN          = "n"
	KeyCheckpoint = "checkpoint"
)

// SamplingFields are the config fields of a stage that samples n
// completions per item; the sampling parameters are the role's (package
// roles).
func SamplingFields(n int) []pipeline.Field {
	return []pipeline.Field{
		{Key: KeyN, Type: pipeline.TypeInt, Default: n, Min: pipeline.Bound(1), Description: "samples per item"},
		{Key: KeySeed, Type: pipeline.TypeInt, Default: 0, Description: "base seed; each row's seed derives from it and the row's key"},
		{Key: KeyCheckpoint, Type: pipeline.TypeString, Default: "", Description: "checkpoint id recorded in each row; empty: the model id"},
	}
}

// RunFields are the phase and step of the rows a stage writes.
func RunFields() []pipeline.Field {
	return []pipeline.Field{
		{Key: KeyPhase, Type: pipeline.TypeString, Default: schemas.PhasePolicy, Enum: []string{schemas.PhasePolicy, schemas.PhaseRubric},
			Description: "training phase recorded in the rows and the output partition"},
		{Key: KeyStep, Type: pipeline.TypeInt, Default: 0, Min: pipeline.Bound(0), Description: "training step recorded in the rows and the output partition"},
	}
}

// SampleSpec is what a stage samples with.
type SampleSpec struct {
	Role, Phase string
	Step        int64
	N           int
	Sampling    backend.Sampling // Seed is ignored: each item's seed is derived
	BaseSeed    int64
	Checkpoint  string
}

// Common is what every model stage reads: its own sampling fields and the
// role it calls.
type Common struct {
	Spec    SampleSpec
	Role    roles.Config
	Prompts *prompts.Set
}

// ReadCommon reads a model stage's fields (cfg, its view) and the role it
// calls.
func ReadCommon(cfg *pipeline.Config, role string) (Common, error) {
	rc, err := roles.Read(cfg, role)
	if err != nil {
		return Common{}, err
	}
	set, err := roles.Prompts(rc)
	if err != nil {
		return Common{}, err
	}
	return Common{Spec: ReadSampleSpec(cfg, rc), Role: rc, Prompts: set}, nil
}

// ReadSampleSpec reads the stage's n, seed, phase, step and checkpoint (the
// loader has checked their bounds) and takes the sampling from rc.
func ReadSampleSpec(cfg *pipeline.Config, rc roles.Config) SampleSpec {
	sp := SampleSpec{Role: rc.Role, Sampling: rc.Sampling, Phase: schemas.PhasePolicy}
	if cfg.Has(KeyPhase) {
		sp.Phase, sp.Step = cfg.String(KeyPhase), int64(cfg.Int(KeyStep))
	}
	sp.N, sp.BaseSeed, sp.Checkpoint = 1, int64(cfg.Int(KeySeed)), cfg.String(KeyCheckpoint)
	if cfg.Has(KeyN) {
		sp.N = cfg.Int(KeyN)
	}
	return sp
}

// Partitions are the output partitions of a stage's rows.
func (sp SampleSpec) Partitions() []pipeline.Partition {
	return []pipeline.Partition{pipeline.Phase(sp.Phase), pipeline.Step(int(sp.Step))}
}

// Item is one thing to sample completions for.
type Item struct {
	ID       string            // prompts.prompt_id or pairs.pair_id
	Messages []backend.Message // the conversation to continue
}

// RolloutID is the id of sample j of an item.
func (sp SampleSpec) RolloutID(item string, j int) string {
	return rules.RolloutID(item, sp.Phase, sp.Step, sp.Role, j)
}

// ItemSeed is the seed of an item's request; sample j samples with
// ItemSeed+j (the torch engine's rule, which `evolm serve` shares).
func (sp SampleSpec) ItemSeed(item string) int64 {
	return rules.DeriveSeed(sp.BaseSeed, item, sp.Phase, fmt.Sprint(sp.Step), sp.Role) >> 2
}

// Sample asks b for N completions of every item, BatchRows requests per
// call, and returns N rollouts rows per item in item and sample order. A
// row that failed on the backend is kept with FinishReason "error" and the
// reason in Error.
func Sample(ctx context.Context, b *roles.Backend, batchRows int, sp SampleSpec, items []Item) ([]schemas.Rollout, error) {
	return SampleEach(ctx, b, batchRows, sp, items, nil)
}

// SampleEach is Sample calling done (when not nil) with the rows of each
// backend call as it finishes, for progress.
func SampleEach(ctx context.Context, b *roles.Backend, batchRows int, sp SampleSpec, items []Item, done func(rows int)) ([]schemas.Rollout, error) {
	out := make([]schemas.Rollout, 0, len(items)*sp.N)
	ckpt := sp.Checkpoint
	if ckpt == "" {
		ckpt = b.Model
	}
	err := Chunks(ctx, len(items), max(batchRows/sp.N, 1), func(start, end int) error {
		reqs := make([]backend.GenerateRequest, 0, end-start)
		for _, it := range items[start:end] {
			seed := sp.ItemSeed(it.ID)
			s := sp.Sampling
			s.Seed = &seed
			reqs = append(reqs, backend.GenerateRequest{ID: it.ID, Messages: it.Messages, N: sp.N, Sampling: s, LogProbs: true})
		}
		resps, err := b.Generate(ctx, reqs)
		if err != nil {
			return fmt.Errorf("items %d..%d: %w", start, end-1, err)
		}
		if len(resps) != len(reqs) {
			return fmt.Errorf("items %d..%d: backend answered %d of %d requests", start, end-1, len(resps), len(reqs))
		}
		for i, res := range resps {
			it := &items[start+i]
			if res.ID != it.ID {
				return fmt.Errorf("item %d: backend answered %q for request %q", start+i, res.ID, it.ID)
			}
			model := res.Model
			if model == "" {
				model = b.Model
			}
			for j := 0; j < sp.N; j++ {
				r := schemas.Rollout{
					RolloutID: sp.RolloutID(it.ID, j), PromptID: it.ID, SampleIdx: int32(j), Role: sp.Role, Phase: sp.Phase,
					Step: sp.Step, PromptTokens: int32(res.PromptTokens), Model: model, Checkpoint: ckpt,
					Seed: *reqs[i].Seed + int64(j), Temperature: sp.Sampling.Temperature, TopP: sp.Sampling.TopP,
					TopK: int32(sp.Sampling.TopK), TokenLogprobs: []float32{}, TokenIDs: []int64{},
				}
				if res.Failure != nil {
					msg := FailureText(res.Failure)
					r.FinishReason, r.Error, r.PromptTokens = "error", &msg, max(r.PromptTokens, -1)
					out = append(out, r)
					continue
				}
				if len(res.Completions) != sp.N {
					return fmt.Errorf("item %s: backend gave %d completions, want %d", it.ID, len(res.Completions), sp.N)
				}
				c := res.Completions[j]
				r.Text, r.FinishReason = c.Text, string(c.FinishReason)
				r.CompletionTokens = int32(c.Tokens)
				if c.Tokens < 0 {
					r.CompletionTokens = int32(len(c.LogProbs))
				}
				for _, lp := range c.LogProbs {
					r.TokenLogprobs = append(r.TokenLogprobs, float32(lp.LogProb))
				}
				r.SetTokenIDs(c.TokenIDs, c.TokenSource)
				out = append(out, r)
			}
		}
		if done != nil {
			done(len(resps) * sp.N)
		}
		return nil
	})
	return out, err
}

// RecordFailures adds sampled rows to a stage's failure counts: a row with
// an Error failed on the backend. Every sample of a request shares its
// request's fate.
func RecordFailures(f *pipeline.RowFailures, rows []schemas.Rollout) {
	failed, first := 0, ""
	for i := range rows {
		if rows[i].Error != nil {
			if failed == 0 {
				first = *rows[i].Error
			}
			failed++
		}
	}
	f.Add(len(rows), failed, first)
}

// SampleTasks makes the tasks that sample b (batchRows requests a call,
// with spec) for every item of each input file: file i's batches, read
// with schema in and turned into items by items, become the rollouts shard
// i of spec's partitions and its role, whose schema carries meta. A task's
// rows are the file's times spec.N.
func SampleTasks(env *pipeline.Env, b *roles.Backend, batchRows int, spec SampleSpec, meta map[string]string, files []string, in *arrow.Schema, items func(arrow.RecordBatch) ([]Item, error)) ([]pipeline.Task, error) {
	schema := WithMeta(schemas.Rollouts.Schema(), meta)
	parts := append(spec.Partitions(), pipeline.Partition{Key: "role", Value: spec.Role})
	tasks := make([]pipeline.Task, len(files))
	for i, f := range files {
		rows, err := pipeline.CountRows(f)
		if err != nil {
			return nil, err
		}
		tasks[i] = pipeline.Task{
			Output: pipeline.ShardPath(schemas.Rollouts.Name, i, parts...),
			Schema: schema, Inputs: []string{f}, Rows: rows * int64(spec.N),
			Write: func(ctx context.Context, w *pipeline.ShardWriter) error {
				return pipeline.MapBatches(ctx, f, env.ReadOptions(in), w, func(rec arrow.RecordBatch) (arrow.RecordBatch, error) {
					its, err := items(rec)
					if err != nil {
						return nil, err
					}
					// Progress moves per finished backend call, not per
					// written batch (which may take the whole input).
					out, err := SampleEach(ctx, b, batchRows, spec, its, func(n int) { w.Advance(int64(n)) })
					if err != nil {
						return nil, err
					}
					RecordFailures(&env.Failures, out)
					return schemas.Rollouts.Build(env.Mem, out), nil
				})
			},
		}
	}
	return tasks, nil
}
