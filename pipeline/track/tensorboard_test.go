package track_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/evolm/evolm/pipeline/track"
)

// TestTensorBoardReadBack: what the TensorBoard tracker writes reads back
// with TensorBoard's own EventAccumulator: every steps column at every
// step, equal to the steps table after float32 rounding (NaN included),
// the hparams, the text samples and the checkpoint paths. A second session
// (a resume after a crash at step 9 from a checkpoint at step 6) continues
// the run's files: the accumulator shows one value per step.
func TestTensorBoardReadBack(t *testing.T) {
	dir := t.TempDir()
	rows := stepRows(12)
	writeSteps(t, dir, rows)
	log, _ := newLog()
	s := track.Settings{Trackers: []string{track.Console, "tensorboard"}, Queue: 100, FlushTimeout: time.Minute}
	if last := reportRows(t, s, runInfo(dir), rows[:10], log); last != -1 {
		t.Fatalf("a new run's tracker holds step %d", last)
	}
	// The resumed session recomputes steps 6.. and sends them: the tracker
	// holds 0..9, so only 10 and 11 are written.
	if last := reportRows(t, s, runInfo(dir), rows[6:], log); last != 9 {
		t.Fatalf("resumed tracker holds up to step %d, want 9", last)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "tensorboard", "events.out.tfevents.*"))
	if len(files) != 2 || files[0] >= files[1] {
		t.Fatalf("event files %v: want two, the resumed session's sorting after", files)
	}
	rep := check(t, dir, "--tensorboard", filepath.Join(dir, "tensorboard"))["tensorboard"]
	if rep.Steps != 12 || rep.Tags < 30 || rep.Values < 12*30 {
		t.Errorf("tensorboard: %d steps, %d tags", rep.Steps, rep.Tags)
	}
	// Checkpoints after steps 3 and 7, then 7 again (the resumed session
	// rewrote it) and 11.
	if rep.Texts["samples/rubric"] != 12 || rep.Texts["evolm/config"] != 1 || len(rep.Checkpoints) != 4 {
		t.Errorf("tensorboard texts %v, checkpoints %v", rep.Texts, rep.Checkpoints)
	}
	if rep.HParams["stages.run.lr"] == nil || rep.HParams["evolm.config_hash"] == nil || len(rep.HParamsTags) != 3 {
		t.Errorf("tensorboard hparams %v (tags %v)", rep.HParams, rep.HParamsTags)
	}
}

// TestTensorBoardRefusesSharedDir: a directory that holds another run's
// event files is refused (TensorBoard would show both as one run).
func TestTensorBoardRefusesSharedDir(t *testing.T) {
	dir := t.TempDir()
	tb := filepath.Join(dir, "shared")
	if err := os.MkdirAll(tb, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tb, "events.out.tfevents.1700000000.host.1.other"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	log, _ := newLog()
	_, err := track.Open(t.Context(), track.Settings{Trackers: []string{"tensorboard"}, TensorBoardDir: tb, Queue: 1}, runInfo(dir), log)
	if err == nil || !strings.Contains(err.Error(), "another run") || !strings.Contains(err.Error(), "tensorboard_dir") {
		t.Fatalf("err = %v", err)
	}
}
