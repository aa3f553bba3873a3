//go:build e2e

package notebooks_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/evolm/evolm/internal/testutil"
)

// TestE2EDemoRun makes a demo run with the co-evolution loop (two tiny
// checkpoints, the sample prompts, the loop e2e's schedule), then runs what
// a researcher runs on it through the CLI: export, analyze rubrics, eval (a
// small RewardBench-2 file), every notebook headless, and replay with the
// run's own judge (it must reproduce the run's judgments exactly, yes/no
// scoring being deterministic) and with a second tiny judge. The source run
// must stay byte-identical through the replays.
func TestE2EDemoRun(t *testing.T) {
	root := testutil.Root(t)
	tmp := t.TempDir()
	bin := testutil.BuildEvolm(t, tmp)
	env := append(os.Environ(), "EVOLM_ROOT="+root)
	evolm := func(extra []string, args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = append(append([]string{}, env...), extra...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("evolm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	models := filepath.Join(tmp, "models")
	for i, name := range []string{"policy", "judge", "judge2"} {
		evolm(nil, "model", "init", "--arch", "qwen3", "--preset", "tiny", "--seed", fmt.Sprint(i+1), "--out", filepath.Join(models, name))
	}
	dd := filepath.Join(tmp, "dedup")
	evolm(nil, "dedup", "--run-dir", dd, "--input", filepath.Join(root, "datasets/sample/tulu3_sample.parquet"), "--progress", "off", "--log-level", "warn")
	prompts, _ := filepath.Glob(filepath.Join(dd, "prompts", "*.parquet"))
	if len(prompts) == 0 {
		t.Fatal("dedup wrote no prompts")
	}
	// The shipped demo preset, with its model and data paths pointed here and
	// the run cut to 6 steps (policy, policy, rubric, rubric, policy, policy).
	// It reports to TensorBoard too, and its log (info level) times the steps.
	run := filepath.Join(tmp, "demo-run")
	runLog := evolm(nil, "run", "--config", filepath.Join(root, "stages", "presets", "demo.yaml"), "--run-dir", run,
		"--input", strings.Join(prompts, ","), "--policy-model", filepath.Join(models, "policy"),
		"--judge-model", filepath.Join(models, "judge"), "--steps", "6", "--progress", "off", "--log-level", "info",
		"--trackers", "console,tensorboard")
	checkTrackersAndTiming(t, tmp, run, runLog)

	quiet := []string{"--progress", "off", "--log-level", "warn"}
	evolm(nil, append([]string{"export", "--run-dir", run}, quiet...)...)
	out := evolm(nil, append([]string{"analyze", "rubrics", "--run-dir", run, "--definitions", "evolm"}, quiet...)...)
	if !strings.Contains(out, "abstract%") {
		t.Errorf("analyze rubrics printed no table:\n%s", out)
	}
	rb2 := filepath.Join(tmp, "rb2.jsonl")
	if err := os.WriteFile(rb2, []byte(testutil.RewardBench2Small), 0o644); err != nil {
		t.Fatal(err)
	}
	out = evolm([]string{"EVOLM_ROLES_POLICY_MODEL=" + filepath.Join(models, "policy"), "EVOLM_ROLES_RUBRIC_GENERATOR_MAX_TOKENS=24",
		"EVOLM_ROLES_JUDGE_MODEL=" + filepath.Join(models, "judge"), "EVOLM_ROLES_JUDGE_MODE=yesno"},
		append([]string{"eval", "--run-dir", run, "--benchmark", "rewardbench2", "--input", rb2, "--bootstrap-samples", "100"}, quiet...)...)
	if !strings.Contains(out, "mean_of_subsets") {
		t.Errorf("eval printed no overall row:\n%s", out)
	}

	figs := filepath.Join(tmp, "figures")
	nbs, _ := filepath.Glob(filepath.Join(root, "notebooks", "*.ipynb"))
	for _, nb := range nbs {
		cmd := exec.Command(testutil.Python(t), "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute",
			"--ExecutePreprocessor.kernel_name=python3", "--ExecutePreprocessor.timeout=-1", "--output-dir", filepath.Join(tmp, "nb"), nb)
		cmd.Env = append(os.Environ(), "EVOLM_RUN_DIR="+run, "EVOLM_FIG_DIR="+figs, "MPLBACKEND=Agg")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("nbconvert %s: %v\n%s", filepath.Base(nb), err, b)
		}
	}
	for _, png := range []string{"reward_kl.png", "pair_strategies.png", "time_breakdown.png", "rubric_evolution.png", "format_rate.png", "eval_scores.png"} {
		if st, err := os.Stat(filepath.Join(figs, png)); err != nil || st.Size() < 1000 {
			t.Errorf("figure %s: %v", png, err)
		}
	}

	before := testutil.TreeHash(t, run)
	same := filepath.Join(tmp, "replay-same-judge")
	yesno := []string{"EVOLM_ROLES_JUDGE_MODE=yesno"}
	evolm(yesno, append([]string{"replay", "--run-dir", same, "--source", run, "--judge-model", filepath.Join(models, "judge")}, quiet...)...)
	other := filepath.Join(tmp, "replay-judge2")
	out = evolm(yesno, append([]string{"replay", "--run-dir", other, "--source", run, "--judge-model", filepath.Join(models, "judge2")}, quiet...)...)
	if !strings.Contains(out, "overall") {
		t.Errorf("replay printed no table:\n%s", out)
	}
	if testutil.TreeHash(t, run) != before {
		t.Fatal("the source run changed during replay")
	}
	// The run's own judge reproduces the run's rubric-phase judgments.
	check := `
import sys, duckdb
run, rep = sys.argv[1], sys.argv[2]
n, diff, missing = duckdb.sql(f"""
  select count(*), max(abs(a.score - b.score)), count(*) filter (where b.score is null)
  from read_parquet('{run}/judgments/phase=rubric/*/*.parquet') a
  join read_parquet('{rep}/judgments/phase=rubric/*/*.parquet') b using (judgment_id)""").fetchone()
total = duckdb.sql(f"select count(*) from read_parquet('{run}/judgments/phase=rubric/*/*.parquet')").fetchone()[0]
if n == 0 or n != total or missing or diff is None or diff > 1e-6:
    sys.exit(f"replay with the same judge: {n} of {total} judgments matched, {missing} missing, max |diff| {diff}")
print(n, diff)
`
	script := filepath.Join(tmp, "same_judge.py")
	if err := os.WriteFile(script, []byte(check), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("same judge: %s", testutil.RunPython(t, script, run, same))
}

// checkTrackersAndTiming reads the demo run's TensorBoard files back with
// TensorBoard's EventAccumulator (every steps column at every step equal to
// the steps table, scripts/tracker_check.py) and checks its time breakdown
// against its log: the parts of each step sum to the step, and the steps'
// times add up to the log's own clock. It logs the remainder's share, the
// loop's own overhead.
func checkTrackersAndTiming(t *testing.T, tmp, run, runLog string) {
	t.Helper()
	logPath := filepath.Join(tmp, "run.log")
	if err := os.WriteFile(logPath, []byte(runLog), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(testutil.Python(t), filepath.Join(testutil.Root(t), "scripts", "tracker_check.py"), run,
		"--tensorboard", filepath.Join(run, "tensorboard"), "--timing", logPath)
	out, err := cmd.Output()
	var rep map[string]struct {
		Steps      int                `json:"steps"`
		Tags       int                `json:"tags"`
		Problems   []string           `json:"problems"`
		OtherShare float64            `json:"other_share"`
		MaxOther   float64            `json:"max_other_share"`
		Elapsed    float64            `json:"elapsed_s"`
		Parts      map[string]float64 `json:"parts_s"`
	}
	if jerr := json.Unmarshal(out, &rep); jerr != nil || err != nil {
		t.Fatalf("tracker_check.py: %v %v\n%s", err, jerr, out)
	}
	tb, tm := rep["tensorboard"], rep["timing"]
	if tb.Steps != 6 || tb.Tags < 30 || tm.Steps != 6 {
		t.Errorf("tensorboard: %d steps, %d tags; timing: %d steps", tb.Steps, tb.Tags, tm.Steps)
	}
	t.Logf("demo time breakdown over %.1f s: %v; remainder %.4f%% of the steps' time (largest step %.4f%%)",
		tm.Elapsed, tm.Parts, 100*tm.OtherShare, 100*tm.MaxOther)
}
