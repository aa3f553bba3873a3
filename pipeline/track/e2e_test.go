//go:build e2e

package track_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/evolm/evolm/internal/testutil"
)

// e2eRun is a loop run on two tiny random checkpoints and the sample prompts.
type e2eRun struct {
	bin, root, models, prompts string
}

func setupRun(t *testing.T) e2eRun {
	t.Helper()
	root := testutil.Root(t)
	tmp := t.TempDir()
	e := e2eRun{bin: testutil.BuildEvolm(t, tmp), root: root, models: filepath.Join(tmp, "models")}
	evolm := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(e.bin, args...).CombinedOutput(); err != nil {
			t.Fatalf("evolm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	for i, name := range []string{"policy", "judge"} {
		evolm("model", "init", "--arch", "qwen3", "--preset", "tiny", "--seed", fmt.Sprint(i+1), "--out", filepath.Join(e.models, name))
	}
	dd := filepath.Join(tmp, "dedup")
	evolm("dedup", "--run-dir", dd, "--input", filepath.Join(root, "datasets/sample/tulu3_sample.parquet"), "--progress", "off", "--log-level", "warn")
	prompts, _ := filepath.Glob(filepath.Join(dd, "prompts", "*.parquet"))
	if len(prompts) == 0 {
		t.Fatal("dedup wrote no prompts")
	}
	e.prompts = strings.Join(prompts, ",")
	return e
}

// cmd is `evolm run` on the demo preset cut to policy steps of 2 prompts × 2
// answers (the trackers care for rows, not phases), checkpoints every 2
// steps, with env added.
func (e e2eRun) cmd(runDir string, env []string, args ...string) *exec.Cmd {
	base := []string{"run", "--config", filepath.Join(e.root, "stages", "presets", "demo.yaml"), "--run-dir", runDir,
		"--input", e.prompts, "--policy-model", filepath.Join(e.models, "policy"), "--judge-model", filepath.Join(e.models, "judge"),
		"--steps", "5", "--k", "50", "--prompts-per-step", "2", "--samples", "2", "--checkpoint-every", "2", "--progress", "off"}
	c := exec.Command(e.bin, append(base, args...)...)
	c.Env = append(os.Environ(), env...)
	return c
}

// TestE2ETrackersResume: a run reporting to TensorBoard, a real MLflow
// server and W&B (offline) is killed (SIGKILL, right after step 3 was
// handed to the trackers; its checkpoint is at step 2) and resumed; during
// the resumed session the MLflow server is killed and started again. The
// run succeeds, the tracker says once that it is failing, and each tracker
// — read back with EventAccumulator, MlflowClient and W&B's Record proto —
// holds every step once, equal to the steps table (the wall-time columns of
// the recomputed steps 2 and 3 are those of the first session), in the
// same tracker run as before the crash.
func TestE2ETrackersResume(t *testing.T) {
	e := setupRun(t)
	wandbEnv(t)
	srv := sharedMLflow(t)
	run := filepath.Join(t.TempDir(), "run")
	env := []string{"EVOLM_STAGES_RUN_TRACKERS=console,tensorboard,mlflow,wandb", "EVOLM_STAGES_RUN_MLFLOW_TRACKING_URI=" + srv.URI,
		"EVOLM_STAGES_RUN_MLFLOW_EXPERIMENT=evolm-e2e", "EVOLM_STAGES_RUN_WANDB_MODE=offline", "EVOLM_STAGES_RUN_WANDB_PYTHON=" + testutil.Python(t),
		"EVOLM_STAGES_RUN_TRACKER_FLUSH_TIMEOUT=10m"}

	c := e.cmd(run, append(env, "EVOLM_FAILPOINT=trackers-step@4"))
	out, err := c.CombinedOutput()
	if ws, ok := c.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("first session: %v, want it killed at the failpoint:\n%s", err, out)
	}
	mlID, wbID := mlflowRunID(t, run), wandbRunID(t, run)

	// The resumed session; the server is killed and restarted once step 2
	// has been logged.
	c = exec.Command(e.bin, "run", "--resume", run, "--progress", "off")
	c.Env = append(os.Environ(), env...)
	stderr, err := c.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	c.Stdout = c.Stderr
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	var restart sync.WaitGroup
	var restartErr error
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		line := sc.Text()
		log.WriteString(line + "\n")
		if strings.Contains(line, "msg=step ") && strings.Contains(line, " step=2 ") {
			srv.kill()
			restart.Add(1)
			go func() {
				defer restart.Done()
				restartErr = srv.start()
			}()
		}
	}
	err = c.Wait()
	restart.Wait()
	if err != nil || restartErr != nil {
		t.Fatalf("resumed session: %v (server restart: %v)\n%s", err, restartErr, log.String())
	}
	if n := strings.Count(log.String(), "tracker failing"); n != 1 || !strings.Contains(log.String(), "tracker=mlflow") {
		t.Errorf("%d 'tracker failing' warnings, want 1 from mlflow:\n%s", n, log.String())
	}
	if mlflowRunID(t, run) != mlID || wandbRunID(t, run) != wbID {
		t.Errorf("the resumed session opened new tracker runs")
	}
	reps := check(t, run, "--volatile", "--tensorboard", filepath.Join(run, "tensorboard"), "--mlflow", srv.URI, mlID,
		"--wandb", filepath.Join(run, "trackers"), wbID)
	for name, r := range reps {
		if r.Steps != 5 || r.Tags < 30 {
			t.Errorf("%s: %d steps, %d tags", name, r.Steps, r.Tags)
		}
	}
	if r := reps["mlflow"]; r.Status != "FINISHED" || r.Tagged["evolm.checkpoint.step-000004"] == nil {
		t.Errorf("mlflow: status %s, tags %v", r.Status, r.Tagged)
	}
	if r := reps["wandb"]; r.Files != 2 || len(r.ExitCodes) != 2 || r.ExitCodes[1] != 0 {
		t.Errorf("wandb: %d files, exit codes %v (want the killed session's and a clean one)", r.Files, r.ExitCodes)
	}
	files, _ := filepath.Glob(filepath.Join(run, "tensorboard", "events.out.tfevents.*"))
	if len(files) != 2 {
		t.Errorf("tensorboard files %v, want one per session", files)
	}
}
