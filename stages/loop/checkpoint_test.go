package loop

import (
	"github.com/evolm/evolm/internal/testutil"
	"os"
	"path/filepath"
	"testing"
)

// TestCheckpointChecksums: state.json's checksums cover every file of the
// checkpoint directory, whatever it holds (nested adapter directories
// included), and verification names each file that was edited, removed or
// added.
func TestCheckpointChecksums(t *testing.T) {
	mk := func(t *testing.T) string {
		dir := t.TempDir()
		for rel, body := range map[string]string{
			"policy/model.safetensors":                 "weights",
			"policy/config.json":                       "{}",
			"policy_optimizer.safetensors":             "adam",
			"policy/adapter/adapter_model.safetensors": "lora",
			"replay.parquet":                           "replay",
		} {
			p := filepath.Join(dir, filepath.FromSlash(rel))
			os.MkdirAll(filepath.Dir(p), 0o755)
			if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	tests := []struct {
		name   string
		damage func(dir string)
		want   []string // in the error; nil: verifies
	}{
		{"intact", func(string) {}, nil},
		{"state.json itself is not covered", func(dir string) { os.WriteFile(filepath.Join(dir, stateFile), []byte("{}"), 0o644) }, nil},
		{"weights edited", func(dir string) {
			os.WriteFile(filepath.Join(dir, "policy", "model.safetensors"), []byte("NaNNaNN"), 0o644)
		}, []string{"policy/model.safetensors: sha256:", "edited or replaced"}},
		{"adapter removed", func(dir string) { os.Remove(filepath.Join(dir, "policy", "adapter", "adapter_model.safetensors")) },
			[]string{"policy/adapter/adapter_model.safetensors: missing"}},
		{"file added", func(dir string) { os.WriteFile(filepath.Join(dir, "policy", "extra.bin"), []byte("x"), 0o644) },
			[]string{"policy/extra.bin: not in state.json"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := mk(t)
			sums, err := checksumDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(sums) != 5 {
				t.Fatalf("checksums of %d files, want 5: %v", len(sums), sums)
			}
			tc.damage(dir)
			err = verifyChecksums(dir, sums)
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			testutil.ErrorContains(t, err, "verified a damaged checkpoint", tc.want...)
		})
	}
}
