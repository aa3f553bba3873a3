// Package torchrole registers the `torch` backend of package roles — a role
// whose backend is torch runs in process on model/torchbe — and the torch
// opener of trained roles (package stages/roles/trained: the GRPO learner of
// stages/grpo on the same weights). Import it for its side effect wherever
// roles are opened in process (cmd/evolm, tests):
//
//	import _ "github.com/evolm/evolm/serving/roles/torchrole"
package torchrole

import (
	"fmt"
	"log/slog"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/learner"
	"github.com/evolm/evolm/model/torch"
	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/serving/roles"
	"github.com/evolm/evolm/serving/roles/trained"
	"github.com/evolm/evolm/serving/torchbe"
)

func init() {
	roles.RegisterBackend(roles.BackendTorch, open)
	trained.Register(roles.BackendTorch, openTrained)
}

// Options are the torchbe load options of a role.
func Options(c roles.Config, dir, id string) torchbe.Options {
	return torchbe.Options{Dir: dir, ModelID: id, Device: c.Device, DType: c.DType, Threads: c.Threads,
		MaxBatch: c.MaxBatch, DisableThinking: c.DisableThinking}
}

func open(c roles.Config, _ *slog.Logger) (*roles.Backend, error) {
	opt := Options(c, c.Model, "")
	// Several callers at once (a stage's shard workers) generate and score
	// on one engine goroutine, whose thread alone keeps a libgomp pool
	// (torchbe.Options.OneThread).
	opt.OneThread = c.Callers > 1
	m, err := torchbe.Load(opt)
	if err != nil {
		return nil, err
	}
	return roles.NewBackend(roles.BackendTorch, m.ID(), m, m, m, m.Close), nil
}

// trainer is the backend.Trainer of a torch role: grpo's learner plus the
// model's chat template and tokenizer.
type trainer struct {
	*learner.Trainer
	m *torchbe.Model
}

var _ backend.Trainer = trainer{}

func (t trainer) Encode(text string) []int { return t.m.Tokenizer().Encode(text) }

func (t trainer) EndTokenID() int { return t.m.Tokenizer().Specials().EOS }

var _ backend.TextEncoder = trainer{}

func (t trainer) PromptTokenIDs(msgs []backend.Message) ([]int, error) {
	text, err := t.m.RenderChat(msgs)
	if err != nil {
		return nil, err
	}
	return t.m.Tokenizer().Encode(text), nil
}

// openTrained loads role c's model (the checkpoint's weights when resuming
// full fine-tuning), its frozen reference (full fine-tuning with β ≠ 0: the
// initial model), and the learner; on resume it loads the adapter (LoRA)
// and the optimizer state. The model id recorded in outputs is the role's
// name.
func openTrained(c roles.Config, opt trained.Options, _ *slog.Logger) (*trained.Role, error) {
	name, initial := c.Role, c.Model
	lora := opt.Learner.LoRA.Rank > 0
	dir := initial
	if opt.Resume != nil && !lora {
		// Full fine-tuning checkpoints the whole model; LoRA checkpoints
		// the adapter only, loaded onto the initial model below.
		dir = opt.Resume.Dir
	}
	m, err := torchbe.Load(Options(c, dir, name))
	if err != nil {
		return nil, fmt.Errorf("%s model: %w", name, err)
	}
	var ref model.CausalLM
	if opt.Learner.Loss.Beta != 0 && !lora { // with LoRA the reference is the model with its adapter off
		if ref, err = loadReference(c); err != nil {
			m.Close()
			return nil, fmt.Errorf("%s reference model: %w", name, err)
		}
	}
	tr, err := learner.NewTrainer(m.LM(), ref, opt.Learner, model.SaveOptions{TokenizerDir: initial})
	if err != nil {
		if ref != nil {
			ref.Close()
		}
		m.Close()
		return nil, fmt.Errorf("%s trainer: %w", name, err)
	}
	closeAll := func() {
		tr.Close()
		m.Close()
	}
	if r := opt.Resume; r != nil {
		if lora {
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
	return &trained.Role{
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
