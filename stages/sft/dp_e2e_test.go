//go:build e2e

package sft_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/model/safetensors"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
)

// sftRun is `evolm sft` on a tiny random checkpoint and 12 short chats,
// with a constant learning rate (so that raising steps continues a run as
// if it had been asked for from the start), batches of 4 one-example
// micro-batches, a checkpoint every 2 steps.
type sftRun struct {
	bin, model, input string
}

// The binary, model and data the tests below share, made by the first.
var (
	shared     sftRun
	sharedDir  string
	sharedOnce sync.Once
)

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedDir != "" {
		_ = os.RemoveAll(sharedDir)
	}
	os.Exit(code)
}

func setupRun(t *testing.T) sftRun {
	t.Helper()
	sharedOnce.Do(func() {
		var err error
		if sharedDir, err = os.MkdirTemp("", "sft-e2e-"); err != nil {
			t.Fatal(err)
		}
		e := sftRun{bin: testutil.BuildEvolm(t, sharedDir), model: filepath.Join(sharedDir, "init"), input: filepath.Join(sharedDir, "chats.jsonl")}
		evolm(t, e.bin, "model", "init", "--arch", "qwen3", "--preset", "tiny", "--seed", "5", "--out", e.model)
		var b strings.Builder
		for i := range 12 {
			fmt.Fprintf(&b, `{"messages": [{"role": "user", "content": "Add %d and %d."}, {"role": "assistant", "content": "%s"}]}`+"\n",
				i, 2*i, strings.Repeat(fmt.Sprint(3*i)+" ", 1+i%3))
		}
		if err := os.WriteFile(e.input, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		shared = e
	})
	if shared.bin == "" {
		t.Fatal("the shared set-up failed in an earlier test")
	}
	return shared
}

func (e sftRun) cmd(dir string, steps int, extra ...string) *exec.Cmd {
	args := append([]string{"sft", "--run-dir", dir, "--progress", "off", "--log-level", "warn", "--policy-model", e.model,
		"--input", e.input, "--batch-size", "4", "--micro-batch", "1", "--lr", "1e-3", "--lr-scheduler", "constant",
		"--checkpoint-every", "2", "--seed", "1", "--dist-timeout", "60s", "--steps", fmt.Sprint(steps)}, extra...)
	return exec.Command(e.bin, args...)
}

func (e sftRun) run(t *testing.T, dir string, steps int, extra ...string) {
	t.Helper()
	if out, err := e.cmd(dir, steps, extra...).CombinedOutput(); err != nil {
		t.Fatalf("evolm sft %s: %v\n%s", strings.Join(extra, " "), err, out)
	}
}

// stepRows reads the steps table's loss and grad_norm per step.
func stepRows(t *testing.T, dir string) [][2]float64 {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "steps", "phase=sft", "step=*", "*.parquet"))
	var rows []schemas.StepMetrics
	for _, f := range files {
		for rec, err := range pipeline.ReadShard(context.Background(), f, pipeline.ReadOptions{Schema: schemas.Steps.Schema()}) {
			if err != nil {
				t.Fatal(err)
			}
			rs, err := schemas.Steps.Read(rec)
			if err != nil {
				t.Fatal(err)
			}
			rows = append(rows, rs...)
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Step < rows[j].Step })
	out := make([][2]float64, len(rows))
	for i, r := range rows {
		if r.Step != int64(i) {
			t.Fatalf("%s: steps rows %d at position %d", dir, r.Step, i)
		}
		out[i] = [2]float64{r.Loss, r.GradNorm}
	}
	return out
}

// maxWeightDiff is the largest |a − b| over the float32 tensors of two
// safetensors files with the same tensors.
func maxWeightDiff(t *testing.T, a, b string) float64 {
	t.Helper()
	fa, err := safetensors.Open(a)
	if err != nil {
		t.Fatal(err)
	}
	defer fa.Close()
	fb, err := safetensors.Open(b)
	if err != nil {
		t.Fatal(err)
	}
	defer fb.Close()
	if d := cmp.Diff(fa.Names(), fb.Names()); d != "" {
		t.Fatalf("tensor names differ:\n%s", d)
	}
	worst := 0.0
	for _, n := range fa.Names() {
		da, _ := fa.Data(n)
		db, _ := fb.Data(n)
		if len(da) != len(db) {
			t.Fatalf("%s: %d vs %d bytes", n, len(da), len(db))
		}
		for i := 0; i+4 <= len(da); i += 4 {
			x := math.Float32frombits(binary.LittleEndian.Uint32(da[i:]))
			y := math.Float32frombits(binary.LittleEndian.Uint32(db[i:]))
			worst = math.Max(worst, math.Abs(float64(x-y)))
		}
	}
	return worst
}

// compareRuns checks that run b's steps rows (loss and grad norm, relative
// 1e-5) and final weights (1e-6) equal run a's, for a's first len(b) steps
// when a ran longer, and returns the largest differences.
func compareRuns(t *testing.T, what string, a, b [][2]float64, wa, wb string) {
	t.Helper()
	if len(b) == 0 || len(a) < len(b) {
		t.Fatalf("%s: steps rows %d vs %d", what, len(a), len(b))
	}
	rel := 0.0
	for i := range b {
		for k := range 2 {
			d := math.Abs(a[i][k]-b[i][k]) / math.Max(math.Abs(a[i][k]), 1e-12)
			rel = math.Max(rel, d)
			if !(d <= 1e-5) {
				t.Errorf("%s: step %d: %v vs %v", what, i, a[i], b[i])
			}
		}
	}
	w := -1.0
	if wa != "" {
		w = maxWeightDiff(t, wa, wb)
		if !(w <= 1e-6) {
			t.Errorf("%s: final weights differ by %g > 1e-6", what, w)
		}
	}
	t.Logf("%s: steps rows max relative |Δ| = %g; final weights max |Δ| = %g", what, rel, w)
}

// TestSFTDataParallel: `evolm sft --nproc 2` (Gloo on the CPU) computes the
// one-process run: the same loss and gradient norm per step and the same
// final weights, within float tolerance, at zero_stage 0 and 2. Rank 0
// alone writes the steps rows, the model and the trackers' events; at
// zero_stage 2 each rank writes its optimizer shard, a checkpoint sharded
// over 2 ranks is refused by one process, and --nproc 2 resumes it (each
// rank its own shard) to where a one-process run of the longer schedule
// ends. The ranks' spill files are gone afterwards.
func TestSFTDataParallel(t *testing.T) {
	e := setupRun(t)
	tmp := t.TempDir()
	model := func(dir string) string { return filepath.Join(dir, "model", "model.safetensors") }
	ref4, ref6 := filepath.Join(tmp, "ref4"), filepath.Join(tmp, "ref6")
	e.run(t, ref4, 4)
	e.run(t, ref6, 6)
	rows4, rows6 := stepRows(t, ref4), stepRows(t, ref6)
	compareRuns(t, "1 process, 4 steps vs the first 4 of 6", rows6, rows4, "", "")

	for _, zero := range []int{0, 2} {
		rd := filepath.Join(tmp, fmt.Sprintf("dp-zero%d", zero))
		e.run(t, rd, 4, "--nproc", "2", "--zero-stage", fmt.Sprint(zero), "--trackers", "console,tensorboard")
		compareRuns(t, fmt.Sprintf("2 ranks, zero_stage %d", zero), rows4, stepRows(t, rd), model(ref4), model(rd))
		shards, _ := filepath.Glob(filepath.Join(rd, "checkpoints", "step-000004", "optimizer*.safetensors"))
		if want := map[int]int{0: 1, 2: 2}[zero]; len(shards) != want {
			t.Errorf("zero_stage %d: optimizer files %v, want %d", zero, shards, want)
		}
		if spill, _ := filepath.Glob(filepath.Join(rd, "_work", "sft", "examples*")); len(spill) > 0 {
			t.Errorf("zero_stage %d: spill files left: %v", zero, spill)
		}
		checkTensorBoard(t, rd, false)
	}

	rd := filepath.Join(tmp, "dp-zero2")
	out, err := e.cmd(rd, 6, "--zero-stage", "2", "--trackers", "console,tensorboard").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "written by 2 data-parallel ranks") {
		t.Errorf("one process resuming a checkpoint sharded over 2 ranks: %v\n%s", err, out)
	}
	e.run(t, rd, 6, "--nproc", "2", "--zero-stage", "2", "--trackers", "console,tensorboard")
	compareRuns(t, "2 ranks, zero_stage 2, resumed from step 4 to 6", rows6, stepRows(t, rd), model(ref6), model(rd))
	checkTensorBoard(t, rd, false)
}

// TestSFTTrackersResume: a run reporting to TensorBoard is killed
// (SIGKILL) after its third step, past the checkpoint of step 2, and rerun:
// the tracker run continues in <run>/tensorboard/sft (the loop's
// <run>/tensorboard stays its own), and TensorBoard's EventAccumulator
// reads every step once, equal to the steps table.
func TestSFTTrackersResume(t *testing.T) {
	e := setupRun(t)
	rd := filepath.Join(t.TempDir(), "run")
	c := e.cmd(rd, 4, "--trackers", "console,tensorboard")
	c.Env = append(os.Environ(), "EVOLM_FAILPOINT=sft-step@3")
	out, err := c.CombinedOutput()
	if ws, ok := c.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the failpoint did not kill the run: %v\n%s", err, out)
	}
	e.run(t, rd, 4, "--trackers", "console,tensorboard")
	if n := len(stepRows(t, rd)); n != 4 {
		t.Errorf("steps rows: %d, want 4", n)
	}
	if own, _ := filepath.Glob(filepath.Join(rd, "tensorboard", "events.out.tfevents.*")); len(own) > 0 {
		t.Errorf("evolm sft wrote event files where the loop's go: %v", own)
	}
	checkTensorBoard(t, rd, true)
}

// checkTensorBoard reads the run's TensorBoard events with EventAccumulator
// (scripts/tracker_check.py): every steps column at every step once, equal
// to the steps table (resumed: the wall times present, not compared), in
// one tracker run (one event file per session, all with the run's id).
func checkTensorBoard(t *testing.T, run string, resumed bool) {
	t.Helper()
	dir := filepath.Join(run, "tensorboard", "sft")
	files, _ := filepath.Glob(filepath.Join(dir, "events.out.tfevents.*"))
	if len(files) == 0 {
		t.Fatalf("no event files in %s", dir)
	}
	id := files[0][strings.LastIndex(files[0], ".evolm-"):]
	for _, f := range files {
		if !strings.HasSuffix(f, id) {
			t.Errorf("event files of two tracker runs: %v", files)
		}
	}
	args := []string{filepath.Join(testutil.Root(t), "scripts", "tracker_check.py"), run, "--tensorboard", dir}
	if resumed {
		args = append(args, "--volatile")
	}
	if out, err := exec.Command(testutil.Python(t), args...).CombinedOutput(); err != nil {
		t.Errorf("tracker_check.py: %v\n%s", err, out)
	}
}
