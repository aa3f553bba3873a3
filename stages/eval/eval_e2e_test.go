//go:build e2e

package eval_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/model/modeltest"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
	_ "github.com/evolm/evolm/serving/openai"
	_ "github.com/evolm/evolm/serving/torchbe"
	"github.com/evolm/evolm/stages/eval"
)

const jbJSONL = `{"pair_id": "p1", "original_id": 1, "source": "mmlu-pro-law", "question": "2+2?", "response_model": "m", "response_A": "4", "response_B": "5", "label": "A>B"}
{"pair_id": "p2", "original_id": 2, "source": "livebench-math", "question": "3+3?", "response_model": "m", "response_A": "7", "response_B": "6", "label": "B>A"}
`

// TestE2EEvalTinyModels runs `evolm eval` end to end with a tiny random
// checkpoint as both rubric generator and judge (yes/no mode) on small
// benchmark files in the published layouts: it checks the wiring (rubric →
// judge → scoring → Parquet), not the scores, which are noise.
func TestE2EEvalTinyModels(t *testing.T) {
	dir := t.TempDir()
	ckpt := filepath.Join(dir, "tiny")
	modeltest.InitTiny(t, ckpt, 3)
	for _, tc := range []struct {
		bench, file, data string
		items             int
	}{
		{eval.BenchRewardBench2, "rb2.jsonl", testutil.RewardBench2Small, 7},
		{eval.BenchJudgeBench, "jb.jsonl", jbJSONL, 2},
	} {
		in := filepath.Join(dir, tc.file)
		if err := os.WriteFile(in, []byte(tc.data), 0o644); err != nil {
			t.Fatal(err)
		}
		run := filepath.Join(dir, "run-"+tc.bench)
		cfg, err := pipeline.LoadConfig(pipeline.LoadOptions{Env: []string{
			"EVOLM_RUN_DIR=" + run, "EVOLM_PIPELINE_PROGRESS=off",
			"EVOLM_STAGES_EVAL_BENCHMARK=" + tc.bench, "EVOLM_STAGES_EVAL_INPUT=" + in, "EVOLM_STAGES_EVAL_BOOTSTRAP_SAMPLES=50",
			"EVOLM_ROLES_POLICY_MODEL=" + ckpt, "EVOLM_ROLES_RUBRIC_GENERATOR_MAX_TOKENS=24",
			"EVOLM_ROLES_JUDGE_MODEL=" + ckpt, "EVOLM_ROLES_JUDGE_MODE=yesno",
		}})
		if err != nil {
			t.Fatal(err)
		}
		mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
		var stderr strings.Builder
		if err := pipeline.RunStage(context.Background(), eval.Name, cfg, pipeline.RunOptions{Mem: mem, Stderr: &stderr}); err != nil {
			t.Fatal(err)
		}
		mem.AssertSize(t, 0)
		if !strings.Contains(stderr.String(), "overall") {
			t.Errorf("%s: no table printed:\n%s", tc.bench, stderr.String())
		}
		items, err := filepath.Glob(filepath.Join(run, eval.ItemsTable, "*.parquet"))
		if err != nil || len(items) != 1 {
			t.Fatalf("%s: eval_items %v %v", tc.bench, items, err)
		}
		n, err := pipeline.CountRows(items...)
		if err != nil || n != int64(tc.items) {
			t.Errorf("%s: %d item rows (%v), want %d", tc.bench, n, err, tc.items)
		}
		js, _ := filepath.Glob(filepath.Join(run, eval.JudgmentsTable, "*.parquet"))
		if nj, err := pipeline.CountRows(js...); err != nil || nj == 0 {
			t.Errorf("%s: %d eval_judgments rows (%v)", tc.bench, nj, err)
		}
		res, _ := filepath.Glob(filepath.Join(run, eval.ResultsTable, "*.parquet"))
		for rec, err := range pipeline.ReadShard(context.Background(), res[0], pipeline.ReadOptions{Schema: eval.ResultsSchema}) {
			if err != nil {
				t.Fatal(err)
			}
			rows, err := schemas.EvalResults.Read(rec)
			if err != nil {
				t.Fatal(err)
			}
			if last := rows[len(rows)-1]; last.Subset != eval.Overall || last.Benchmark != tc.bench {
				t.Errorf("%s: last row %s %q, want %s overall", tc.bench, last.Benchmark, last.Subset, tc.bench)
			}
		}
		t.Logf("%s:\n%s", tc.bench, stderr.String())
	}
}

// TestE2EEvalJudgeAllFailed: a judge server that rejects every request (a
// model id it does not serve: HTTP 404) fails the eval with the server's
// reason, instead of printing a table of ties and exiting 0.
func TestE2EEvalJudgeAllFailed(t *testing.T) {
	dir := t.TempDir()
	ckpt := filepath.Join(dir, "tiny")
	modeltest.InitTiny(t, ckpt, 3)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"error":{"message":"the model \"Qwen/Qwen3-1.7B\" does not exist; this server serves \"Qwen3-1.7B\"","type":"invalid_request_error"}}`)
	}))
	defer srv.Close()
	in := filepath.Join(dir, "rb2.jsonl")
	if err := os.WriteFile(in, []byte(testutil.RewardBench2Small), 0o644); err != nil {
		t.Fatal(err)
	}
	run := filepath.Join(dir, "run")
	cfg, err := pipeline.LoadConfig(pipeline.LoadOptions{Env: []string{
		"EVOLM_RUN_DIR=" + run, "EVOLM_PIPELINE_PROGRESS=off", "EVOLM_STAGES_EVAL_LIMIT=2",
		"EVOLM_STAGES_EVAL_INPUT=" + in, "EVOLM_STAGES_EVAL_BOOTSTRAP_SAMPLES=10",
		"EVOLM_ROLES_POLICY_MODEL=" + ckpt, "EVOLM_ROLES_RUBRIC_GENERATOR_MAX_TOKENS=8",
		"EVOLM_ROLES_JUDGE_BACKEND=openai", "EVOLM_ROLES_JUDGE_MODEL=Qwen/Qwen3-1.7B", "EVOLM_ROLES_JUDGE_ENDPOINTS=" + srv.URL + "/v1",
		"EVOLM_ROLES_JUDGE_MAX_ATTEMPTS=1", "EVOLM_ROLES_JUDGE_MAX_TOKENS=8",
	}})
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	err = pipeline.RunStage(context.Background(), eval.Name, cfg, pipeline.RunOptions{Stderr: &stderr})
	if !errors.Is(err, pipeline.ErrAllRowsFailed) || !strings.Contains(err.Error(), "this server serves") {
		t.Fatalf("eval against a judge that rejects every request: err = %v\n%s", err, stderr.String())
	}
	if strings.Contains(stderr.String(), "overall") {
		t.Errorf("a table was printed:\n%s", stderr.String())
	}
	if res, _ := filepath.Glob(filepath.Join(run, eval.ResultsTable, "*.parquet")); len(res) != 0 {
		t.Errorf("eval_results committed: %v", res)
	}
}
