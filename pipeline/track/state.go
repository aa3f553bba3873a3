package track

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
)

// A tracker keeps what a resumed run needs to continue the same tracker run
// (its id, its server) in <run>/trackers/<name>.json, written when the
// tracker run is created.

// loadState reads tracker name's state into v; ok is false when there is
// none (a new run, or a --fresh one).
func loadState(r Run, name string, v any) (bool, error) {
	path := filepath.Join(r.StateDir(), name+".json")
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return false, fmt.Errorf("%s: %w (remove it to start a new %s run)", path, err, name)
	}
	return true, nil
}

// saveState writes tracker name's state atomically.
func saveState(r Run, name string, v any) error {
	if err := os.MkdirAll(r.StateDir(), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return pipeline.WriteFileAtomic(filepath.Join(r.StateDir(), name+".json"), append(b, '\n'))
}

// newID returns a random run id: 8 characters of [0-9a-z], as W&B's own.
func newID() string {
	const digits = "0123456789abcdefghijklmnopqrstuvwxyz"
	var b [8]byte
	_, _ = rand.Read(b[:])
	for i := range b {
		b[i] = digits[int(b[i])%len(digits)]
	}
	return string(b[:])
}

// MetricTags are the tags of every numeric steps column (Points' tags).
func MetricTags() []string {
	var out []string
	for _, f := range schemas.Steps.Schema().Fields() {
		if f.Name == "step" || f.Name == "phase" {
			continue
		}
		out = append(out, Tag(f.Name))
	}
	return out
}
