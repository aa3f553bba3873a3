//go:build e2e

package toyworld

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/evolm/evolm/internal/testutil"
)

// TestToyworldPipelineSmoke runs make toyworld's script end to end with
// --quick (three SFT steps per model, a four-step run, both ablations): the
// data, the warm starts, the held-out evaluation before and after, the
// frozen-generator run and the inverted-reward run with the evolm built
// with -tags toyworld_ablation. It checks the machinery — every stage ran
// and the last line is the JSON object make toyworld promises — not
// learning, which such a short run cannot show.
func TestToyworldPipelineSmoke(t *testing.T) {
	root := testutil.Root(t)
	dir := t.TempDir()
	evolm := testutil.BuildEvolm(t, dir)
	for _, b := range [][]string{
		{"go", "build", "-o", filepath.Join(dir, "toyworld"), "./datasets/toyworld/cmd/toyworld"},
		{"go", "build", "-tags", "toyworld_ablation", "-o", filepath.Join(dir, "evolm-ablation"), "./cmd/evolm"},
	} {
		cmd := exec.Command(b[0], b[1:]...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", b, err, out)
		}
	}
	cmd := exec.Command(testutil.Python(t), "scripts/toyworld.py", "--evolm", evolm, "--toyworld", filepath.Join(dir, "toyworld"),
		"--dir", filepath.Join(dir, "runs"), "--quick", "--threads", "1", "--ablations", "--evolm-ablation", filepath.Join(dir, "evolm-ablation"))
	cmd.Dir = root
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("toyworld.py: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	var got map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &got); err != nil {
		t.Fatalf("last line %q: %v", lines[len(lines)-1], err)
	}
	for _, k := range []string{"seeds", "accuracy_before", "accuracy_after", "margin_before", "margin_after", "rformat_after", "minutes",
		"margin_after_frozen", "margin_after_inverted"} {
		if _, ok := got[k]; !ok {
			t.Errorf("the JSON has no %q: %s", k, lines[len(lines)-1])
		}
	}
	seed := filepath.Join(dir, "runs", "seed-1")
	for _, p := range []string{"models/policy/config.json", "models/judge/config.json", "run/checkpoints/step-000004/policy/config.json",
		"run-frozen/checkpoints/step-000004/policy/config.json", "run-inverted/checkpoints/step-000004/policy/config.json"} {
		if _, err := os.Stat(filepath.Join(seed, p)); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	// The inverted run's rubric steps were rewarded by inverted_margin.
	cfg, err := os.ReadFile(filepath.Join(seed, "run-inverted", "config.yaml"))
	if err != nil || !strings.Contains(string(cfg), "inverted_margin") {
		t.Errorf("run-inverted/config.yaml does not name inverted_margin (%v)", err)
	}
}
