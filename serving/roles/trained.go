package roles

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/evolm/evolm/serving/backend"
)

// Trained is an opened trained role: one whose weights `evolm run` updates.
// Its Backend samples from (and scores with) the weights being trained; its
// Model is the id recorded in outputs. Trainer updates the weights. Close
// releases both views (they share the weights).
//
// What a TrainOpener must do:
//
//   - load the role's model (Config: model, and its backend's keys) and
//     build a learner for opt.Learner;
//   - full fine-tuning (Learner.LoRA.Rank == 0) trains every weight; with
//     Learner.Beta ≠ 0 it keeps a frozen reference, the role's initial model
//     (Config.Model), for the KL term — also on resume;
//   - LoRA (Rank > 0) attaches a fresh adapter, seeded by Learner.Seed, to
//     the frozen initial model and trains only that; the reference is the
//     model with its adapter off, so no reference model is loaded;
//   - Learner.GradCheckpointing recomputes activations in backward;
//   - Learner.Group makes the learner one rank of that data-parallel group
//     (a group the same backend opened);
//   - opt.Resume restores a checkpoint that the Trainer wrote (Save and
//     SaveOptimizer): full fine-tuning loads the weights from Resume.Dir in
//     place of the initial model, LoRA loads the adapter from it onto the
//     initial model; both load the optimizer state from Resume.Optimizer.
//
// The shared-model design (a rubric generator without a model of its own)
// is one trained role: the caller opens the policy once and uses it, and its
// one Trainer, for both roles.
type Trained struct {
	*Backend
	Trainer backend.Trainer
}

// TrainOptions say how a trained role is opened.
type TrainOptions struct {
	// Learner configures the GRPO learner: loss, optimizer, LoRA, seed,
	// gradient checkpointing, data parallelism.
	Learner backend.LearnerConfig
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

// OpenTrained opens role c for training on its backend.
func OpenTrained(c Config, opt TrainOptions, log *slog.Logger) (*Trained, error) {
	s, err := spec(c)
	if err != nil {
		return nil, err
	}
	if s.Train == nil {
		return nil, fmt.Errorf("%s: backend %q cannot train in process (trainable: %s)", c.Role, c.Backend, strings.Join(Trainable(), ", "))
	}
	return s.Train(c, opt, log)
}

// FleetMode is how a fleet's servers load the learner's weights.
type FleetMode string

// Fleet modes.
const (
	FleetLoRA FleetMode = "lora" // adapters (vLLM's runtime LoRA API)
	FleetFull FleetMode = "full" // whole checkpoints (SGLang's update_weights_from_disk)
)

// FleetOptions configure a fleet (BackendSpec.Fleet).
type FleetOptions struct {
	Endpoints      []string // base URLs of the servers (…/v1)
	MaxInFlight    int
	MaxAttempts    int
	RequestTimeout time.Duration
	Mode           FleetMode
	// Dir holds the versions' weights; every server must be able to read
	// it at the same path.
	Dir string
	// RunDir is the run's directory and Role the trained role: the fleet
	// names each version of the weights after both.
	RunDir, Role string
	// Encode tokenizes text with the learner's tokenizer and EndID is its
	// end-of-turn token (-1: none), for servers that return no token ids.
	Encode func(string) []int
	EndID  int
	Log    *slog.Logger
}

// Fleet generates for a trained role on servers whose weights it keeps in
// step with the learner's.
type Fleet interface {
	backend.Generator
	// Sync makes the learner's weights for step current on the servers
	// before the step's first generation; save writes them to a directory.
	Sync(ctx context.Context, step int, save func(dir string) error) error
	// SyncTime is the wall time Sync has spent so far.
	SyncTime() time.Duration
	Close()
}
