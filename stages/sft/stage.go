package sft

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"path/filepath"
	"slices"
	"time"

	"github.com/evolm/evolm/internal/failpoint"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/pipeline/track"
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
to output (an HF checkpoint; with LoRA the PEFT adapter). Reports each step
to the trackers named (TensorBoard, MLflow, W&B); --nproc N trains on N
data-parallel ranks (zero_stage shards the optimizer state).`,
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
	Track   track.Settings
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
		MicroBatch: c.MicroBatch, Seed: c.Seed, GradCheckpointing: c.GradCheckpointing, ZeRO: c.ZeRO}
	if c.LoRARank > 0 {
		if c.LoRADropout > 0 && c.GradCheckpointing {
			return nil, cfg.Errorf("lora_dropout", "%v with grad_checkpointing: the backward recompute would draw new dropout masks", c.LoRADropout)
		}
		c.Learner.LoRA = backend.LoRAConfig{Rank: c.LoRARank, Alpha: c.LoRAAlpha, Dropout: c.LoRADropout, Targets: c.LoRATargets}
	}
	if c.Learner, err = roles.CheckLearner(c.Model, c.Learner); err != nil {
		return nil, cfg.Errorf("lora_targets", "%v", err)
	}
	if c.Track, err = c.Keys.Keys.Settings(cfg); err != nil {
		return nil, err
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

// session is one run of the stage.
type session struct {
	cfg     *Config
	env     *pipeline.Env
	dp      *dataParallel // nil: one process
	ck      checkpoints
	sft     backend.SFTTrainer
	data    *spill
	hub     *track.Hub // nil: no tracker, or not rank 0
	console bool       // the step's log line at info level
}

// startState is what rank 0 decides before the first step and every rank
// follows.
type startState struct {
	Ckpt  string // the checkpoint resumed from ("": none)
	Start int    // the step to start at
	Out   string // the directory the stage writes to (pipeline.Env.Out)
}

func (st *stage) Run(ctx context.Context, env *pipeline.Env) (err error) {
	c := st.cfg
	dp, err := openDP(ctx, c)
	if err != nil {
		return err
	}
	defer dp.close()
	if !dp.lead() {
		env.Log = env.Log.With("rank", dp.rank())
		env.ProgressMode = "off"
	}
	s := &session{cfg: c, env: env, dp: dp, ck: checkpoints{env: env, cfg: c, dp: dp},
		console: slices.Contains(c.Track.Trackers, track.Console)}
	// Rank 0 alone reads the run directory's checkpoints; the others follow.
	ss, err := agree(dp, "start", func() (startState, error) {
		name, start, err := s.ck.latest()
		return startState{Ckpt: name, Start: start, Out: env.Out.Dir}, err
	})
	if err != nil {
		return err
	}
	if env.Out.Dir != ss.Out {
		// A follower writes its optimizer shards where rank 0 writes: the
		// run itself, or its --fresh staging.
		env.Out = &pipeline.Run{Dir: ss.Out}
	}
	if dp.lead() {
		// Before the model loads: a tracker that cannot start stops here.
		if s.hub, err = track.OpenStage(ctx, c.Track, env, Name, ss.Start); err != nil {
			return err
		}
		defer func() { s.hub.Close(track.StatusOf(err)) }()
	}
	lc := c.Learner
	if dp != nil {
		lc.Group = dp.g
	}
	tr, err := roles.OpenTrained(c.Model, roles.TrainOptions{Learner: lc, Resume: s.ck.resume(ss.Ckpt)}, env.Log)
	if err != nil {
		return err
	}
	defer tr.Close()
	var ok bool
	if s.sft, ok = tr.Trainer.(backend.SFTTrainer); !ok {
		return fmt.Errorf("%s: the %s backend cannot take SFT steps", c.Role, c.Model.Backend)
	}
	if err := s.tokenize(ctx); err != nil {
		return err
	}
	defer s.data.close()
	return s.train(ctx, ss.Start)
}

// tokenize streams the input into the spill under the stage's work
// directory (each rank its own); the ranks check that they read the same
// examples.
func (s *session) tokenize(ctx context.Context) error {
	dir, err := s.env.WorkDir()
	if err != nil {
		return err
	}
	name := "examples"
	if s.dp != nil {
		name = fmt.Sprintf("examples.rank-%d", s.dp.rank())
	}
	type digest struct {
		N   int
		Sum uint64
	}
	all, err := gather(s.dp, "tokenize", func() (digest, error) {
		sp, err := writeSpill(ctx, dir, name, s.cfg.Input, s.env.ReadOptions(nil), s.sft.TokenizeSFT, s.cfg.MaxLength)
		if err != nil {
			return digest{}, err
		}
		s.data = sp
		return digest{N: sp.n, Sum: sp.sum}, nil
	})
	if err != nil {
		if s.data != nil {
			s.data.close()
		}
		return err
	}
	for r, d := range all[1:] {
		if d != all[0] {
			s.data.close()
			return fmt.Errorf("data-parallel ranks read different examples: rank 0 tokenized %d (checksum %x), rank %d %d (checksum %x); every rank must see the same input files", all[0].N, all[0].Sum, r+1, d.N, d.Sum)
		}
	}
	return nil
}

// train takes the steps from start on, then writes the final model.
func (s *session) train(ctx context.Context, start int) error {
	c, env := s.cfg, s.env
	n := s.data.n
	total := c.Steps
	if total == 0 {
		total = c.Epochs * int(math.Ceil(float64(n)/float64(c.BatchSize)))
	}
	env.Log.Info("sft", "examples", n, "steps", total, "start", start, "model", c.Model.Model, "ranks", s.dp.world())
	opt := backend.SFTOptions{}
	if c.Packing {
		opt.PackLength = c.MaxLength
	}
	prog := env.NewProgress("sft steps", int64(total))
	prog.Add(int64(start))
	defer prog.Done()
	level := slog.LevelDebug
	if s.console {
		level = slog.LevelInfo
	}
	order := c.orders(n)
	skipped := 0
	for step := start; step < total; step++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		t0 := time.Now()
		batch := make([]backend.SFTSample, 0, c.BatchSize)
		for _, i := range order.batch(step) {
			smp, err := s.data.sample(i)
			if err != nil {
				return err
			}
			batch = append(batch, smp)
		}
		lr := c.LRAt(step, total)
		s.sft.SetLR(lr)
		stats, err := s.sft.SFTStep(ctx, batch, opt)
		if err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
		if stats.Skipped != "" {
			skipped++
			env.Log.Warn("sft update skipped", "step", step, "why", stats.Skipped)
		} else {
			skipped = 0
		}
		m := schemas.StepMetrics{Step: int64(step), Phase: Phase, Loss: stats.Loss, GradNorm: stats.GradNorm, LR: lr,
			RespLenMean: float64(stats.Tokens) / float64(len(batch)), ElapsedS: time.Since(t0).Seconds(), SkippedUpdates: int64(skipped)}
		if s.dp.lead() {
			if err := writeStep(env, m); err != nil {
				return err
			}
			s.hub.Step(&m)
		}
		env.Log.Log(ctx, level, "sft step", "step", step, "loss", round(stats.Loss), "grad_norm", round(stats.GradNorm), "lr", lr, "tokens", stats.Tokens, "rows", stats.Rows)
		prog.Add(1)
		if skipped >= c.MaxSkippedUpdates {
			return fmt.Errorf("step %d: %d updates in a row skipped (%s); stopping (max_skipped_updates)", step, skipped, stats.Skipped)
		}
		if (step+1)%c.CheckpointEvery == 0 || step+1 == total {
			name, err := s.ck.save(ctx, s.sft, step+1)
			if err != nil {
				return err
			}
			s.hub.Checkpoint(int64(step), name, filepath.Join(s.ck.dir(), name))
		}
		failpoint.Hit("sft-step") // crash tests: killed after a step
	}
	return s.ck.export(ctx, s.sft, total)
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
