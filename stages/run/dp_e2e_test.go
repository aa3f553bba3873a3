//go:build e2e

package run

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/schemas"
)

// dpConfig is the demo loop for the data-parallel tests: 3 policy steps and
// 1 rubric step (steps 4, K 3), a checkpoint every step, collectives
// bounded by 20 s, policy batches of 6 rows.
func (e demoEnv) dpConfig(t *testing.T, dir string, zero int) string {
	t.Helper()
	b, err := os.ReadFile(e.writeConfig(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(b), "    steps: 6\n    k: 2\n", fmt.Sprintf("    steps: 4\n    k: 3\n    zero_stage: %d\n    dist_timeout: 20s\n", zero), 1)
	s = strings.Replace(s, "    checkpoint_every: 2\n", "    checkpoint_every: 1\n", 1)
	// Batches of 2 prompts × 3 samples: the ranks share the steps' batches
	// (a rank runs whole engine batches, so both sample what one process does).
	s = strings.Replace(s, "    disable_thinking: true\n", "    disable_thinking: true\n    max_batch: 6\n", 1)
	p := filepath.Join(dir, fmt.Sprintf("dp-zero%d.yaml", zero))
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// compareSteps checks that two runs' steps tables have the same rows, floats
// within tol (wall times apart), for the steps before until (all with
// until < 0), and returns the largest float difference.
func compareSteps(t *testing.T, a, b string, tol float64, until int64) float64 {
	t.Helper()
	ra, rb := readTable(t, a, schemas.Steps), readTable(t, b, schemas.Steps)
	sort.Slice(ra, func(i, j int) bool { return ra[i].Step < ra[j].Step })
	sort.Slice(rb, func(i, j int) bool { return rb[i].Step < rb[j].Step })
	if len(ra) != len(rb) || len(ra) == 0 {
		t.Fatalf("steps rows: %d vs %d", len(ra), len(rb))
	}
	worst := 0.0
	for i := range ra {
		x, y := ra[i], rb[i]
		if until >= 0 && x.Step >= until {
			break
		}
		x, y = withoutWallTimes(x), withoutWallTimes(y)
		fx, fy := stepFloats(x), stepFloats(y)
		for k := range fx {
			d := math.Abs(fx[k] - fy[k])
			if math.IsNaN(fx[k]) && math.IsNaN(fy[k]) {
				d = 0
			}
			worst = math.Max(worst, d)
			if !(d <= tol) {
				t.Errorf("step %d: field %d: %v vs %v", x.Step, k, fx[k], fy[k])
			}
		}
		x.Loss, x.KL, x.ClipFrac, x.GradNorm, x.RewardMean, x.RewardStd, x.RespLenMean, x.Entropy, x.ZeroStdFrac = 0, 0, 0, 0, 0, 0, 0, 0, 0
		y.Loss, y.KL, y.ClipFrac, y.GradNorm, y.RewardMean, y.RewardStd, y.RespLenMean, y.Entropy, y.ZeroStdFrac = 0, 0, 0, 0, 0, 0, 0, 0, 0
		x.FormatRate, y.FormatRate, x.JudgeMissingRate, y.JudgeMissingRate = nil, nil, 0, 0
		x.RewardTemporal, y.RewardTemporal, x.RewardBacktranslate, y.RewardBacktranslate, x.RewardRubricGuided, y.RewardRubricGuided = nil, nil, nil, nil, nil, nil
		x.MarginMean, y.MarginMean = nil, nil
		if fmt.Sprintf("%+v", x) != fmt.Sprintf("%+v", y) {
			t.Errorf("step %d: rows differ beyond floats:\n%+v\n%+v", x.Step, x, y)
		}
	}
	return worst
}

func stepFloats(m schemas.StepMetrics) []float64 {
	opt := func(p *float64) float64 {
		if p == nil {
			return -12345
		}
		return *p
	}
	return []float64{m.Loss, m.KL, m.ClipFrac, m.GradNorm, m.RewardMean, m.RewardStd, m.RespLenMean, m.Entropy, m.ZeroStdFrac,
		opt(m.FormatRate), m.JudgeMissingRate, opt(m.RewardTemporal), opt(m.RewardBacktranslate), opt(m.RewardRubricGuided), opt(m.MarginMean)}
}

// firstFlip returns the first step at which two runs sampled different
// tokens (any rollout row: policy and rubric phases), or -1 when they
// sampled the same everywhere. Data-parallel ranks sum gradients in
// another order than one process does, so their weights differ from step 1
// on in the last float bits (about 1e-7), and a random model's
// near-uniform distribution over 151,936 tokens turns such a difference
// into another sampled token now and then (inverse CDF: when the uniform
// draw lands within it of a boundary). After that the runs train on
// different samples, and only what came before can be compared.
func firstFlip(t *testing.T, a, b string) int64 {
	t.Helper()
	key := func(r schemas.Rollout) string { return r.RolloutID }
	ra, rb := readTable(t, a, schemas.Rollouts), readTable(t, b, schemas.Rollouts)
	if len(ra) != len(rb) {
		t.Fatalf("rollouts rows: %d vs %d", len(ra), len(rb))
	}
	ids := map[string][]int64{}
	for _, r := range ra {
		ids[key(r)] = r.TokenIDs
	}
	flip := int64(-1)
	for _, r := range rb {
		got, ok := ids[key(r)]
		if !ok {
			t.Fatalf("rollout %s is in one run only", key(r))
		}
		if !slices.Equal(got, r.TokenIDs) && (flip < 0 || r.Step < flip) {
			flip = r.Step
		}
	}
	return flip
}

// dpCheckpoint is a run's policy weights after n updates.
func dpCheckpoint(n int64) string {
	return fmt.Sprintf("checkpoints/step-%06d/policy/model.safetensors", n)
}

const dpFinal = "checkpoints/step-000004/policy/model.safetensors"

// TestE2EDataParallel runs the demo loop in one process and with --nproc 2
// at ZeRO 0, 1 and 2: the final weights and the steps rows agree within
// 1e-6; torchrun's 2 ranks equal --nproc 2's exactly. Then it kills rank 1 in the middle of a step (its third update):
// rank 0 fails with an error naming rank 1, nothing partial is visible, and
// --resume with 2 ranks ends where the uninterrupted run did (the fault at
// ZeRO-2).
func TestE2EDataParallel(t *testing.T) {
	e := setup(t)
	dir := t.TempDir()
	ref := filepath.Join(dir, "ref")
	t0 := time.Now()
	run(t, e.bin, "run", "--config", e.dpConfig(t, dir, 0), "--run-dir", ref)
	t.Logf("1 process: %v", time.Since(t0).Round(time.Millisecond))
	runs := map[int]string{}
	for _, zero := range []int{0, 1, 2} {
		rd := filepath.Join(dir, fmt.Sprintf("dp-zero%d", zero))
		t0 := time.Now()
		// Reporting to TensorBoard too: rank 0 alone writes the run's events.
		run(t, e.bin, "run", "--config", e.dpConfig(t, dir, zero), "--run-dir", rd, "--nproc", "2", "--trackers", "console,tensorboard")
		checkOneTracker(t, rd)
		t.Logf("2 ranks, zero_stage %d: %v", zero, time.Since(t0).Round(time.Millisecond))
		runs[zero] = rd
		// Compare the weights after the updates that trained on the same
		// samples in both runs: all four, or those before the first
		// sampled-token flip (firstFlip). Step 0 samples from the same
		// initial weights, so a flip there is a bug, not rounding.
		flip, ckpt := firstFlip(t, ref, rd), dpFinal
		switch {
		case flip == 0:
			t.Fatalf("zero_stage %d: the ranks sampled other tokens than one process at step 0, from the same weights", zero)
		case flip > 0:
			ckpt = dpCheckpoint(flip)
			t.Logf("zero_stage %d: a sampled token differs from one process's at step %d (rounding on a near-uniform random model); comparing the weights after %d updates", zero, flip, flip)
		}
		w := compareWeights(t, filepath.Join(ref, ckpt), filepath.Join(rd, ckpt))
		s := compareSteps(t, ref, rd, 1e-6, flip)
		t.Logf("zero_stage %d: weights (%s) max |Δ| = %g; steps rows max |Δ| = %g", zero, ckpt, w, s)
		if w > 1e-6 {
			t.Errorf("zero_stage %d: weights (%s) differ from one process by %g > 1e-6", zero, ckpt, w)
		}
		shards, _ := filepath.Glob(filepath.Join(rd, "checkpoints/step-000004/policy_optimizer*.safetensors"))
		want := 1
		if zero > 0 {
			want = 2
		}
		if len(shards) != want {
			t.Errorf("zero_stage %d: optimizer files %v, want %d", zero, shards, want)
		}
		assertNoVisiblePartial(t, rd)
	}

	// torchrun (torch 2.1.0's own launcher: an elastic agent hosts the
	// store, TORCHELASTIC_USE_AGENT_STORE) starts the same two ranks as
	// --nproc 2 does, and they compute the same run.
	tr := filepath.Join(dir, "torchrun")
	t0 = time.Now()
	trc := exec.Command(testutil.Python(t), "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
		"--no-python", e.bin, "run", "--config", e.dpConfig(t, dir, 2), "--run-dir", tr)
	if o, err := trc.CombinedOutput(); err != nil {
		t.Fatalf("torchrun: %v\n%s", err, o)
	}
	w := compareWeights(t, filepath.Join(runs[2], dpFinal), filepath.Join(tr, dpFinal))
	s := compareSteps(t, runs[2], tr, 0, -1)
	t.Logf("torchrun, 2 ranks, zero_stage 2 (%v) vs --nproc 2: weights max |Δ| = %g, steps max |Δ| = %g", time.Since(t0).Round(time.Millisecond), w, s)
	if w != 0 {
		t.Errorf("torchrun's run differs from --nproc 2's by %g", w)
	}
	assertNoVisiblePartial(t, tr)

	// Fault: rank 1 is SIGKILLed at its third update (step 2, after
	// checkpoint step-000002), at ZeRO-2 (sharded optimizer state and
	// gradients).
	crash := filepath.Join(dir, "crash")
	cmd := exec.Command(e.bin, "run", "--config", e.dpConfig(t, dir, 2), "--run-dir", crash, "--nproc", "2")
	cmd.Env = append(os.Environ(), "EVOLM_FAILPOINT_RANK1=update@3")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	t0 = time.Now()
	err := cmd.Run()
	took := time.Since(t0)
	t.Logf("killed rank 1: launcher exited after %v: %v", took.Round(time.Millisecond), err)
	if err == nil {
		t.Fatalf("the run survived rank 1's death:\n%s", out.String())
	}
	for _, want := range []string{"rank 1 failed first", "signal: killed", "data-parallel rank 0 of 2", "rank 1 died, failed or stalled"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	assertNoVisiblePartial(t, crash)
	if _, err := os.Stat(filepath.Join(crash, "checkpoints/step-000004")); err == nil {
		t.Errorf("the killed run has a final checkpoint")
	}
	steps := readTable(t, crash, schemas.Steps)
	if len(steps) != 2 {
		t.Errorf("the killed run committed %d steps rows, want 2 (steps 0, 1)", len(steps))
	}
	// A different world size cannot resume a sharded optimizer state.
	c1 := exec.Command(e.bin, "run", "--resume", crash)
	if o, err := c1.CombinedOutput(); err == nil || !strings.Contains(string(o), "written by 2 data-parallel ranks") {
		t.Errorf("resume with 1 process of a 2-rank zero_stage 2 checkpoint: %v\n%s", err, o)
	}
	run(t, e.bin, "run", "--resume", crash, "--nproc", "2")
	w = compareWeights(t, filepath.Join(runs[2], dpFinal), filepath.Join(crash, dpFinal))
	s = compareSteps(t, runs[2], crash, 0, -1)
	t.Logf("resumed vs uninterrupted (2 ranks, zero_stage 2): weights max |Δ| = %g, steps max |Δ| = %g", w, s)
	if w > 0 {
		t.Errorf("resumed 2-rank run's weights differ from the uninterrupted one by %g", w)
	}
}
