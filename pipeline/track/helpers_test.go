package track_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/pipeline/pipelinetest"
	"github.com/evolm/evolm/pipeline/track"
	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/schemas/schematest"
)

// stepRows are the rows the unit tests report: both phases, a null
// rubric-phase column in the policy steps, a NaN loss.
func stepRows(n int) []schemas.StepMetrics {
	rows := schematest.Steps(n)
	for i := range rows {
		rows[i].Loss = 0.5 - 0.01*float64(i)
		if i%4 >= 2 {
			rows[i].Phase = schemas.PhaseRubric
			m := 0.1 * float64(i)
			rows[i].MarginMean = &m
		}
	}
	rows[1].Loss = math.NaN()
	return rows
}

// writeSteps writes rows as dir's steps table (one shard).
func writeSteps(t *testing.T, dir string, rows []schemas.StepMetrics) {
	t.Helper()
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	pipelinetest.WriteRows(t, mem, filepath.Join(dir, "steps", "part-00000.parquet"), schemas.Steps, rows)
}

// report is tracker_check.py's report of one tracker.
type report struct {
	Steps       int            `json:"steps"`
	Tags        int            `json:"tags"`
	Values      int            `json:"values"`
	Problems    []string       `json:"problems"`
	NProblems   int            `json:"n_problems"`
	Status      string         `json:"status"`
	Tagged      map[string]any `json:"evolm_tags"`
	HParams     map[string]any `json:"hparams"`
	HParamsTags []string       `json:"hparams_tags"`
	Texts       map[string]int `json:"texts"`
	Params      int            `json:"params"`
	Files       int            `json:"files"`
	ExitCodes   []int          `json:"exit_codes"`
	ConfigKeys  int            `json:"config_keys"`
	Version     string         `json:"evolm.version"`
	Checkpoints [][]any        `json:"checkpoints"`
}

// check runs scripts/tracker_check.py over run with args and returns its
// reports by tracker; problems fail the test.
func check(t *testing.T, run string, args ...string) map[string]report {
	t.Helper()
	cmd := exec.Command(testutil.Python(t), append([]string{filepath.Join(testutil.Root(t), "scripts", "tracker_check.py"), run}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var out map[string]json.RawMessage
	if jerr := json.Unmarshal(stdout.Bytes(), &out); jerr != nil {
		t.Fatalf("tracker_check.py: %v %v\n%s\n%s", err, jerr, stdout.String(), stderr.String())
	}
	reps := map[string]report{}
	for k, raw := range out {
		var r report
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatal(err)
		}
		reps[k] = r
		if r.NProblems > 0 {
			t.Errorf("%s: %d problems:\n  %s", k, r.NProblems, strings.Join(r.Problems, "\n  "))
		}
	}
	if err != nil && !t.Failed() {
		t.Fatalf("tracker_check.py: %v\n%s", err, stderr.String())
	}
	return reps
}

// logBuffer is a slog handler's output that tests read.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuffer) count(s string) int { return strings.Count(l.String(), s) }

func newLog() (*slog.Logger, *logBuffer) {
	b := &logBuffer{}
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug})), b
}

// runInfo is the Run a unit test reports.
func runInfo(dir string) track.Run {
	return track.Run{Dir: dir, Version: "test", ConfigHash: "sha256:0123456789abcdef", Start: time.Now(),
		Params: []track.Param{{"stages.run.lr", 1e-6}, {"stages.run.steps", 8}, {"stages.run.strategies", []string{"temporal", "backtranslate"}},
			{"roles.policy.model", "runs/demo-models/policy"}, {"stages.run.lora_rank", 0}, {"roles.policy.disable_thinking", true}}}
}

// report sends rows to a hub of settings s and closes it.
func reportRows(t *testing.T, s track.Settings, r track.Run, rows []schemas.StepMetrics, log *slog.Logger) int64 {
	t.Helper()
	h, err := track.Open(context.Background(), s, r, log)
	if err != nil {
		t.Fatal(err)
	}
	last := h.Last()
	for i := range rows {
		h.Step(&rows[i])
		h.Text(rows[i].Step, "samples/rubric", "criterion one\nweight 0.5")
		if rows[i].Step%4 == 3 {
			name := fmt.Sprintf("step-%06d", rows[i].Step+1)
			h.Checkpoint(rows[i].Step, name, filepath.Join(r.Dir, "checkpoints", name))
		}
	}
	h.Close(track.Finished)
	return last
}
