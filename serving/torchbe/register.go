package torchbe

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/evolm/evolm/method/grpo"
	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/dist"
	"github.com/evolm/evolm/model/learner"
	"github.com/evolm/evolm/model/lora"
	"github.com/evolm/evolm/model/torch"
	"github.com/evolm/evolm/model/train"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/serving/roles"
)

// The torch backend: a role in process on this engine. It trains roles
// (model/learner), joins c10d process groups (model/dist) and keeps its
// weights on the role's device.
func init() {
	roles.Register(roles.BackendSpec{
		Name:      roles.BackendTorch,
		Summary:   "in process on libtorch",
		Fields:    roleFields,
		Open:      openRole,
		Train:     openTrained,
		Learner:   checkLearner,
		Group:     openGroup,
		Placement: func(c roles.Config) (string, bool) { return c.Device, true },
	})
}

func roleFields(string) []pipeline.Field {
	zero, one := pipeline.Bound(0), pipeline.Bound(1)
	return []pipeline.Field{
		{Key: roles.KeyDevice, Type: pipeline.TypeString, Default: "cpu", Description: "torch: cpu, cuda or cuda:N"},
		{Key: roles.KeyDType, Type: pipeline.TypeString, Default: "", Description: "torch: parameter dtype; empty: float32 on CPU, bfloat16 on CUDA"},
		// Volatile: threads change how fast, not what, a step computes.
		{Key: roles.KeyThreads, Type: pipeline.TypeInt, Default: 0, Min: zero, Max: pipeline.Bound(4096), Volatile: true,
			Description: "torch: libtorch intra-op threads; 0: libtorch's default"},
		{Key: roles.KeyMaxBatch, Type: pipeline.TypeInt, Default: 64, Min: one, Max: pipeline.Bound(1 << 16), Description: "torch: most sequences decoded or scored together"},
		{Key: roles.KeyThinking, Type: pipeline.TypeBool, Default: false, Description: "torch: render chats with Qwen3 thinking disabled (enable_thinking=False)"},
	}
}

// RoleOptions are the load options of a role's model directory dir,
// reported as id.
func RoleOptions(c roles.Config, dir, id string) Options {
	return Options{Dir: dir, ModelID: id, Device: c.Device, DType: c.DType, Threads: c.Threads,
		MaxBatch: c.MaxBatch, DisableThinking: c.DisableThinking}
}

func openRole(c roles.Config, _ *slog.Logger) (*roles.Backend, error) {
	opt := RoleOptions(c, c.Model, "")
	// Several callers at once (a stage's shard workers) generate and score
	// on one engine goroutine, whose thread alone keeps a libgomp pool
	// (Options.OneThread).
	opt.OneThread = c.Callers > 1
	m, err := Load(opt)
	if err != nil {
		return nil, err
	}
	return roles.NewBackend(roles.BackendTorch, m.ID(), m, m, m, m.Close), nil
}

// trainer is the backend.Trainer of a torch role: the learner plus the
// model's chat template and tokenizer.
type trainer struct {
	*learner.Trainer
	m *Model
}

var (
	_ backend.Trainer     = trainer{}
	_ backend.TextEncoder = trainer{}
)

func (t trainer) Encode(text string) []int { return t.m.Tokenizer().Encode(text) }

func (t trainer) EndTokenID() int { return t.m.Tokenizer().Specials().EOS }

func (t trainer) PromptTokenIDs(msgs []backend.Message) ([]int, error) {
	text, err := t.m.renderMessages(msgs)
	if err != nil {
		return nil, err
	}
	return t.m.Tokenizer().Encode(text), nil
}

// learnerConfig turns the method's learner settings into the engine's.
func learnerConfig(lc backend.LearnerConfig) (learner.TrainerConfig, error) {
	norm, err := grpo.ParseLossNorm(lc.LossNorm)
	if lc.LossNorm == "" {
		norm, err = grpo.NormGRPO, nil
	}
	if err != nil {
		return learner.TrainerConfig{}, err
	}
	tc := learner.TrainerConfig{
		Loss: learner.LossConfig{Beta: lc.Beta, Epsilon: lc.Epsilon, EpsilonHigh: lc.EpsilonHigh, Norm: norm,
			MaxCompletionLen: lc.MaxCompletionLen, PackLength: lc.PackLength, TISCap: lc.TISCap},
		LR: lc.LR, WeightDecay: lc.WeightDecay, MaxGradNorm: lc.MaxGradNorm, MicroBatch: lc.MicroBatch,
		LoRA: lora.Config{Rank: lc.LoRA.Rank, Alpha: lc.LoRA.Alpha, Dropout: lc.LoRA.Dropout, Targets: lc.LoRA.Targets},
		Seed: lc.Seed, GradCheckpointing: lc.GradCheckpointing,
	}
	if lc.Group != nil {
		g, ok := lc.Group.(*group)
		if !ok {
			return tc, fmt.Errorf("data parallelism: the learner needs a torch process group, got %T", lc.Group)
		}
		tc.DP = &train.DataParallel{Group: g.g, ZeRO: lc.ZeRO, Device: g.dev}
	}
	return tc, nil
}

// checkLearner normalises the LoRA targets (short names to HF module
// names, in the model's order) and checks the adapter's shape.
func checkLearner(lc backend.LearnerConfig) (backend.LearnerConfig, error) {
	if lc.LoRA.Rank <= 0 {
		return lc, nil
	}
	c, err := lora.Config{Rank: lc.LoRA.Rank, Alpha: lc.LoRA.Alpha, Dropout: lc.LoRA.Dropout, Targets: lc.LoRA.Targets}.Normalize()
	if err != nil {
		return lc, err
	}
	lc.LoRA.Targets = c.Targets
	return lc, nil
}

// openTrained loads role c's model (the checkpoint's weights when resuming
// full fine-tuning), its frozen reference (full fine-tuning with β ≠ 0: the
// initial model), and the learner; on resume it loads the adapter (LoRA)
// and the optimizer state. The model id recorded in outputs is the role's
// name.
func openTrained(c roles.Config, opt roles.TrainOptions, _ *slog.Logger) (*roles.Trained, error) {
	cfg, err := learnerConfig(opt.Learner)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.Role, err)
	}
	name, initial := c.Role, c.Model
	withLoRA := cfg.LoRA.Rank > 0
	dir := initial
	if opt.Resume != nil && !withLoRA {
		// Full fine-tuning checkpoints the whole model; LoRA checkpoints
		// the adapter only, loaded onto the initial model below.
		dir = opt.Resume.Dir
	}
	m, err := Load(RoleOptions(c, dir, name))
	if err != nil {
		return nil, fmt.Errorf("%s model: %w", name, err)
	}
	var ref model.CausalLM
	if cfg.Loss.Beta != 0 && !withLoRA { // with LoRA the reference is the model with its adapter off
		if ref, err = loadReference(c); err != nil {
			m.Close()
			return nil, fmt.Errorf("%s reference model: %w", name, err)
		}
	}
	tr, err := learner.NewTrainer(m.LM(), ref, cfg, model.SaveOptions{TokenizerDir: initial})
	if err != nil {
		if ref != nil {
			ref.Close()
		}
		m.Close()
		return nil, fmt.Errorf("%s trainer: %w", name, err)
	}
	// A saved adapter names its base model, absolute, so that PEFT's
	// AutoPeftModelForCausalLM loads it from the adapter's directory alone.
	if tr.BaseModel, err = filepath.Abs(initial); err != nil {
		tr.Close()
		m.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	closeAll := func() {
		tr.Close()
		m.Close()
	}
	if r := opt.Resume; r != nil {
		if withLoRA {
			if err := tr.LoadAdapter(r.Dir); err != nil {
				closeAll()
				return nil, err
			}
		}
		if err := tr.LoadOptimizer(r.Optimizer); err != nil {
			closeAll()
			return nil, err
		}
	}
	return &roles.Trained{
		Backend: roles.NewBackend(roles.BackendTorch, m.ID(), m, m, m, closeAll),
		Trainer: trainer{Trainer: tr, m: m},
	}, nil
}

// loadReference loads role c's initial model, frozen by the trainer.
func loadReference(c roles.Config) (model.CausalLM, error) {
	dev, err := torch.ParseDevice(c.Device)
	if err != nil {
		return nil, err
	}
	var dt torch.DType
	if c.DType != "" {
		if dt, err = torch.ParseDType(c.DType); err != nil {
			return nil, err
		}
	}
	return model.Load(c.Model, model.LoadOptions{Device: dev, DType: dt})
}

// group is a c10d process group as a backend.Group; byte gathers run on
// dev (this rank's GPU under NCCL, the CPU under Gloo).
type group struct {
	g   *dist.Group
	dev torch.Device
}

func (g *group) Rank() int      { return g.g.Rank() }
func (g *group) WorldSize() int { return g.g.WorldSize() }
func (g *group) Barrier() error { return g.g.Barrier() }
func (g *group) Close() error   { return g.g.Close() }
func (g *group) AllGatherBytes(data []byte) ([][]byte, error) {
	return g.g.AllGatherBytes(data, g.dev)
}

// openGroup joins the group torchrun's variables name: Gloo on CPU, NCCL
// when the policy is on CUDA, where a torch role on plain "cuda" moves to
// this rank's device, cuda:LOCAL_RANK (the device NCCL uses; an explicit
// index is kept).
func openGroup(ctx context.Context, o roles.GroupOptions) (backend.Group, error) {
	do, err := dist.FromEnv()
	if err != nil {
		return nil, err
	}
	do.Backend, do.Timeout = dist.Gloo, o.Timeout
	dev := torch.CPU
	if d, err := torch.ParseDevice(o.Roles[0].Device); err == nil && torch.IsCUDA(d) {
		do.Backend, dev = dist.NCCL, torch.CUDA(do.LocalRank)
		for _, rc := range o.Roles {
			if rc.Backend == roles.BackendTorch && rc.Device == "cuda" {
				rc.Device = fmt.Sprintf("cuda:%d", do.LocalRank)
			}
		}
	}
	g, err := dist.Init(ctx, do)
	if err != nil {
		return nil, err
	}
	return &group{g: g, dev: dev}, nil
}
