package judge

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/pipeline/pipelinetest"
	"github.com/evolm/evolm/schemas"
)

// chatDouble is a TEST DOUBLE of an OpenAI-compatible chat server whose
// every reply is a generative judge's verdict of 0.5.
func chatDouble() *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model string `json:"model"`
		}
		json.NewDecoder(r.Body).Decode(&req)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"x","object":"chat.completion","model":%q,"choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"{\"reasoning\": \"ok\", \"score\": 0.5}"}}],"usage":{"prompt_tokens":9,"completion_tokens":5,"total_tokens":14}}`, req.Model)
	}))
}

// The judge stage judges under a rubric that fails R_format by its raw text
// (invalid_rubric raw_text, the loop's rule); with skip, every score is
// missing and the stage warns with the share and the commonest reason.
func TestJudgeStageUnparsedRubrics(t *testing.T) {
	srv := chatDouble()
	defer srv.Close()
	dir := t.TempDir()
	mem := memory.NewGoAllocator()
	prompts := []schemas.Prompt{{PromptID: "q1", Prompt: "Q1?"}, {PromptID: "q2", Prompt: "Q2?"}}
	var rolls []schemas.Rollout
	var rubs []schemas.Rubric
	for _, p := range prompts {
		for k := range 2 {
			rolls = append(rolls, schemas.Rollout{RolloutID: fmt.Sprintf("%s/%d", p.PromptID, k), PromptID: p.PromptID, Role: schemas.RolePolicy,
				Phase: schemas.PhasePolicy, Text: "an answer", FinishReason: "stop", Model: "m", Checkpoint: "initial"})
		}
		perr := "no JSON object"
		rubs = append(rubs, schemas.Rubric{RubricID: "rub-" + p.PromptID, ItemID: p.PromptID, Phase: schemas.PhasePolicy, RolloutID: p.PromptID + "/g",
			RawText: "Be helpful and correct.", Criteria: []schemas.Criterion{}, ParseError: &perr})
	}
	in := func(name string) string { return filepath.Join(dir, name+".parquet") }
	pipelinetest.WriteRows(t, mem, in("prompts"), schemas.Prompts, prompts)
	pipelinetest.WriteRows(t, mem, in("rollouts"), schemas.Rollouts, rolls)
	pipelinetest.WriteRows(t, mem, in("rubrics"), schemas.Rubrics, rubs)
	run := func(policy string) ([]schemas.Judgment, string) {
		t.Helper()
		runDir := filepath.Join(dir, "run-"+policy)
		cfg, err := pipeline.LoadConfig(pipeline.LoadOptions{Env: []string{"EVOLM_RUN_DIR=" + runDir, "EVOLM_PIPELINE_PROGRESS=off",
			"EVOLM_STAGES_JUDGE_RESPONSES=" + in("rollouts"), "EVOLM_STAGES_JUDGE_RUBRICS=" + in("rubrics"), "EVOLM_STAGES_JUDGE_PROMPTS=" + in("prompts"),
			"EVOLM_STAGES_JUDGE_INVALID_RUBRIC=" + policy,
			"EVOLM_ROLES_JUDGE_BACKEND=openai", "EVOLM_ROLES_JUDGE_MODEL=judge", "EVOLM_ROLES_JUDGE_ENDPOINTS=" + srv.URL + "/v1",
			"EVOLM_ROLES_JUDGE_MODE=generative", "EVOLM_ROLES_JUDGE_MAX_ATTEMPTS=1"}})
		if err != nil {
			t.Fatal(err)
		}
		var log bytes.Buffer
		err = pipeline.RunStage(context.Background(), Name, cfg, pipeline.RunOptions{Log: slog.New(slog.NewTextHandler(&log, nil)), Stderr: &strings.Builder{}})
		if err != nil {
			t.Fatalf("invalid_rubric %s: %v\n%s", policy, err, log.String())
		}
		r, m := pipelinetest.Manifest(t, runDir, Name)
		var js []schemas.Judgment
		for _, p := range m.Paths(schemas.Judgments.Name) {
			js = append(js, pipelinetest.ReadRows(t, r.Path(p), schemas.Judgments, pipeline.ReadOptions{Schema: schemas.Judgments.Schema()})...)
		}
		return js, log.String()
	}
	js, log := run("raw_text")
	for _, j := range js {
		if j.Score == nil || *j.Score != 0.5 {
			t.Errorf("raw_text: %s scored %v (%v), want 0.5 under the rubric's text", j.JudgmentID, j.Score, j.ScoreMissingReason)
		}
	}
	if len(js) != 4 || strings.Contains(log, "MANY SCORES MISSING") {
		t.Errorf("raw_text: %d judgments, log:\n%s", len(js), log)
	}
	js, log = run("skip")
	if len(js) != 4 || js[0].Score != nil {
		t.Fatalf("skip: %d judgments, first %+v", len(js), js[0])
	}
	for _, want := range []string{"MANY SCORES MISSING: 4 of 4 judgments (100.0%) have no score", "commonest reason: empty_rubric (4 rows"} {
		if !strings.Contains(log, want) {
			t.Errorf("skip: log lacks %q:\n%s", want, log)
		}
	}
}
