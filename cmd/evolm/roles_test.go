//go:build e2e

package main

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/evolm/evolm/model/modeltest"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/pipeline/pipelinetest"
	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/serving/server"
	"github.com/evolm/evolm/serving/torchbe"
)

// recordingGenerator is a test double around a real engine: it passes every
// call on and records the sampling each request asked for, so that the test
// sees what a stage sent over the wire.
type recordingGenerator struct {
	backend.Generator
	mu   sync.Mutex
	seen map[[2]float64]int // (temperature, max_tokens) → requests
	// penalties are the (repetition_penalty, min_p) pairs seen.
	penalties map[[2]float64]bool
}

func (r *recordingGenerator) Generate(ctx context.Context, reqs []backend.GenerateRequest) ([]backend.GenerateResponse, error) {
	r.mu.Lock()
	for _, q := range reqs {
		r.seen[[2]float64{q.Temperature, float64(q.MaxTokens)}]++
		if r.penalties == nil {
			r.penalties = map[[2]float64]bool{}
		}
		r.penalties[[2]float64{q.RepetitionPenalty, q.MinP}] = true
	}
	r.mu.Unlock()
	return r.Generator.Generate(ctx, reqs)
}

// takePenalties returns and forgets the (repetition_penalty, min_p) pairs
// seen.
func (r *recordingGenerator) takePenalties() map[[2]float64]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.penalties
	r.penalties = nil
	return out
}

// take returns and forgets what was recorded.
func (r *recordingGenerator) take() map[[2]float64]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.seen
	r.seen = map[[2]float64]int{}
	return out
}

// keys lists the (temperature, max_tokens) pairs of a record.
func keys(m map[[2]float64]int) string {
	var out []string
	for k := range m {
		out = append(out, fmt.Sprintf("(%v, %v)", k[0], k[1]))
	}
	return strings.Join(out, " ")
}

// TestRolesAreDefinedOnce sets each role's backend, model, device, sampling
// temperature and max tokens once, in roles.*, and checks that every stage
// that calls the role — rollout, rubrics, judge, eval, replay and the loop —
// uses them: the requests reaching an OpenAI-compatible server (a tiny
// engine behind `evolm serve`) carry the role's temperature and max tokens,
// the loop's rows record its trained roles' sampling, and a device that does
// not exist fails every stage that runs the role in process.
func TestRolesAreDefinedOnce(t *testing.T) {
	dir := t.TempDir()
	ckpt := filepath.Join(dir, "tiny")
	modeltest.InitTiny(t, ckpt, 1)
	m, err := torchbe.Load(torchbe.Options{Dir: ckpt, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	servers := map[string]*recordingGenerator{}
	urls := map[string]string{}
	for _, name := range []string{"policy-srv", "judge-srv"} {
		rec := &recordingGenerator{Generator: m, seen: map[[2]float64]int{}}
		h, err := server.NewHandler(server.Config{Generator: rec, Scorer: m, Model: name, RenderChat: m.RenderChat, MaxBatch: 1})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(h)
		defer srv.Close()
		servers[name], urls[name] = rec, srv.URL+"/v1"
	}

	// Two prompts, a rubric for each (the tiny model's own fail R_format and
	// are not judged) and a pairwise benchmark file.
	promptsFile := filepath.Join(dir, "prompts.parquet")
	writeRows(t, promptsFile, schemas.Prompts, []schemas.Prompt{
		{PromptID: "p1", Dataset: "t", Prompt: "What is 2+2?", Messages: []schemas.Message{{Role: "user", Content: "What is 2+2?"}}},
		{PromptID: "p2", Dataset: "t", Prompt: "Name a colour.", Messages: []schemas.Message{{Role: "user", Content: "Name a colour."}}},
	})
	rubricsFile := filepath.Join(dir, "rubrics.parquet")
	var rubs []schemas.Rubric
	for _, id := range []string{"p1", "p2"} {
		rubs = append(rubs, schemas.Rubric{RubricID: "hand/" + id, ItemID: id, Phase: schemas.PhasePolicy, RawText: "{}", FormatOK: true,
			Criteria: []schemas.Criterion{{Criterion: "Answers.", Weight: 0.5}, {Criterion: "Is brief.", Weight: 0.5}}})
	}
	writeRows(t, rubricsFile, schemas.Rubrics, rubs)
	bench := filepath.Join(dir, "pairs.jsonl")
	if err := os.WriteFile(bench, []byte(`{"prompt": "2+2?", "chosen": "4", "rejected": "5"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	const (
		policyTemp, policyMax = 0.9, 5
		rubricTemp, rubricMax = 0.4, 6
		judgeTemp, judgeMax   = 0.3, 7
	)
	// Each role key once. The stages' sections hold only their own keys.
	cfgFile := filepath.Join(dir, "roles.yaml")
	cfg := fmt.Sprintf(`roles:
  policy:
    backend: openai
    model: policy-srv
    endpoints: [%s]
    temperature: %v
    max_tokens: %d
    repetition_penalty: 1.25
    min_p: 0.05
  rubric_generator:
    temperature: %v
    max_tokens: %d
  judge:
    backend: openai
    model: judge-srv
    endpoints: [%s]
    mode: generative
    temperature: %v
    max_tokens: %d
stages:
  rollout: {input: [%s], n: 2}
  rubrics: {input: [%s], n: 2}
  judge: {prompts: [%s], rubrics: [%s]}
  eval: {benchmark: pairwise, input: [%s], bootstrap_samples: 10, min_coverage: 0}
  replay: {min_coverage: 0}
  run: {input: [%s], steps: 2, k: 1, prompts_per_step: 2, samples: 2, rubric_samples: 2, temporal_min_age: 1, temporal_max_age: 1, checkpoint_every: 2}
pipeline: {progress: "off"}
log: {level: warn}
`, urls["policy-srv"], policyTemp, policyMax, rubricTemp, rubricMax, urls["judge-srv"], judgeTemp, judgeMax,
		promptsFile, promptsFile, promptsFile, rubricsFile, bench, promptsFile)
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	policy := map[[2]float64]int{{policyTemp, policyMax}: 0}
	rubric := map[[2]float64]int{{rubricTemp, rubricMax}: 0}
	judge := map[[2]float64]int{{judgeTemp, judgeMax}: 0}
	// want checks that the servers saw requests with exactly the given
	// (temperature, max tokens), and some of each.
	want := func(stage string, pol, jud map[[2]float64]int) {
		t.Helper()
		for name, exp := range map[string]map[[2]float64]int{"policy-srv": pol, "judge-srv": jud} {
			got := servers[name].take()
			for k := range got {
				if _, ok := exp[k]; !ok {
					t.Errorf("%s: %s got requests with (temperature, max_tokens) %s, want only %s", stage, name, keys(got), keys(exp))
					break
				}
			}
			for k := range exp {
				if got[k] == 0 {
					t.Errorf("%s: %s got no request with (temperature, max_tokens) (%v, %v); got %s", stage, name, k[0], k[1], keys(got))
				}
			}
		}
	}
	stageRun := filepath.Join(dir, "stages")
	for _, tc := range []struct {
		args     []string
		pol, jud map[[2]float64]int
	}{
		{[]string{"rollout"}, policy, nil},
		{[]string{"rubrics"}, rubric, nil},
		{[]string{"judge"}, nil, judge},
	} {
		if _, err := run(t, append([]string{"--config", cfgFile, "--run-dir", stageRun}, tc.args...)...); err != nil {
			t.Fatalf("%s: %v", tc.args[0], err)
		}
		want(tc.args[0], tc.pol, tc.jud)
		// The policy's sampling controls reach the server; the rubric
		// generator's own (vLLM's defaults: not sent) do too.
		pens := servers["policy-srv"].takePenalties()
		switch tc.args[0] {
		case "rollout":
			if !cmp.Equal(pens, map[[2]float64]bool{{1.25, 0.05}: true}) {
				t.Errorf("rollout: (repetition_penalty, min_p) seen %v, want only (1.25, 0.05)", pens)
			}
		case "rubrics":
			if !cmp.Equal(pens, map[[2]float64]bool{{0, 0}: true}) {
				t.Errorf("rubrics: (repetition_penalty, min_p) seen %v, want only vLLM's defaults", pens)
			}
		}
	}
	if _, err := run(t, "--config", cfgFile, "--run-dir", filepath.Join(dir, "eval"), "eval"); err != nil {
		t.Fatalf("eval: %v", err)
	}
	want("eval", rubric, judge)

	// The loop trains the policy in process: the same roles, the policy and
	// its shared rubric generator on torch (the policy's device).
	loopRun := filepath.Join(dir, "loop")
	if _, err := run(t, "--config", cfgFile, "--run-dir", loopRun, "run", "--policy-backend", "torch", "--policy-model", ckpt,
		"--policy-device", "cpu", "--policy-threads", "1"); err != nil {
		t.Fatalf("run: %v", err)
	}
	want("run", nil, judge)
	r, man := pipelinetest.Manifest(t, loopRun, "run")
	seen := map[string]int{}
	for _, p := range man.Paths(schemas.Rollouts.Name) {
		for _, ro := range pipelinetest.ReadRows(t, r.Path(p), schemas.Rollouts, pipeline.ReadOptions{Schema: schemas.Rollouts.Schema()}) {
			temp, maxTok := policyTemp, policyMax
			if ro.Role == schemas.RoleRubricGenerator {
				temp, maxTok = rubricTemp, rubricMax
			}
			if ro.Temperature != temp || ro.CompletionTokens > int32(maxTok) {
				t.Errorf("run: %s rollout %s: temperature %v, %d tokens; want %v, ≤ %d", ro.Role, ro.RolloutID, ro.Temperature, ro.CompletionTokens, temp, maxTok)
			}
			seen[ro.Role]++
		}
	}
	if seen[schemas.RolePolicy] == 0 || seen[schemas.RoleRubricGenerator] == 0 {
		t.Errorf("run: rollouts per role %v", seen)
	}

	// Replay the loop's pairs with new rubrics: the rubric generator (shared,
	// so the policy's server) and the judge of the same sections.
	if _, err := run(t, "--config", cfgFile, "--run-dir", filepath.Join(dir, "replay"), "replay", "--source", loopRun, "--new-rubrics", "--n", "2"); err != nil {
		t.Fatalf("replay: %v", err)
	}
	want("replay", rubric, judge)

	// A device that does not exist fails every stage that runs the role in
	// process, and names the device.
	for _, args := range [][]string{
		{"judge", "--judge-backend", "torch", "--judge-model", ckpt, "--judge-device", "tpu:3"}, // before --fresh drops the rollouts it reads
		{"rollout", "--policy-backend", "torch", "--policy-model", ckpt, "--policy-device", "tpu:3"},
		{"rubrics", "--policy-backend", "torch", "--policy-model", ckpt, "--policy-device", "tpu:3"},
		{"eval", "--judge-backend", "torch", "--judge-model", ckpt, "--judge-device", "tpu:3"},
		{"run", "--policy-backend", "torch", "--policy-model", ckpt, "--policy-device", "tpu:3"},
		{"run", "--policy-backend", "torch", "--policy-model", ckpt, "--judge-backend", "torch", "--judge-model", ckpt, "--judge-device", "tpu:3"},
	} {
		rd := filepath.Join(dir, "bad-"+args[0])
		if args[0] != "eval" && args[0] != "run" {
			rd = stageRun // the stage's inputs are there
		}
		_, err := run(t, append([]string{"--config", cfgFile, "--run-dir", rd, "--fresh"}, args...)...)
		if err == nil || !strings.Contains(err.Error(), `"tpu:3"`) {
			t.Errorf("%v: error %v, want the device named", args, err)
		}
	}
}

// writeRows writes rows of tbl as one committed Parquet file.
func writeRows[T any](t *testing.T, path string, tbl *schemas.Table[T], rows []T) {
	t.Helper()
	pipelinetest.WriteRows(t, memory.NewGoAllocator(), path, tbl, rows)
}
