package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/internal/testutil/synthrun"
	"github.com/evolm/evolm/pipeline"
)

// Every stage that calls a model fails (an error, so a non-zero exit) when
// every request failed on its backend, here a server that answers 404
// ("model does not exist") to everything: rollout, rubrics, judge, eval,
// replay and analyze trend. (The loop's case is stages/run's
// TestE2EAllFailedJudgeStopsTheRun.)
func TestEveryModelStageFailsWhenEveryRequestFails(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"object":"error","message":"The model gone-model does not exist.","type":"NotFoundError","code":404}`)
	}))
	defer srv.Close()
	dir := t.TempDir()
	src := filepath.Join(dir, "source")
	if _, err := synthrun.Write(context.Background(), memory.NewGoAllocator(), src, synthrun.Options{Seed: 2, Steps: 4}); err != nil {
		t.Fatal(err)
	}
	rb2 := filepath.Join(dir, "rb2.jsonl")
	if err := os.WriteFile(rb2, []byte(testutil.RewardBench2Small), 0o644); err != nil {
		t.Fatal(err)
	}
	glob := func(table string, parts ...string) string {
		return filepath.Join(append(append([]string{src, table}, parts...), "*.parquet")...)
	}
	served := func(role string) []string {
		r := strings.ToUpper(role)
		return []string{"EVOLM_ROLES_" + r + "_BACKEND=openai", "EVOLM_ROLES_" + r + "_MODEL=gone-model",
			"EVOLM_ROLES_" + r + "_ENDPOINTS=" + srv.URL + "/v1", "EVOLM_ROLES_" + r + "_MAX_ATTEMPTS=1"}
	}
	policyJudge := append(served("policy"), served("judge")...)
	for _, tc := range []struct {
		stage string
		env   []string
	}{
		{"rollout", append(served("policy"), "EVOLM_STAGES_ROLLOUT_INPUT="+glob("prompts"))},
		{"rubrics", append(served("policy"), "EVOLM_STAGES_RUBRICS_INPUT="+glob("prompts"))},
		{"judge", append(served("judge"), "EVOLM_STAGES_JUDGE_RESPONSES="+glob("rollouts", "phase=policy", "step=0", "role=policy"),
			"EVOLM_STAGES_JUDGE_RUBRICS="+glob("rubrics", "phase=policy", "step=0"), "EVOLM_STAGES_JUDGE_PROMPTS="+glob("prompts"))},
		{"eval", append(policyJudge, "EVOLM_STAGES_EVAL_INPUT="+rb2, "EVOLM_STAGES_EVAL_BOOTSTRAP_SAMPLES=10")},
		{"replay", append(served("judge"), "EVOLM_STAGES_REPLAY_SOURCE="+src)},
		{"analyze-trend", append(served("policy"), "EVOLM_STAGES_ANALYZE_TREND_CHECKPOINTS=gone-model",
			"EVOLM_STAGES_ANALYZE_TREND_PROMPTS="+glob("prompts"), "EVOLM_STAGES_ANALYZE_TREND_LIMIT=3")},
	} {
		t.Run(tc.stage, func(t *testing.T) {
			run := filepath.Join(dir, "run-"+tc.stage)
			cfg, err := pipeline.LoadConfig(pipeline.LoadOptions{Env: append([]string{"EVOLM_RUN_DIR=" + run, "EVOLM_PIPELINE_PROGRESS=off"}, tc.env...)})
			if err != nil {
				t.Fatal(err)
			}
			err = pipeline.RunStage(context.Background(), tc.stage, cfg, pipeline.RunOptions{Log: slog.New(slog.DiscardHandler), Stderr: &strings.Builder{}})
			if err == nil {
				t.Fatalf("%s succeeded with every request failing", tc.stage)
			}
			if !errors.Is(err, pipeline.ErrAllRowsFailed) && !strings.Contains(err.Error(), "does not exist") {
				t.Errorf("%s: %v, want an error saying every request failed, with the server's message", tc.stage, err)
			}
		})
	}
}
