// Package trained opens a trained role — one whose weights `evolm run`
// updates — into the backend interfaces: the role's roles.Backend (Generator,
// Scorer, LogProber, sampling from the weights being trained) and its
// backend.Trainer (GRPO steps, checkpoint files, the tokenization of train
// samples).
//
// It is the training counterpart of roles.Open, and dispatches the same way:
// an engine package registers an Opener for its backend name from init()
// (stages/roles/torchrole registers torch), so that the loop, which imports
// this package, links no engine. What an Opener must do:
//
//   - load the role's model (roles.Config: model, device, dtype, threads,
//     max_batch, disable_thinking) and build a learner for opt.Learner;
//   - full fine-tuning (Learner.LoRA.Rank == 0) trains every weight; with
//     Learner.Loss.Beta ≠ 0 it keeps a frozen reference, the role's initial
//     model (roles.Config.Model), for the KL term — also on resume;
//   - LoRA (Rank > 0) attaches a fresh adapter, seeded by Learner.Seed, to
//     the frozen initial model and trains only that; the reference is the
//     model with its adapter off, so no reference model is loaded;
//   - Learner.GradCheckpointing recomputes activations in backward;
//   - opt.Resume restores a checkpoint that the Trainer wrote (Save and
//     SaveOptimizer): full fine-tuning loads the weights from Resume.Dir in
//     place of the initial model, LoRA loads the adapter from it onto the
//     initial model; both load the optimizer state from Resume.Optimizer.
//
// The shared-model design (a rubric generator without a model of its own)
// is one trained role: the caller opens the policy once and uses it, and its
// one Trainer, for both roles.
package trained

import (
	"fmt"
	"log/slog"

	"github.com/evolm/evolm/model/learner"
	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/serving/roles"
)

// Options say how a trained role is opened.
type Options struct {
	// Learner configures the GRPO learner: loss, optimizer, LoRA, seed,
	// gradient checkpointing.
	Learner learner.TrainerConfig
	// Resume, when non-nil, restores the role from a checkpoint.
	Resume *Resume
}

// Resume names the files of a role's checkpoint.
type Resume struct {
	// Dir is what Trainer.Save wrote: an HF checkpoint (full fine-tuning)
	// or an adapter (LoRA).
	Dir string
	// Optimizer is the file Trainer.SaveOptimizer wrote.
	Optimizer string
}

// Role is an opened trained role. Close releases both views (they share
// the weights).
type Role struct {
	// Backend samples from (and scores with) the weights being trained; its
	// Model is the id recorded in outputs.
	*roles.Backend
	// Trainer updates the weights.
	Trainer backend.Trainer
}

// Opener opens a trained role on one engine.
type Opener func(c roles.Config, opt Options, log *slog.Logger) (*Role, error)

var openers roles.Registry[Opener]

// Register makes an engine able to train roles of backend name. Engine
// packages call it from init().
func Register(name string, open Opener) {
	openers.Register(name, open)
}

// Open opens role c for training.
func Open(c roles.Config, opt Options, log *slog.Logger) (*Role, error) {
	open, err := openers.Get(c, func(backend, have string) string {
		return fmt.Sprintf("backend %q cannot train in process (trainable: %s)", backend, have)
	})
	if err != nil {
		return nil, err
	}
	return open(c, opt, log)
}
