package pipeline_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/pipeline"
)

// FuzzLoadConfig loads fuzzed config files and env values: no panic, and a
// config that loads prints (YAML) to a file that loads back to the same
// values and hash, and its values encode as JSON (a value that cannot, such
// as NaN, would give every config the hash of nothing).
func FuzzLoadConfig(f *testing.F) {
	f.Add("stages:\n  testcopy:\n    threshold: 0.6\n    rows: 7\n    sources: [x, y]\n", "0.7", "8")
	f.Add("run:\n  name: x\n", "", "")
	f.Add("stages:\n  testcopy:\n    timeout: 2m\n    mode: exact\n", "1e3", "0x10")
	f.Add("stages: {testcopy: {rows: 2.0}}\n", "-0", "+3")
	f.Add("? [a]\n: b\n", "0.5", "1_000")
	f.Add("stages:\n  testcopy:\n    sources: [\"a,b\", 'c']\n", ".5", "-1")
	f.Add("stages:\n  testcopy:\n    threshold: .nan\n", "NaN", "") // NaN made the hash sha256("")
	f.Add("stages:\n  testcopy:\n    threshold: -.inf\n", "+Inf", " ")
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, file, threshold, rows string) {
		p := filepath.Join(dir, "fuzz.yaml")
		if err := os.WriteFile(p, []byte(file), 0o644); err != nil {
			t.Fatal(err)
		}
		var env []string
		if threshold != "" {
			env = append(env, "EVOLM_STAGES_TESTCOPY_THRESHOLD="+threshold)
		}
		if rows != "" {
			env = append(env, "EVOLM_STAGES_TESTCOPY_ROWS="+rows)
		}
		cfg, err := pipeline.LoadConfig(pipeline.LoadOptions{File: p, Env: env})
		if err != nil {
			return
		}
		if _, err := json.Marshal(cfg.Map()); err != nil {
			t.Fatalf("loaded config does not encode (its hash would be of nothing): %v", err)
		}
		b, err := cfg.YAML()
		if err != nil {
			t.Fatalf("YAML: %v", err)
		}
		p2 := filepath.Join(dir, "printed.yaml")
		if err := os.WriteFile(p2, b, 0o644); err != nil {
			t.Fatal(err)
		}
		again, err := pipeline.LoadConfig(pipeline.LoadOptions{File: p2})
		if err != nil {
			t.Fatalf("printed config does not load: %v\n%s", err, b)
		}
		if diff := cmp.Diff(cfg.Map(), again.Map()); diff != "" {
			t.Fatalf("printed config reloads differently (-loaded +reloaded):\n%s", diff)
		}
		if cfg.Hash() != again.Hash() {
			t.Fatalf("hash %s changes to %s through printing", cfg.Hash(), again.Hash())
		}
	})
}
