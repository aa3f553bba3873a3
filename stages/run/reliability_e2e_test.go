//go:build e2e

package run

import (
	"bytes"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/evolm/evolm/internal/testutil/sttest"
	"github.com/evolm/evolm/model/safetensors"
	"github.com/evolm/evolm/schemas"
)

// TestE2ENonFiniteLossAndCheckpoints: from the third update on the loss is
// NaN (the train-nan-loss fault point). Each such update is skipped and
// counted in steps.skipped_updates; after max_skipped_updates = 2 in a row
// the run stops with an error, keeping the steps rows and the last good
// checkpoint, whose files state.json checksums. Weights edited in that
// checkpoint are then refused on resume, naming the file.
func TestE2ENonFiniteLossAndCheckpoints(t *testing.T) {
	e := setup(t)
	dir := t.TempDir()
	cfg := e.writeConfig(t, dir)
	runDir := filepath.Join(dir, "nan")
	cmd := exec.Command(e.bin, "run", "--config", cfg, "--run-dir", runDir)
	cmd.Env = append(os.Environ(), "EVOLM_FAILPOINT=train-nan-loss@3", "EVOLM_STAGES_RUN_MAX_SKIPPED_UPDATES=2", "EVOLM_STAGES_RUN_STEPS=8")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err == nil || !strings.Contains(out.String(), "2 updates in a row skipped for a NaN or Inf loss") {
		t.Fatalf("run with NaN losses: %v, want it to stop after 2 skipped updates:\n%s", err, out.String())
	}
	if strings.Contains(out.String(), "panic") {
		t.Fatalf("panicked:\n%s", out.String())
	}
	steps := readTable(t, runDir, schemas.Steps)
	var applied, skipped, last int64
	for _, s := range steps {
		if s.SkippedUpdates > 0 {
			skipped++
		} else if s.GradNorm > 0 {
			applied++
		}
		last = max(last, s.SkippedUpdates)
	}
	t.Logf("%d steps rows: %d updates applied, %d skipped", len(steps), applied, skipped)
	if applied < 2 || skipped < 2 || last != 2 {
		t.Errorf("steps rows: %d applied, %d skipped, most in a row %d; want ≥ 2 applied and 2 skipped in a row", applied, skipped, last)
	}
	ckpts, _ := filepath.Glob(filepath.Join(runDir, "checkpoints", "step-*"))
	if len(ckpts) == 0 {
		t.Fatalf("no checkpoint before the NaN losses:\n%s", out.String())
	}
	good := ckpts[len(ckpts)-1]
	b, err := os.ReadFile(filepath.Join(good, "state.json"))
	if err != nil || !strings.Contains(string(b), `"policy/model.safetensors": "sha256:`) {
		t.Fatalf("state.json of %s lacks the weights' checksum (%v):\n%s", good, err, b)
	}

	// Weights overwritten with NaN after the checkpoint was written.
	p := filepath.Join(good, "policy", safetensors.SingleFile)
	sttest.Edit(t, p, func(infos []safetensors.Info, data map[string][]byte) []safetensors.Info {
		for _, i := range infos {
			if i.DType == safetensors.F32 {
				sttest.PutF32(data[i.Name], float32(math.NaN()), 1)
				break
			}
		}
		return infos
	})
	res := exec.Command(e.bin, "run", "--resume", runDir)
	res.Env = append(os.Environ(), "EVOLM_STAGES_RUN_STEPS=8")
	o, err := res.CombinedOutput()
	if err == nil || !strings.Contains(string(o), "policy/model.safetensors: sha256:") || !strings.Contains(string(o), "edited or replaced") {
		t.Fatalf("resume from a checkpoint with NaN weights: %v, want a checksum error naming policy/model.safetensors:\n%s", err, o)
	}
}

// TestE2EAllFailedJudgeStopsTheRun: a judge whose every call fails on the
// backend (an OpenAI-compatible server answering 404 to every request, as a
// server does for a model id it does not serve) stops the run with an error
// naming the judge and the first failure, instead of training on a step of
// zero rewards.
func TestE2EAllFailedJudgeStopsTheRun(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"object":"error","message":"The model `+"`Qwen/Qwen3-1.7B`"+` does not exist.","type":"NotFoundError","code":404}`)
	}))
	defer srv.Close()
	e := setup(t)
	dir := t.TempDir()
	cfg := e.writeConfig(t, dir)
	runDir := filepath.Join(dir, "nojudge")
	cmd := exec.Command(e.bin, "run", "--config", cfg, "--run-dir", runDir,
		"--judge-backend", "openai", "--judge-model", "Qwen/Qwen3-1.7B", "--judge-endpoints", srv.URL+"/v1",
		"--judge-max-attempts", "1", "--judge-mode", "generative")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("run with a judge failing every call exited 0:\n%s", out)
	}
	for _, want := range []string{"judge calls of step 0", "failed on the backend", "Qwen/Qwen3-1.7B", "first error", "does not exist"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("error output lacks %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(filepath.Join(runDir, "checkpoints")); err == nil {
		t.Errorf("a checkpoint was written for a step whose judge failed")
	}
}
