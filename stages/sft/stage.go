package sft

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"time"

	"github.com/evolm/evolm/internal/failpoint"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/serving/roles"
)

// Name is the stage's registered name (`evolm sft`, config section stages.sft).
const Name = "sft"

// Phase is the steps table's phase of an SFT step.
const Phase = "sft"

func init() {
	pipeline.Register(pipeline.Spec{
		Name:    Name,
		Summary: "supervised fine-tuning (a warm start before RL): assistant-only loss, packing or padding, LoRA or full",
		Description: `Fine-tunes the model of roles.<role> (role: policy or judge) on chat conversations
(messages; loss on the assistant turns) or prompt-completion pairs (loss on
the completion), with the loss of TRL's SFTTrainer: the token cross-entropy
summed over every target token of the step's global batch, divided by their
number. Examples are truncated to max_length, padded per micro-batch or
packed into rows of max_length tokens, and visited in a seeded order per
epoch. Writes a steps row per step (phase=sft), a checkpoint every
checkpoint_every steps (a rerun resumes from the newest) and the final model
to output (an HF checkpoint; with LoRA the PEFT adapter).`,
		Inputs:     []string{"external"},
		Outputs:    []string{schemas.Steps.Name, "checkpoints"},
		Dirs:       []string{"checkpoints"},
		FieldsFunc: func() ([]pipeline.Field, error) { return pipeline.FieldsOf(Keys{}) },
		Uses:       roles.Uses(roles.Policy, roles.Judge),
		Volatile:   pipeline.VolatileOf(Keys{}),
		New:        func(cfg *pipeline.Config) (pipeline.Stage, error) { return newFromConfig(cfg) },
	})
}

// Config is the stage's validated configuration.
type Config struct {
	Keys
	Model   roles.Config // the role trained
	Learner backend.LearnerConfig
}

// FromConfig reads and checks stages.sft and the trained role.
func FromConfig(cfg *pipeline.Config) (*Config, error) {
	c := &Config{}
	if err := pipeline.Bind(cfg, &c.Keys); err != nil {
		return nil, err
	}
	var err error
	if c.Model, err = roles.Read(cfg, c.Role); err != nil {
		return nil, err
	}
	if b, _ := roles.Lookup(c.Model.Backend); b.Train == nil && c.Model.Backend != roles.BackendTorch {
		return nil, cfg.At(roles.Section(c.Role)).Errorf(roles.KeyBackend, "%s: evolm sft trains in process; want one of %v", c.Model.Backend, roles.Trainable())
	}
	c.Learner = backend.LearnerConfig{LR: c.LR, WeightDecay: c.WeightDecay, MaxGradNorm: c.MaxGradNorm,
		MicroBatch: c.MicroBatch, Seed: c.Seed, GradCheckpointing: c.GradCheckpointing}
	if c.LoRARank > 0 {
		if c.LoRADropout > 0 && c.GradCheckpointing {
			return nil, cfg.Errorf("lora_dropout", "%v with grad_checkpointing: the backward recompute would draw new dropout masks", c.LoRADropout)
		}
		c.Learner.LoRA = backend.LoRAConfig{Rank: c.LoRARank, Alpha: c.LoRAAlpha, Dropout: c.LoRADropout, Targets: c.LoRATargets}
	}
	if c.Learner, err = roles.CheckLearner(c.Model, c.Learner); err != nil {
		return nil, cfg.Errorf("lora_targets", "%v", err)
	}
	if n, _ := strconv.Atoi(os.Getenv("WORLD_SIZE")); n > 1 {
		return nil, fmt.Errorf("evolm sft runs in one process (WORLD_SIZE=%d): its learner steps are data-parallel (model/learner), but the stage does not yet open a process group; run it without --nproc", n)
	}
	return c, nil
}

type stage struct{ cfg *Config }

func newFromConfig(cfg *pipeline.Config) (pipeline.Stage, error) {
	c, err := FromConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &stage{cfg: c}, nil
}

// LRAt is the learning rate of step s (0-based) of total under the
// configured schedule: linear warm-up over warmup_steps, then linear decay
// to 0, constant, or cosine to 0 (transformers' get_*_schedule_with_warmup).
func (c *Config) LRAt(s, total int) float64 {
	if s < c.WarmupSteps {
		return c.LR * float64(s) / float64(max(1, c.WarmupSteps))
	}
	frac := float64(s-c.WarmupSteps) / float64(max(1, total-c.WarmupSteps))
	switch c.Scheduler {
	case "linear":
		return c.LR * max(0, 1-frac)
	case "cosine":
		return c.LR * max(0, 0.5*(1+math.Cos(math.Pi*frac)))
	}
	return c.LR
}

// order is the example order of epoch e: file order, or a permutation seeded
// by (seed, epoch).
func (c *Config) order(n, epoch int) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	if c.Shuffle {
		r := rand.New(rand.NewPCG(uint64(c.Seed), uint64(epoch)))
		r.Shuffle(n, func(i, j int) { idx[i], idx[j] = idx[j], idx[i] })
	}
	return idx
}

// batchAt returns the example indices of step s: the next batch_size
// examples of the epochs' orders laid end to end (a step may span two
// epochs), so a step's data is a function of the step alone.
func (c *Config) batchAt(n, s int) []int {
	out := make([]int, 0, c.BatchSize)
	for k := s * c.BatchSize; k < (s+1)*c.BatchSize; k++ {
		out = append(out, c.order(n, k/n)[k%n])
	}
	return out
}

func (st *stage) Run(ctx context.Context, env *pipeline.Env) error {
	c := st.cfg
	exs, err := readExamples(ctx, c.Input, env.ReadOptions(nil))
	if err != nil {
		return err
	}
	total := c.Steps
	if total == 0 {
		total = c.Epochs * int(math.Ceil(float64(len(exs))/float64(c.BatchSize)))
	}
	ck := checkpoints{env: env, cfg: c}
	resume, start, err := ck.latest()
	if err != nil {
		return err
	}
	tr, err := roles.OpenTrained(c.Model, roles.TrainOptions{Learner: c.Learner, Resume: resume}, env.Log)
	if err != nil {
		return err
	}
	defer tr.Close()
	sft, ok := tr.Trainer.(backend.SFTTrainer)
	if !ok {
		return fmt.Errorf("%s: the %s backend cannot take SFT steps", c.Role, c.Model.Backend)
	}
	samples := make([]backend.SFTSample, len(exs))
	for i, ex := range exs {
		s, err := sft.TokenizeSFT(ex)
		if err != nil {
			return fmt.Errorf("example %d: %w", i, err)
		}
		if len(s.TokenIDs) > c.MaxLength {
			s.TokenIDs, s.Targets = s.TokenIDs[:c.MaxLength], s.Targets[:c.MaxLength]
		}
		samples[i] = s
	}
	env.Log.Info("sft", "examples", len(exs), "steps", total, "start", start, "model", c.Model.Model)
	opt := backend.SFTOptions{}
	if c.Packing {
		opt.PackLength = c.MaxLength
	}
	prog := env.NewProgress("sft steps", int64(total))
	prog.Add(int64(start))
	defer prog.Done()
	skipped := 0
	for s := start; s < total; s++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		t0 := time.Now()
		batch := make([]backend.SFTSample, 0, c.BatchSize)
		for _, i := range c.batchAt(len(samples), s) {
			batch = append(batch, samples[i])
		}
		lr := c.LRAt(s, total)
		sft.SetLR(lr)
		stats, err := sft.SFTStep(ctx, batch, opt)
		if err != nil {
			return fmt.Errorf("step %d: %w", s, err)
		}
		if stats.Skipped != "" {
			skipped++
			env.Log.Warn("sft update skipped", "step", s, "why", stats.Skipped)
		} else {
			skipped = 0
		}
		m := schemas.StepMetrics{Step: int64(s), Phase: Phase, Loss: stats.Loss, GradNorm: stats.GradNorm, LR: lr,
			RespLenMean: float64(stats.Tokens) / float64(len(batch)), ElapsedS: time.Since(t0).Seconds(), SkippedUpdates: int64(skipped)}
		if err := writeStep(env, m); err != nil {
			return err
		}
		env.Log.Info("sft step", "step", s, "loss", round(stats.Loss), "grad_norm", round(stats.GradNorm), "lr", lr, "tokens", stats.Tokens, "rows", stats.Rows)
		prog.Add(1)
		if skipped >= c.MaxSkippedUpdates {
			return fmt.Errorf("step %d: %d updates in a row skipped (%s); stopping (max_skipped_updates)", s, skipped, stats.Skipped)
		}
		if (s+1)%c.CheckpointEvery == 0 || s+1 == total {
			if err := ck.save(ctx, sft, s+1); err != nil {
				return err
			}
		}
		failpoint.Hit("sft-step") // crash tests: killed after a step
	}
	return ck.export(ctx, sft, total)
}

func round(x float64) float64 { return math.Round(x*1e6) / 1e6 }

// writeStep commits step m's row of the steps table (phase=sft).
func writeStep(env *pipeline.Env, m schemas.StepMetrics) error {
	rel := pipeline.ShardPath(schemas.Steps.Name, 0, pipeline.Phase(Phase), pipeline.Step(int(m.Step)))
	prov := env.Provenance()
	w, err := pipeline.CreateShard(env.Out.Path(rel), schemas.Steps.Schema(), pipeline.WriteOptions{
		Mem: env.Mem, Provenance: prov, RowGroupRows: env.RowGroupRows, CompressionLevel: env.Compression})
	if err != nil {
		return err
	}
	rec := schemas.Steps.Build(env.Mem, []schemas.StepMetrics{m})
	defer rec.Release()
	if err := w.Write(rec); err != nil {
		_ = w.Abort()
		return err
	}
	_, err = env.Out.Commit(w, rel, prov, "")
	return err
}
