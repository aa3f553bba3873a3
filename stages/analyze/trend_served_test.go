package analyze_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
	_ "github.com/evolm/evolm/serving/openai"
	"github.com/evolm/evolm/stages/analyze"
)

// fakeRubricServer is a TEST DOUBLE of an OpenAI-compatible server hosting
// a rubric generator: a request whose question mentions "reject" is refused
// (HTTP 400, a row failure), one that mentions "long" is cut at max_tokens,
// and every other gets a rubric chosen by the question. Each answer has one
// token's log-prob, so it counts one completion token.
func fakeRubricServer(t *testing.T) *httptest.Server {
	rubrics := map[string]string{
		"sky":   `{"criteria": [{"criterion": "Mentions Rayleigh scattering of sunlight by air molecules", "weight": 1.0}]}`,
		"prime": `{"criteria": [{"criterion": "Correctness", "weight": 0.5}, {"criterion": "Must not exceed 20 words", "weight": 0.5}]}`,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model    string `json:"model"`
			Messages []struct {
				Content string `json:"content"`
			} `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		q := req.Messages[len(req.Messages)-1].Content
		if strings.Contains(q, "reject") {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"object":"error","message":"prompt too long","type":"BadRequestError","code":400}`)
			return
		}
		text, finish := "Clarity", "stop"
		for k, v := range rubrics {
			if strings.Contains(q, k) {
				text = v
			}
		}
		if strings.Contains(q, "long") {
			text, finish = "1. Mentions the", "length"
		}
		resp := map[string]any{"id": "x", "object": "chat.completion", "model": req.Model,
			"usage": map[string]int{"prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 14},
			"choices": []any{map[string]any{"index": 0, "finish_reason": finish,
				"message":  map[string]string{"role": "assistant", "content": text},
				"logprobs": map[string]any{"content": []any{map[string]any{"token": "x", "logprob": -0.5, "bytes": []int{120}, "top_logprobs": []any{}}}}}}}
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(resp); err != nil {
			t.Error(err)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// The trend stage against a served rubric generator (a test double): its
// trend_rubrics rows, read through schemas.TrendRubrics, hold each rubric
// with its official statistics and its failure; rubric_trend, read through
// schemas.RubricTrend, holds each checkpoint's summary as ReadTrend
// computes it, its failed and truncated rubrics counted.
func TestTrendServed(t *testing.T) {
	srv := fakeRubricServer(t)
	dir := t.TempDir()
	prompts := filepath.Join(dir, "prompts.jsonl")
	if err := os.WriteFile(prompts, []byte(`{"id": "sky", "question": "Why is the sky blue?"}
{"id": "prime", "question": "Name a prime."}
{"id": "reject", "question": "Please reject this."}
{"id": "long", "question": "Write a long essay."}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	run := filepath.Join(dir, "run")
	ckpts := []string{"ckpt/step-000010", "served-model"}
	cfg, err := pipeline.LoadConfig(pipeline.LoadOptions{Env: []string{"EVOLM_RUN_DIR=" + run, "EVOLM_PIPELINE_PROGRESS=off",
		"EVOLM_ROLES_POLICY_BACKEND=openai", "EVOLM_ROLES_POLICY_MODEL=unused", "EVOLM_ROLES_POLICY_ENDPOINTS=" + srv.URL + "/v1",
		"EVOLM_ROLES_POLICY_MAX_ATTEMPTS=1", "EVOLM_STAGES_ANALYZE_TREND_CHECKPOINTS=" + strings.Join(ckpts, ","),
		"EVOLM_STAGES_ANALYZE_TREND_PROMPTS=" + prompts, "EVOLM_STAGES_ANALYZE_TREND_ORDER=" + analyze.OrderFile}})
	if err != nil {
		t.Fatal(err)
	}
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	if err := pipeline.RunStage(context.Background(), analyze.TrendName, cfg, pipeline.RunOptions{Mem: mem, Stderr: &strings.Builder{},
		Log: slog.New(slog.DiscardHandler)}); err != nil {
		t.Fatal(err)
	}

	var shards []string
	for k, ckpt := range ckpts {
		shard := filepath.Join(run, analyze.TrendRubricsTable, fmt.Sprintf("ckpt_index=%03d", k), "part-00000.parquet")
		shards = append(shards, shard)
		rows := readTable(t, schemas.TrendRubrics, shard)
		if len(rows) != 4 {
			t.Fatalf("%s: %d rows, want 4", shard, len(rows))
		}
		for i, r := range rows {
			if r.CkptIndex != int64(k) || r.Checkpoint != ckpt || r.Step != analyze.CheckpointStep(ckpt) || r.PromptIndex != int64(i) {
				t.Errorf("%s row %d: checkpoint %d %q step %d prompt %d", shard, i, r.CkptIndex, r.Checkpoint, r.Step, r.PromptIndex)
			}
			st := analyze.OfficialRubricStats(r.RawText)
			got := analyze.OfficialRubric{Criteria: int(r.CriteriaCount), AvgCriterionLen: r.AvgCriterionLen,
				LabelOnlyPct: r.LabelOnlyPct, SpecificPct: r.SpecificPct, ConstraintPct: r.ConstraintPct}
			if got != st {
				t.Errorf("%s row %d (%q): statistics %+v, want %+v", shard, i, r.RawText, got, st)
			}
			switch r.PromptID {
			case "reject":
				if r.Error == nil || !strings.Contains(*r.Error, "prompt too long") || r.FinishReason != "error" {
					t.Errorf("%s: the refused request's row has error %v, finish %q", shard, r.Error, r.FinishReason)
				}
			case "long":
				if r.Error != nil || r.FinishReason != "length" {
					t.Errorf("%s: the truncated row has error %v, finish %q", shard, r.Error, r.FinishReason)
				}
			default:
				if r.Error != nil || r.FinishReason != "stop" || r.CriteriaCount == 0 || r.CompletionTokens != 1 {
					t.Errorf("%s: row %+v", shard, r)
				}
			}
		}
	}
	want, err := analyze.ReadTrend(context.Background(), mem, shards)
	if err != nil {
		t.Fatal(err)
	}
	if len(want) != 2 || want[0].Step != 10 || want[1].Step != -1 {
		t.Fatalf("ReadTrend: %+v", want)
	}
	var wantRows []schemas.RubricTrendRow
	for i := range want {
		if want[i].Failed != 1 || want[i].Truncated != 1 || want[i].Rubrics != 4 || want[i].Prompts != 4 {
			t.Errorf("checkpoint %s: %d failed, %d truncated, %d rubrics of %d prompts; want 1, 1, 4, 4",
				want[i].Checkpoint, want[i].Failed, want[i].Truncated, want[i].Rubrics, want[i].Prompts)
		}
		wantRows = append(wantRows, want[i].Row())
	}
	got := readTable(t, schemas.RubricTrend, filepath.Join(run, analyze.TrendTable, "part-00000.parquet"))
	if d := cmp.Diff(wantRows, got); d != "" {
		t.Errorf("rubric_trend (-ReadTrend +table):\n%s", d)
	}
}

// readTable reads every row of a shard through tbl.
func readTable[T any](t *testing.T, tbl *schemas.Table[T], path string) []T {
	t.Helper()
	var out []T
	for rec, err := range pipeline.ReadShard(context.Background(), path, pipeline.ReadOptions{Schema: tbl.Schema()}) {
		if err != nil {
			t.Fatal(err)
		}
		rows, err := tbl.Read(rec)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rows...)
	}
	return out
}
