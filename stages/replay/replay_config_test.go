package replay_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/internal/testutil/synthrun"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/pipeline/pipelinetest"
	"github.com/evolm/evolm/schemas"
	_ "github.com/evolm/evolm/serving/openai"
	"github.com/evolm/evolm/stages/replay"
)

// fakeJudge is a TEST DOUBLE of an OpenAI-compatible server hosting a
// generative judge: each chat request gets a verdict whose score is a hash
// of its last message (so a+ and a− differ), or, when missing says so for
// that hash, a reply with no score; fail answers HTTP 404 to everything.
type fakeJudge struct {
	missing func(h uint32) bool
	fail    bool
	calls   atomic.Int64
}

func (f *fakeJudge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.calls.Add(1)
	if f.fail {
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"object":"error","message":"The model does not exist.","type":"NotFoundError","code":404}`)
		return
	}
	var req struct {
		Model    string `json:"model"`
		N        *int   `json:"n"`
		Messages []struct {
			Content string `json:"content"`
		} `json:"messages"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	h := fnv.New32a()
	h.Write([]byte(req.Messages[len(req.Messages)-1].Content))
	sum := h.Sum32()
	text := fmt.Sprintf(`{"reasoning": "fake", "score": %.3f}`, float64(sum%1000)/1000)
	if f.missing != nil && f.missing(sum) {
		text = "no verdict"
	}
	n := 1
	if req.N != nil {
		n = *req.N
	}
	type choice struct {
		Index        int               `json:"index"`
		Message      map[string]string `json:"message"`
		FinishReason string            `json:"finish_reason"`
	}
	resp := map[string]any{"id": "x", "object": "chat.completion", "model": req.Model,
		"usage": map[string]int{"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}
	var cs []choice
	for i := range n {
		cs = append(cs, choice{Index: i, Message: map[string]string{"role": "assistant", "content": text}, FinishReason: "stop"})
	}
	resp["choices"] = cs
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(resp)
}

// judgeSource writes a synthetic source run whose saved config.yaml names
// the judge at url, and returns it.
func judgeSource(t *testing.T, url string) string {
	t.Helper()
	src := filepath.Join(t.TempDir(), "source")
	if _, err := synthrun.Write(context.Background(), memory.NewGoAllocator(), src, synthrun.Options{Seed: 3, Steps: 4}); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`roles:
  judge:
    backend: openai
    model: fake-judge
    endpoints: [%s/v1]
    mode: generative
    max_attempts: 1
    temperature: 0.3
`, url)
	if err := os.WriteFile(filepath.Join(src, "config.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return src
}

// replayWith runs replay into target with a config file (may be "") and
// env overrides, returning its error and its log.
func replayWith(t *testing.T, target, file string, env ...string) (string, error) {
	t.Helper()
	cfg, err := pipeline.LoadConfig(pipeline.LoadOptions{File: file, Env: append([]string{"EVOLM_RUN_DIR=" + target, "EVOLM_PIPELINE_PROGRESS=off"}, env...)})
	if err != nil {
		return "", err
	}
	var log bytes.Buffer
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	err = pipeline.RunStage(context.Background(), replay.Name, cfg, pipeline.RunOptions{Mem: mem, Stderr: &strings.Builder{},
		Log: slog.New(slog.NewTextHandler(&log, nil))})
	return log.String(), err
}

// Replay starts from the source run's saved configuration: without
// --config it judges exactly as with the source's config file, and it logs
// what the command changed.
func TestReplayStartsFromSourceConfig(t *testing.T) {
	ts := httptest.NewServer(&fakeJudge{})
	defer ts.Close()
	src := judgeSource(t, ts.URL)
	dir := t.TempDir()
	a, b := filepath.Join(dir, "inherit"), filepath.Join(dir, "explicit")
	if _, err := replayWith(t, a, "", "EVOLM_STAGES_REPLAY_SOURCE="+src); err != nil {
		t.Fatalf("replay without --config: %v", err)
	}
	if _, err := replayWith(t, b, filepath.Join(src, "config.yaml"), "EVOLM_STAGES_REPLAY_SOURCE="+src); err != nil {
		t.Fatalf("replay with the source's config: %v", err)
	}
	ja, jb := readJudgments(t, a), readJudgments(t, b)
	if len(ja) == 0 || ja[0].JudgeModel != "fake-judge" {
		t.Fatalf("replay without --config judged %d rows with %q, want the source's judge fake-judge", len(ja), first(ja).JudgeModel)
	}
	if diff := cmp.Diff(ja, jb); diff != "" {
		t.Errorf("judgments differ (-inherited +explicit):\n%s", diff)
	}
	ra, rb := readJSON(t, filepath.Join(a, replay.ResultsTable, "part-00000.parquet")), readJSON(t, filepath.Join(b, replay.ResultsTable, "part-00000.parquet"))
	if ra != rb {
		t.Errorf("replay_results differ:\n%s\n%s", ra, rb)
	}

	// A setting the command gives wins, and is logged as changed.
	log, err := replayWith(t, filepath.Join(dir, "hot"), "", "EVOLM_STAGES_REPLAY_SOURCE="+src, "EVOLM_ROLES_JUDGE_TEMPERATURE=0.9")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"settings start from " + filepath.Join(src, "config.yaml"), "key=roles.judge.temperature now=0.9", "was=0.3"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
}

// readJSON returns the rows of a Parquet file as Arrow's JSON lines.
func readJSON(t *testing.T, path string) string {
	t.Helper()
	var b strings.Builder
	for rec, err := range pipeline.ReadShard(context.Background(), path, pipeline.ReadOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		if err := array.RecordToJSON(rec, &b); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

func first(js []schemas.Judgment) schemas.Judgment {
	if len(js) == 0 {
		return schemas.Judgment{}
	}
	return js[0]
}

func readJudgments(t *testing.T, run string) []schemas.Judgment {
	t.Helper()
	r, m := pipelinetest.Manifest(t, run, replay.Name)
	var out []schemas.Judgment
	for _, p := range m.Paths(schemas.Judgments.Name) {
		out = append(out, pipelinetest.ReadRows(t, r.Path(p), schemas.Judgments, pipeline.ReadOptions{Schema: schemas.Judgments.Schema()})...)
	}
	return out
}

// A replay whose every judge request fails exits with an error and writes
// nothing.
func TestReplayAllJudgeRequestsFail(t *testing.T) {
	fj := &fakeJudge{fail: true}
	ts := httptest.NewServer(fj)
	defer ts.Close()
	src := judgeSource(t, ts.URL)
	target := filepath.Join(t.TempDir(), "target")
	_, err := replayWith(t, target, "", "EVOLM_STAGES_REPLAY_SOURCE="+src)
	if !errors.Is(err, pipeline.ErrAllRowsFailed) || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("err = %v, want ErrAllRowsFailed with the server's message", err)
	}
	run, err := pipeline.OpenRun(target)
	if err != nil {
		t.Fatal(err)
	}
	m, err := run.Manifest(replay.Name)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Paths(schemas.Judgments.Name)) != 0 {
		t.Errorf("judgments committed: %v", m.Paths(schemas.Judgments.Name))
	}
}

// Every accuracy carries its coverage; a coverage under min_coverage fails
// the replay.
func TestReplayCoverageBound(t *testing.T) {
	ts := httptest.NewServer(&fakeJudge{missing: func(h uint32) bool { return h%10 < 7 }})
	defer ts.Close()
	src := judgeSource(t, ts.URL)
	dir := t.TempDir()
	_, err := replayWith(t, filepath.Join(dir, "a"), "", "EVOLM_STAGES_REPLAY_SOURCE="+src)
	if err == nil || !strings.Contains(err.Error(), "below min_coverage 0.500") {
		t.Fatalf("err = %v, want the coverage bound", err)
	}
	if _, err := replayWith(t, filepath.Join(dir, "b"), "", "EVOLM_STAGES_REPLAY_SOURCE="+src, "EVOLM_STAGES_REPLAY_MIN_COVERAGE=0"); err != nil {
		t.Fatal(err)
	}
	rows := readJSON(t, filepath.Join(dir, "b", replay.ResultsTable, "part-00000.parquet"))
	if !strings.Contains(rows, `"coverage"`) {
		t.Errorf("replay_results has no coverage:\n%s", rows)
	}
}
