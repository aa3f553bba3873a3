//go:build e2e

package run

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/evolm/evolm/internal/testutil"
)

// TestE2EFreshAndResumeGuards: a --fresh that fails (a model path that does
// not exist) leaves the run — tables, manifests, checkpoints, config.yaml,
// models.json — byte for byte as it was, for the loop and for a single
// stage; a resume with only thread counts changed continues; a resume after
// the judge's weights were replaced is refused, naming the model and the
// file, unless --accept-changed-models.
func TestE2EFreshAndResumeGuards(t *testing.T) {
	e := setup(t)
	dir := t.TempDir()
	cfg := e.writeConfig(t, dir)
	runDir := filepath.Join(dir, "run")
	evolm := func(args ...string) (string, error) {
		out, err := exec.Command(e.bin, append(args, "--progress", "off", "--log-level", "warn")...).CombinedOutput()
		return string(out), err
	}
	must := func(args ...string) {
		t.Helper()
		if out, err := evolm(args...); err != nil {
			t.Fatalf("evolm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	loop := []string{"run", "--config", cfg, "--run-dir", runDir}
	must(append(loop, "--steps", "2")...)
	if _, err := os.Stat(filepath.Join(runDir, "checkpoints", "step-000002", "state.json")); err != nil {
		t.Fatalf("no checkpoint after 2 steps: %v", err)
	}
	before := testutil.TreeHash(t, runDir, "_locks", "_fresh")
	out, err := evolm(append(loop, "--steps", "2", "--fresh", "--policy-model", filepath.Join(dir, "no-such-model"))...)
	if err == nil {
		t.Fatalf("run --fresh with a missing model succeeded:\n%s", out)
	}
	if !strings.Contains(out, "previous output is untouched") {
		t.Errorf("the failed --fresh does not say the run is untouched:\n%s", out)
	}
	if testutil.TreeHash(t, runDir, "_locks", "_fresh") != before {
		t.Fatal("a failed run --fresh changed the run")
	}

	// Only the thread counts change: the run resumes (one more step).
	must(append(loop, "--steps", "3", "--policy-threads", "2", "--judge-threads", "2")...)
	if _, err := os.Stat(filepath.Join(runDir, "checkpoints", "step-000003", "state.json")); err != nil {
		t.Fatalf("resume with other thread counts did not run step 2: %v", err)
	}

	// The judge's weights are replaced by another tiny model's.
	other := filepath.Join(dir, "other-judge")
	run(t, e.bin, "model", "init", "--arch", "qwen3", "--preset", "tiny", "--seed", "9", "--out", other)
	judgeW := filepath.Join(e.models, "judge", "model.safetensors")
	b, err := os.ReadFile(filepath.Join(other, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(judgeW, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = evolm(append(loop, "--steps", "4")...)
	if err == nil {
		t.Fatalf("resume with the judge's weights replaced succeeded:\n%s", out)
	}
	for _, want := range []string{"roles.judge.model", "model.safetensors", "--accept-changed-models"} {
		if !strings.Contains(out, want) {
			t.Errorf("the refusal lacks %q:\n%s", want, out)
		}
	}
	must(append(loop, "--steps", "4", "--accept-changed-models")...)

	// A single stage: a failed rollout --fresh leaves its output as it was.
	stage := filepath.Join(dir, "rollout-run")
	ro := []string{"rollout", "--run-dir", stage, "--input", e.prompts, "--policy-model", filepath.Join(e.models, "policy"),
		"--n", "2", "--policy-max-tokens", "4", "--policy-threads", "1"}
	must(ro...)
	before = testutil.TreeHash(t, stage, "_locks", "_fresh")
	ro[6] = filepath.Join(dir, "no-such-model")
	if out, err := evolm(append(ro, "--fresh")...); err == nil {
		t.Fatalf("rollout --fresh with a missing model succeeded:\n%s", out)
	}
	if testutil.TreeHash(t, stage, "_locks", "_fresh") != before {
		t.Fatal("a failed rollout --fresh changed the run")
	}
}
