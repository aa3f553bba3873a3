package run

import (
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/evolm/evolm/internal/testutil"

	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/serving/backend"
)

// wallTimeFields are the steps columns that measure wall time: a resumed or
// data-parallel run recomputes every other column exactly.
var wallTimeFields = []string{"ElapsedS", "TokensPerS", "TimeGenerationS", "TimeRubricsS", "TimeJudgeS", "TimeRefLogprobsS",
	"TimeLearnerS", "TimeWeightSyncS", "TimeWritesS", "TimeCheckpointS", "TimeOtherS"}

// withoutWallTimes is m with its wall-time columns zeroed.
func withoutWallTimes(m schemas.StepMetrics) schemas.StepMetrics {
	v := reflect.ValueOf(&m).Elem()
	for _, f := range wallTimeFields {
		v.FieldByName(f).SetFloat(0)
	}
	return m
}

// TestStepClock: a window's parts and remainder sum to its elapsed time,
// a train step's reference time is split off the learner's, and the next
// window starts where the last one ended.
func TestStepClock(t *testing.T) {
	var c stepClock
	c.begin()
	c.add(partGeneration, 30*time.Millisecond)
	c.train(20*time.Millisecond, backend.TrainStats{RefTime: 5 * time.Millisecond})
	c.tokens = 100
	time.Sleep(60 * time.Millisecond)
	var m schemas.StepMetrics
	c.finish(&m)
	sum := m.TimeGenerationS + m.TimeRubricsS + m.TimeJudgeS + m.TimeRefLogprobsS + m.TimeLearnerS + m.TimeWeightSyncS +
		m.TimeWritesS + m.TimeCheckpointS + m.TimeOtherS
	if d := sum - m.ElapsedS; d > 1e-9 || d < -1e-9 {
		t.Errorf("parts sum to %v, elapsed %v", sum, m.ElapsedS)
	}
	if m.TimeRefLogprobsS != 0.005 || m.TimeLearnerS != 0.015 || m.TimeGenerationS != 0.03 || m.TimeOtherS <= 0 {
		t.Errorf("breakdown %+v", m)
	}
	if m.TokensPerS != 100/m.ElapsedS {
		t.Errorf("tokens/s %v", m.TokensPerS)
	}
	if c.tokens != 0 || c.parts != [nParts]time.Duration{} || time.Since(c.mark) > time.Second {
		t.Errorf("the next window did not start afresh: %+v", c)
	}
	if z := withoutWallTimes(m); z.ElapsedS != 0 || z.TimeOtherS != 0 || z.TokensPerS != 0 {
		t.Errorf("withoutWallTimes left %+v", z)
	}
}

// TestQuantile: linear interpolation between order statistics, numpy's
// default (np.quantile([1, 2, 3, 4], [0.5, 0.95]) = [2.5, 3.85]).
func TestQuantile(t *testing.T) {
	xs := []float64{4, 1, 3, 2}
	if got := quantile(xs, 0.5); got != 2.5 {
		t.Errorf("p50 = %v", got)
	}
	if got := quantile(xs, 0.95); got < 3.85-1e-12 || got > 3.85+1e-12 {
		t.Errorf("p95 = %v", got)
	}
	if quantile(nil, 0.5) != 0 || quantile([]float64{7}, 0.95) != 7 {
		t.Error("empty or single")
	}
	if xs[0] != 4 {
		t.Error("quantile sorted its input")
	}
}

// checkOneTracker checks that a data-parallel run's TensorBoard directory
// holds one event file (rank 0's) whose scalars, read with TensorBoard's
// EventAccumulator, are the steps table's, each step once.
func checkOneTracker(t *testing.T, run string) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(run, "tensorboard", "events.out.tfevents.*"))
	if len(files) != 1 {
		t.Fatalf("tensorboard event files %v, want rank 0's alone", files)
	}
	out, err := exec.Command(testutil.Python(t), filepath.Join(testutil.Root(t), "scripts", "tracker_check.py"), run,
		"--tensorboard", filepath.Join(run, "tensorboard")).CombinedOutput()
	if err != nil {
		t.Fatalf("tracker_check.py: %v\n%s", err, out)
	}
}
