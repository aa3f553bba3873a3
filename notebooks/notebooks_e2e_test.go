//go:build e2e

package notebooks_test

import (
	"context"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/internal/testutil/synthrun"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/stages/analyze"
	"github.com/evolm/evolm/stages/eval"
	"github.com/evolm/evolm/stages/export"
)

// TestE2ENotebooks executes every notebook headless with nbconvert against a
// run directory and checks the figures it saves. The run is the synthetic
// test run (package synthrun) put through `evolm export` and `evolm
// analyze-rubrics`, with eval results scored from synthetic scores (test
// data); the demo run replaces it once the demo loop exists.
func TestE2ENotebooks(t *testing.T) {
	root := testutil.Root(t)
	run := filepath.Join(t.TempDir(), "synthetic-run")
	ctx := context.Background()
	if _, err := synthrun.Write(ctx, memory.NewGoAllocator(), run, synthrun.Options{Seed: 11, Steps: 12, Phase: 3}); err != nil {
		t.Fatal(err)
	}
	cfg, err := pipeline.LoadConfig(pipeline.LoadOptions{Env: []string{"EVOLM_RUN_DIR=" + run, "EVOLM_PIPELINE_PROGRESS=off", "EVOLM_STAGES_EVAL_INPUT=synthetic"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, stage := range []string{export.Name, analyze.Name} {
		if err := pipeline.RunStage(ctx, stage, cfg, pipeline.RunOptions{Stderr: &strings.Builder{}}); err != nil {
			t.Fatal(err)
		}
	}
	writeSyntheticEval(t, cfg)

	figs := filepath.Join(t.TempDir(), "figures")
	if d := os.Getenv("EVOLM_KEEP_FIGURES"); d != "" {
		figs = d // keep the figures to look at them
	}
	out := t.TempDir()
	nbs, _ := filepath.Glob(filepath.Join(root, "notebooks", "*.ipynb"))
	if len(nbs) != 3 {
		t.Fatalf("notebooks: %v", nbs)
	}
	for _, nb := range nbs {
		cmd := exec.Command(testutil.Python(t), "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute",
			"--ExecutePreprocessor.kernel_name=python3", "--ExecutePreprocessor.timeout=-1", "--output-dir", out, nb)
		cmd.Env = append(os.Environ(), "EVOLM_RUN_DIR="+run, "EVOLM_FIG_DIR="+figs, "MPLBACKEND=Agg")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("nbconvert %s: %v\n%s", filepath.Base(nb), err, b)
		}
	}
	for _, png := range []string{"reward_kl.png", "pair_strategies.png", "time_breakdown.png", "rubric_evolution.png", "format_rate.png", "eval_scores.png"} {
		st, err := os.Stat(filepath.Join(figs, png))
		if err != nil || st.Size() < 1000 {
			t.Errorf("figure %s: %v (size %v)", png, err, st)
		}
	}
}

// writeSyntheticEval scores made-up RewardBench-2 and JudgeBench results
// (test data) and writes them as `evolm eval` does.
func writeSyntheticEval(t *testing.T, cfg *pipeline.Config) {
	rng := rand.New(rand.NewPCG(3, 4))
	var rb2 []eval.RB2Scored
	for _, sub := range []string{"Factuality", "Precise IF", "Math", "Safety", "Focus"} {
		for i := 0; i < 20; i++ {
			rb2 = append(rb2, eval.RB2Scored{ID: sub + string(rune('a'+i)), Subset: sub, NumCorrect: 1,
				Scores: []float64{rng.Float64() + 0.2, rng.Float64(), rng.Float64(), rng.Float64()}})
		}
	}
	for i := 0; i < 10; i++ {
		id := string(rune('0' + i))
		rb2 = append(rb2, eval.RB2Scored{ID: "ref:" + id, Subset: "Ties", NumCorrect: 1, Scores: []float64{rng.Float64() + 0.5, rng.Float64(), rng.Float64()}},
			eval.RB2Scored{ID: "tied:" + id, Subset: "Ties", NumCorrect: 2, Scores: []float64{rng.Float64() + 0.5, rng.Float64() + 0.5, rng.Float64()}})
	}
	rep, err := eval.ScoreRewardBench2(rb2, eval.Bootstrap{Samples: 200, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	var jb []eval.JBScored
	for i, src := range []string{"mmlu-pro-law", "livebench-math", "livebench-reasoning", "livecodebench"} {
		for k := 0; k < 10; k++ {
			d := []eval.Decision{"A>B", "B>A", "A=B"}
			jb = append(jb, eval.JBScored{PairID: src + string(rune('a'+k)), Source: src, Label: "A>B",
				Original: d[(i+k)%3], Swapped: d[(i*k)%3]})
		}
	}
	jrep, err := eval.ScoreJudgeBench(jb, eval.Bootstrap{Samples: 200, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	env, err := pipeline.NewEnv(eval.Name, cfg, pipeline.RunOptions{Stderr: &strings.Builder{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := eval.WriteReports(context.Background(), env, nil, rep, jrep); err != nil {
		t.Fatal(err)
	}
}
