package schemas

// ReplayEntry is one (step, question, answer) of the temporal-contrast replay
// buffer (README.md, "The method"): an answer the policy gave at Step, kept so that a later
// rubric phase can contrast it with a fresh answer to the same question.
type ReplayEntry struct {
	Step      int64  // step at which the answer was sampled
	PromptID  string // prompts.prompt_id of the question
	Question  string // the question text
	Answer    string // the policy's answer then
	RolloutID string // rollouts.rollout_id of that answer
}

// Replay is the replay buffer as persisted in a checkpoint (oldest first).
var Replay = newTable("replay", 1,
	numCol("step", func(r *ReplayEntry) *int64 { return &r.Step }),
	strCol("prompt_id", func(r *ReplayEntry) *string { return &r.PromptID }),
	strCol("question", func(r *ReplayEntry) *string { return &r.Question }),
	strCol("answer", func(r *ReplayEntry) *string { return &r.Answer }),
	strCol("rollout_id", func(r *ReplayEntry) *string { return &r.RolloutID }),
)
