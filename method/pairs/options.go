package pairs

// ReplayFill says which answers of a policy step enter the replay buffer
// (one answer, the group's first sample, per prompt).
type ReplayFill string

const (
	// FillStepBatch adds an answer for each prompt of the step's own batch
	// (evolm's rule: active-sampling refills are extra draws, not the data
	// stream).
	FillStepBatch ReplayFill = "step_batch"
	// FillEveryGroup adds an answer for every prompt whose rewards were
	// computed: the step's batch, its refills and the groups whose rewards
	// tie alike (the official code's rule).
	FillEveryGroup ReplayFill = "every_group"
)

// Enum lists the rules (a config key's allowed values).
func (ReplayFill) Enum() []string { return []string{string(FillStepBatch), string(FillEveryGroup)} }

// InferSource says which model infers the back-translated questions.
type InferSource string

const (
	// InferPolicy is the model being trained (evolm's rule).
	InferPolicy InferSource = "policy"
	// InferFrozenInitial is a frozen copy of the initial policy model,
	// never updated (the official default: dedicated engines of the initial
	// checkpoint).
	InferFrozenInitial InferSource = "frozen_initial"
)

// Enum lists the sources (a config key's allowed values).
func (InferSource) Enum() []string { return []string{string(InferPolicy), string(InferFrozenInitial)} }
