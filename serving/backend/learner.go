package backend

// LearnerConfig configures the GRPO learner of a trained role, in the terms
// of the method (stages.run's keys); an engine that can train a role
// (roles.BackendSpec.Train) turns it into its own learner. The loop knows
// the learner only through this and the Trainer interface.
type LearnerConfig struct {
	// Beta weights the k3 KL penalty against the frozen reference (0.001;
	// 0 disables it and no reference is kept).
	Beta float64
	// Epsilon and EpsilonHigh are the clip range 1 − Epsilon ≤ ρ ≤ 1 +
	// EpsilonHigh; EpsilonHigh 0 means Epsilon.
	Epsilon, EpsilonHigh float64
	// LossNorm names how per-token losses average into the batch loss
	// (method/grpo: grpo, dapo, dr_grpo, pack).
	LossNorm string
	// MaxCompletionLen is dr_grpo's length denominator (tokens).
	MaxCompletionLen int
	// PackLength is pack's row length in tokens.
	PackLength int
	// TISCap, when > 0, weights each token's policy-gradient term by
	// min(exp(logπ_old − logπ_sampler), TISCap) (truncated importance
	// sampling against an inference server's log-probs).
	TISCap float64

	LR          float64 // AdamW learning rate
	WeightDecay float64 // on tensors of 2 or more dimensions only
	MaxGradNorm float64 // global-norm clip
	// MicroBatch is the number of sequences per forward/backward pass.
	MicroBatch int
	// LoRA, with Rank > 0, trains an adapter on the frozen model instead of
	// every weight; the KL reference is then the model with the adapter off.
	LoRA LoRAConfig
	// Seed draws the adapter's initial weights and its dropout masks.
	Seed int64
	// GradCheckpointing recomputes each decoder layer in backward.
	GradCheckpointing bool

	// Group, when non-nil, makes the learner one rank of a data-parallel
	// group (OpenGroup of the same backend): every rank gets the same global
	// batch, trains its block of micro-batches (RankBlock) and all-reduces
	// the gradients, so the step equals the one-process step.
	Group Group
	// ZeRO is the sharding stage under Group: 0 replicates the optimizer,
	// 1 shards its state, 2 shards the gradients too.
	ZeRO int
}

// LoRAConfig is a LoRA adapter's shape, as PEFT's LoraConfig names it.
type LoRAConfig struct {
	Rank    int      // r; 0: full fine-tuning
	Alpha   float64  // lora_alpha; the update is scaled by Alpha/Rank
	Dropout float64  // lora_dropout on the adapter's input
	Targets []string // projections (q, k, v, o, gate, up, down)
}

// Group is a data-parallel process group (torchrun's ranks): the
// collectives the co-evolution loop needs to split engine calls across
// ranks and agree on what each rank saw. Implementations come from the
// backend that trains the policy (roles.BackendSpec.Group).
type Group interface {
	// Rank is this process's rank in [0, WorldSize).
	Rank() int
	// WorldSize is the number of ranks.
	WorldSize() int
	// AllGatherBytes returns every rank's data, in rank order.
	AllGatherBytes(data []byte) ([][]byte, error)
	// Barrier returns once every rank has called it.
	Barrier() error
	// Close leaves the group.
	Close() error
}

// RankBlock returns the items [start, end) of m that rank handles of world:
// contiguous blocks, the first m mod world ranks one longer, so that
// concatenated in rank order they are the one-process order. The learner
// splits micro-batches and the loop splits engine batches this way.
func RankBlock(m, rank, world int) (start, end int) {
	q, r := m/world, m%world
	start = rank*q + min(rank, r)
	end = start + q
	if rank < r {
		end++
	}
	return start, end
}
