package run

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/method/pairs"
	"github.com/evolm/evolm/schemas"
	"github.com/google/go-cmp/cmp"
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

func TestBufferSaveLoadRoundTrip(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	b, _ := pairs.NewBuffer(10)
	for s := int64(0); s < 4; s++ {
		b.Add(schemas.ReplayEntry{Step: s, PromptID: fmt.Sprintf("p%d", s), Question: "q", Answer: "答え " + fmt.Sprint(s), RolloutID: "r"})
	}
	path := filepath.Join(t.TempDir(), "replay.parquet")
	if err := saveBuffer(b, path, mem); err != nil {
		t.Fatal(err)
	}
	got, err := loadBuffer(context.Background(), path, 10, mem)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(b.Entries(), got.Entries()); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}
