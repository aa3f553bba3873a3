package track_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/pipeline/track"
)

// wandbEnv points wandb's directories into the test's own and runs it
// offline and quiet; no network is used.
func wandbEnv(t *testing.T) {
	t.Helper()
	d := t.TempDir()
	// NETRC: wandb reads API keys from it (default ~/.netrc); there is none.
	for k, v := range map[string]string{"WANDB_CACHE_DIR": d + "/cache", "WANDB_CONFIG_DIR": d + "/config", "WANDB_DATA_DIR": d + "/data",
		"WANDB_ARTIFACT_DIR": d + "/artifacts", "WANDB_SILENT": "true", "WANDB_API_KEY": "", "NETRC": d + "/netrc"} {
		t.Setenv(k, v)
	}
	os.Unsetenv("WANDB_API_KEY")
}

// wandbRunID is the W&B run id the tracker keeps in the run directory.
func wandbRunID(t *testing.T, run string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(run, "trackers", "wandb.json"))
	if err != nil {
		t.Fatal(err)
	}
	var st struct{ ID string }
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	return st.ID
}

// TestWandbOffline: in offline mode the run's .wandb files, read with
// wandb's own Record proto, hold every steps column at every step equal to
// the steps table (NaN included) and the configuration; a resumed session
// (after a crash at step 9 from a checkpoint at step 6) continues the same
// W&B run id without logging a step twice, and `wandb sync --dry-run`
// finds the run to upload.
func TestWandbOffline(t *testing.T) {
	wandbEnv(t)
	dir := t.TempDir()
	rows := stepRows(12)
	writeSteps(t, dir, rows)
	log, logs := newLog()
	s := track.Settings{Trackers: []string{"wandb"}, WandbProject: "evolm-test", WandbMode: "offline", WandbPython: testutil.Python(t),
		RunName: "readback", Tags: map[string]string{"team": "rl"}, Queue: 100, FlushTimeout: 5 * time.Minute}
	if last := reportRows(t, s, runInfo(dir), rows[:10], log); last != -1 {
		t.Fatalf("a new run's tracker holds step %d", last)
	}
	id := wandbRunID(t, dir)
	if last := reportRows(t, s, runInfo(dir), rows[6:], log); last != 9 {
		t.Fatalf("resumed tracker holds up to step %d, want 9\n%s", last, logs)
	}
	if got := wandbRunID(t, dir); got != id {
		t.Fatalf("resumed run id %s, want %s", got, id)
	}
	rep := check(t, dir, "--wandb", filepath.Join(dir, "trackers"), id)["wandb"]
	if rep.Steps != 12 || rep.Tags < 30 || rep.Files != 2 || rep.Version != "test" || rep.ConfigKeys < len(runInfo(dir).Params) {
		t.Errorf("wandb: %+v", rep)
	}
	if len(rep.ExitCodes) != 2 || rep.ExitCodes[0] != 0 || rep.ExitCodes[1] != 0 {
		t.Errorf("wandb exit codes %v, want two clean finishes", rep.ExitCodes)
	}
	cmd := exec.Command(filepath.Join(filepath.Dir(testutil.Python(t)), "wandb"), "sync", "--dry-run", filepath.Join(dir, "trackers", "wandb"))
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "run-"+id+".wandb") {
		t.Errorf("wandb sync --dry-run: %v\n%s", err, out)
	}
}

// TestWandbStartErrors: a Python without the wandb package, and an online
// run without an API key, stop the run at start with an error that says
// what to do.
func TestWandbStartErrors(t *testing.T) {
	wandbEnv(t)
	dir := t.TempDir()
	log, _ := newLog()
	// The venv's Python with site-packages off: the standard library only.
	bare := filepath.Join(dir, "python-without-wandb")
	if err := os.WriteFile(bare, []byte("#!/bin/sh\nexec "+testutil.Python(t)+" -S \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	s := track.Settings{Trackers: []string{"wandb"}, WandbProject: "evolm-test", WandbMode: "offline", WandbPython: bare, Queue: 1, FlushTimeout: time.Minute}
	_, err := track.Open(t.Context(), s, runInfo(dir), log)
	testutil.ErrorContains(t, err, "a Python without wandb", "tracker wandb", "cannot import wandb", "wandb_python")

	s.WandbPython, s.WandbMode = testutil.Python(t), "online"
	_, err = track.Open(t.Context(), s, runInfo(dir), log)
	testutil.ErrorContains(t, err, "online W&B without an API key", "tracker wandb", "API key", "WANDB_API_KEY", "wandb_mode: offline")
}
