package schedule

// State is a checkpoint's record of the loop (checkpoints/step-NNNNNN/state.json).
type State struct {
	Version    int    `json:"version"`
	NextStep   int    `json:"next_step"`   // the first step the resumed run computes
	Seed       int64  `json:"seed"`        // base seed (all draws derive from it and the step)
	ConfigHash string `json:"config_hash"` // stages.run section hash
	// DataPosition is the prompt-stream position of NextStep
	// (Schedule.Position), recorded for inspection: the loop derives it.
	DataPosition int    `json:"data_position"`
	Shared       bool   `json:"shared_model"`
	CodeVersion  string `json:"code_version"`
	// SkippedInARow is the count of updates skipped in a row (non-finite
	// loss or gradient norm) when the checkpoint was taken, so that a
	// resumed run stops where an uninterrupted one would.
	SkippedInARow int `json:"skipped_in_a_row"`
	// Files maps the slash-separated path of every other file of the
	// checkpoint directory (weights, optimizer states, adapters, the replay
	// buffer: whatever it holds) to "sha256:<hex>"; resume verifies them.
	Files map[string]string `json:"files"`
	// WorldSize and ZeRO are the data-parallel ranks and ZeRO stage of the
	// run that wrote the checkpoint (0: one process, before data
	// parallelism). At ZeRO ≥ 1 each rank saved its own optimizer shard, so
	// only the same world size resumes.
	WorldSize int `json:"world_size,omitempty"`
	ZeRO      int `json:"zero_stage,omitempty"`
}

// StateVersion is the version of State written now: 2 added Files and
// SkippedInARow; a version-1 checkpoint still resumes, unverified.
const StateVersion = 2
