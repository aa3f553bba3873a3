//go:build e2e

package judge_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.yaml.in/yaml/v3"

	"github.com/evolm/evolm/internal/lmstage"
	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/model/modeltest"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/pipeline/pipelinetest"
	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/serving/server"
	"github.com/evolm/evolm/serving/torchbe"
	_ "github.com/evolm/evolm/serving/torchbe"
	_ "github.com/evolm/evolm/stages/dedup"
	_ "github.com/evolm/evolm/stages/judge"
	_ "github.com/evolm/evolm/stages/rollout"
	_ "github.com/evolm/evolm/stages/rubrics"
)

const (
	e2ePrompts = 8
	e2eN       = 2
	e2eTokens  = 16
)

// e2eWorld is what every backend run shares: a tiny checkpoint, the deduped
// sample prompts cut to e2ePrompts, and a hand-written rubric per prompt
// (the tiny model's own rubrics are noise and fail R_format, so without it
// the judge would only record failures).
type e2eWorld struct {
	ckpt, prompts, rubrics string
	dir                    string
	promptIDs              []string
}

func setupWorld(t *testing.T, mem memory.Allocator) *e2eWorld {
	t.Helper()
	w := &e2eWorld{dir: t.TempDir()}
	w.ckpt = filepath.Join(w.dir, "tiny") // the torch backend's model id is the directory's name
	modeltest.InitTiny(t, w.ckpt, 1)
	dedupRun := filepath.Join(w.dir, "dedup-run")
	runStages(t, mem, dedupRun, map[string]any{"stages": map[string]any{"dedup": map[string]any{
		"input": []string{filepath.Join(testutil.Root(t), "datasets/sample/tulu3_sample.parquet")}, "dataset": "sample"}}}, "dedup")
	files, err := filepath.Glob(filepath.Join(dedupRun, "prompts", "*.parquet"))
	if err != nil || len(files) == 0 {
		t.Fatalf("dedup wrote no prompts shards: %v", err)
	}
	ps := pipelinetest.ReadRows(t, files[0], schemas.Prompts, pipeline.ReadOptions{Mem: mem})
	// Short prompts keep the judge's prompts short.
	sort.SliceStable(ps, func(i, j int) bool { return len(ps[i].Prompt) < len(ps[j].Prompt) })
	ps = ps[:e2ePrompts]
	w.prompts = filepath.Join(w.dir, "prompts8.parquet")
	pipelinetest.WriteRows(t, mem, w.prompts, schemas.Prompts, ps)
	var rubs []schemas.Rubric
	for _, p := range ps {
		w.promptIDs = append(w.promptIDs, p.PromptID)
		rubs = append(rubs, schemas.Rubric{
			RubricID: "handwritten/" + p.PromptID, ItemID: p.PromptID, Phase: schemas.PhasePolicy, SampleIdx: 99,
			RolloutID: "", RawText: "handwritten", FormatOK: true, Criteria: []schemas.Criterion{
				{Criterion: "Answers the question that was asked.", Weight: 0.6},
				{Criterion: "Is written in English.", Weight: 0.2},
				{Criterion: "Is concise.", Weight: 0.2},
			}})
	}
	w.rubrics = filepath.Join(w.dir, "handwritten_rubrics.parquet")
	pipelinetest.WriteRows(t, mem, w.rubrics, schemas.Rubrics, rubs)
	return w
}

// runStages writes the config (its stages and roles sections) to a file,
// loads it like the CLI and runs the stages in order in run directory dir.
func runStages(t *testing.T, mem memory.Allocator, dir string, doc map[string]any, names ...string) {
	t.Helper()
	if err := runStagesErr(t, mem, dir, doc, names...); err != nil {
		t.Fatal(err)
	}
}

// runStagesErr is runStages returning the first stage's error.
func runStagesErr(t *testing.T, mem memory.Allocator, dir string, doc map[string]any, names ...string) error {
	t.Helper()
	stages := doc["stages"].(map[string]any)
	if _, ok := stages["dedup"]; !ok {
		// LoadConfig requires every stage's required keys, dedup's input
		// among them, whichever stage runs.
		stages["dedup"] = map[string]any{"input": []string{filepath.Join(testutil.Root(t), "datasets/sample/tulu3_sample.parquet")}}
	}
	cfgFile := filepath.Join(t.TempDir(), "config.yaml")
	file := map[string]any{"run": map[string]any{"dir": dir}, "pipeline": map[string]any{"progress": "off"}, "stages": stages}
	if r, ok := doc["roles"]; ok {
		file["roles"] = r
	}
	b, err := yaml.Marshal(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := pipeline.LoadConfig(pipeline.LoadOptions{File: cfgFile})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	for _, name := range names {
		if err := pipeline.RunStage(context.Background(), name, cfg, pipeline.RunOptions{Mem: mem, Log: log}); err != nil {
			return err // RunStage names the stage
		}
	}
	return nil
}

// readAll reads every shard of table under dir, checking each shard's
// schema against the table and returning the rows and one shard's schema
// metadata.
func readAll[T any](t *testing.T, mem memory.Allocator, dir string, tbl *schemas.Table[T], sub string) ([]T, map[string]string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, tbl.Name, sub, "*.parquet"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no %s shards under %s/%s", tbl.Name, dir, sub)
	}
	var out []T
	meta := map[string]string{}
	for _, f := range files {
		r, err := pipeline.OpenShard(f, pipeline.ReadOptions{Mem: mem, Schema: tbl.Schema()})
		if err != nil {
			t.Fatal(err)
		}
		if err := tbl.Check(r.Schema()); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		raw, err := pipeline.OpenShard(f, pipeline.ReadOptions{Mem: mem}) // the stored schema, metadata included
		if err != nil {
			t.Fatal(err)
		}
		md := raw.Schema().Metadata()
		for i, k := range md.Keys() {
			meta[k] = md.Values()[i]
		}
		raw.Close()
		for rec, err := range r.Batches(context.Background()) {
			if err != nil {
				t.Fatal(err)
			}
			rows, err := tbl.Read(rec)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			out = append(out, rows...)
		}
		r.Close()
	}
	return out, meta
}

// modelStages is the config of rollout → rubrics → judge for a backend: the
// stages' own keys and the roles (the shared model plays the rubric
// generator), each role's engine set by backendCfg.
func modelStages(w *e2eWorld, backendCfg map[string]any, runDir, mode string) map[string]any {
	with := func(m map[string]any) map[string]any {
		for k, v := range backendCfg {
			m[k] = v
		}
		return m
	}
	return map[string]any{
		"stages": map[string]any{
			"rollout": map[string]any{"input": []string{w.prompts}, "n": e2eN, "seed": 1},
			"rubrics": map[string]any{"input": []string{w.prompts}, "n": e2eN, "seed": 2},
			// skip: the random model's rubrics never parse, and the checks
			// below count the responses judged under the handwritten rubric.
			"judge": map[string]any{"prompts": []string{w.prompts}, "seed": 3, "invalid_rubric": "skip",
				"rubrics": []string{filepath.Join(runDir, "rubrics/phase=policy/step=0/*.parquet"), w.rubrics}},
		},
		"roles": map[string]any{
			"policy":           with(map[string]any{"max_tokens": e2eTokens, "threads": 1}),
			"rubric_generator": map[string]any{"max_tokens": e2eTokens},
			"judge":            with(map[string]any{"mode": mode, "max_tokens": e2eTokens, "threads": 1}),
		},
	}
}

type tables struct {
	rollouts, generator []schemas.Rollout
	rubrics             []schemas.Rubric
	judgments           []schemas.Judgment
	judgeMeta           map[string]string
}

func checkTables(t *testing.T, mem memory.Allocator, w *e2eWorld, dir, mode string) tables {
	t.Helper()
	var tb tables
	tb.rollouts, _ = readAll(t, mem, dir, schemas.Rollouts, "phase=policy/step=0/role=policy")
	tb.generator, _ = readAll(t, mem, dir, schemas.Rollouts, "phase=policy/step=0/role=rubric_generator")
	tb.rubrics, _ = readAll(t, mem, dir, schemas.Rubrics, "phase=policy/step=0")
	tb.judgments, tb.judgeMeta = readAll(t, mem, dir, schemas.Judgments, "phase=policy/step=0")

	perPrompt := map[string]int{}
	for _, r := range tb.rollouts {
		perPrompt[r.PromptID]++
		if r.Error != nil || r.FinishReason == "error" {
			t.Errorf("rollout %s failed: %v", r.RolloutID, *r.Error)
		}
		if int(r.CompletionTokens) != len(r.TokenLogprobs) || r.CompletionTokens < 1 || r.CompletionTokens > e2eTokens {
			t.Errorf("rollout %s: %d completion tokens, %d log-probs", r.RolloutID, r.CompletionTokens, len(r.TokenLogprobs))
		}
	}
	for _, id := range w.promptIDs {
		if perPrompt[id] != e2eN {
			t.Errorf("prompt %s has %d rollouts, want %d", id, perPrompt[id], e2eN)
		}
	}
	if len(tb.rollouts) != e2ePrompts*e2eN || len(tb.generator) != e2ePrompts*e2eN || len(tb.rubrics) != e2ePrompts*e2eN {
		t.Errorf("rows: %d rollouts, %d generator rollouts, %d rubrics; want %d each", len(tb.rollouts), len(tb.generator), len(tb.rubrics), e2ePrompts*e2eN)
	}
	// One judgment per (response, rubric of its item): n generated + 1 handwritten.
	want := map[string]bool{}
	for _, r := range tb.rollouts {
		want[r.RolloutID+"|handwritten/"+r.PromptID] = true
		for _, rb := range tb.rubrics {
			if rb.ItemID == r.PromptID {
				want[r.RolloutID+"|"+rb.RubricID] = true
			}
		}
	}
	got := map[string]bool{}
	scored := 0
	for _, j := range tb.judgments {
		if got[j.JudgmentID] {
			t.Errorf("judgment %s twice", j.JudgmentID)
		}
		got[j.JudgmentID] = true
		if j.JudgeMode != mode || j.JudgeModel != "tiny" {
			t.Errorf("%s: judge %q mode %q", j.JudgmentID, j.JudgeModel, j.JudgeMode)
		}
		switch {
		case j.Score != nil && (math.IsNaN(*j.Score) || *j.Score < 0 || *j.Score > 1):
			t.Errorf("%s: score %v", j.JudgmentID, *j.Score)
		case j.Score == nil && (j.ScoreMissingReason == nil || *j.ScoreMissingReason == ""):
			t.Errorf("%s: no score and no reason", j.JudgmentID)
		case j.Score != nil:
			scored++
		}
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("judgment ids (-want +got):\n%s", d)
	}
	if mode == schemas.JudgeYesNo && scored != e2ePrompts*e2eN {
		t.Errorf("%d yes/no judgments scored, want %d (one per response under its handwritten rubric)", scored, e2ePrompts*e2eN)
	}
	version := map[string]string{schemas.JudgeGenerative: "@v3+", schemas.JudgeYesNo: "@v2+"}[mode]
	if v := tb.judgeMeta[lmstage.MetaPromptPrefix+"judge_"+mode]; !strings.HasPrefix(v, "judge_"+mode+".official"+version) {
		t.Errorf("judgments metadata lacks the judge prompt version: %v", tb.judgeMeta)
	}
	return tb
}

// TestE2EModelStages runs dedup → rollout → rubrics → judge (yes/no) on the
// sample set with a tiny checkpoint, with the torch backend and with the
// openai backend against `evolm serve` (in process over HTTP), checks each
// table, and checks that the two backends wrote the same rows. It then
// judges the same responses generatively with both backends.
func TestE2EModelStages(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	w := setupWorld(t, mem)

	// Batches of one request on both sides: batched decoding agrees only up
	// to float rounding (padding and batch shape change the kernels), and on
	// a random model, whose next-token distribution is near uniform over
	// 151936 tokens, that is enough to flip an inverse-CDF draw now and then.
	m, err := torchbe.Load(torchbe.Options{Dir: w.ckpt, Threads: 1, MaxBatch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	vocab := m.LM().Config().VocabSize
	// The openai backend scores yes/no through serve's /v1/evolm/score
	// extension (exact). Allowing every alternative as top log-probs keeps
	// the completions fallback exact too, even for a random model whose
	// " yes" is nowhere near the top 20.
	h, err := server.NewHandler(server.Config{Generator: m, Model: m.ID(), RenderChat: m.RenderChat, MaxTopLogprobs: vocab, MaxBatch: 1,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	torchCfg := map[string]any{"backend": "torch", "model": w.ckpt, "max_batch": 1}
	openaiCfg := map[string]any{"backend": "openai", "model": m.ID(), "endpoints": []string{srv.URL + "/v1"},
		"max_in_flight": 4}
	runs := map[string]tables{}
	for _, bk := range []struct {
		name string
		cfg  map[string]any
	}{{"torch", torchCfg}, {"openai", openaiCfg}} {
		dir := filepath.Join(w.dir, "run-"+bk.name)
		doc := modelStages(w, bk.cfg, dir, schemas.JudgeYesNo)
		if bk.name == "openai" {
			doc["roles"].(map[string]any)["judge"].(map[string]any)["top_logprobs"] = vocab
		}
		runStages(t, mem, dir, doc, "rollout", "rubrics", "judge")
		runs[bk.name] = checkTables(t, mem, w, dir, schemas.JudgeYesNo)
	}

	t.Run("parity", func(t *testing.T) {
		a, b := runs["torch"], runs["openai"]
		approx := cmp.Comparer(func(x, y float64) bool { return math.Abs(x-y) < 1e-4 })
		approx32 := cmp.Comparer(func(x, y float32) bool { return math.Abs(float64(x-y)) < 1e-3 })
		byID := func(x, y schemas.Rollout) bool { return x.RolloutID < y.RolloutID }
		// An OpenAI server reports token texts, not ids: the openai backend's
		// rows carry no token ids, nor a source for them.
		noIDs := cmpopts.IgnoreFields(schemas.Rollout{}, "TokenIDs", "TokenIDsSource")
		for _, r := range b.rollouts {
			if len(r.TokenIDs) != 0 || r.TokenIDsSource != nil {
				t.Errorf("openai rollout %s has token ids (source %v)", r.RolloutID, r.TokenIDsSource)
			}
		}
		for _, r := range a.rollouts {
			if r.TokenIDsSource == nil || *r.TokenIDsSource != "engine" {
				t.Errorf("torch rollout %s: token ids source %v, want engine", r.RolloutID, r.TokenIDsSource)
			}
		}
		if d := cmp.Diff(a.rollouts, b.rollouts, approx32, noIDs, cmpopts.SortSlices(byID)); d != "" {
			t.Errorf("policy rollouts torch vs openai (-torch +openai):\n%s", d)
		}
		if d := cmp.Diff(a.generator, b.generator, approx32, noIDs, cmpopts.SortSlices(byID)); d != "" {
			t.Errorf("rubric generator rollouts torch vs openai (-torch +openai):\n%s", d)
		}
		if d := cmp.Diff(a.rubrics, b.rubrics, cmpopts.SortSlices(func(x, y schemas.Rubric) bool { return x.RubricID < y.RubricID })); d != "" {
			t.Errorf("rubrics torch vs openai (-torch +openai):\n%s", d)
		}
		if d := cmp.Diff(a.judgments, b.judgments, approx, cmpopts.SortSlices(func(x, y schemas.Judgment) bool { return x.JudgmentID < y.JudgmentID })); d != "" {
			t.Errorf("judgments torch vs openai (-torch +openai):\n%s", d)
		}
	})

	t.Run("generative", func(t *testing.T) {
		gen := map[string][]schemas.Judgment{}
		for _, bk := range []struct {
			name string
			cfg  map[string]any
		}{{"torch", torchCfg}, {"openai", openaiCfg}} {
			src := filepath.Join(w.dir, "run-"+bk.name)
			dir := filepath.Join(w.dir, "gen-"+bk.name)
			doc := modelStages(w, bk.cfg, src, schemas.JudgeGenerative)
			stages := doc["stages"].(map[string]any)
			j := stages["judge"].(map[string]any)
			j["responses"] = []string{filepath.Join(src, "rollouts/phase=policy/step=0/role=policy/*.parquet")}
			doc["stages"] = map[string]any{"judge": j}
			runStages(t, mem, dir, doc, "judge")
			rows, meta := readAll(t, mem, dir, schemas.Judgments, "phase=policy/step=0")
			if len(rows) != e2ePrompts*e2eN*(e2eN+1) {
				t.Errorf("%s: %d generative judgments, want %d", bk.name, len(rows), e2ePrompts*e2eN*(e2eN+1))
			}
			for _, r := range rows {
				if r.Score == nil && r.ScoreMissingReason == nil {
					t.Errorf("%s: %s has neither score nor reason", bk.name, r.JudgmentID)
				}
				if strings.HasPrefix(r.RubricID, "handwritten/") && r.RawText == "" {
					t.Errorf("%s: %s: the judge's reply is not kept", bk.name, r.JudgmentID)
				}
			}
			if !strings.HasPrefix(meta[lmstage.MetaPromptPrefix+"judge_generative"], "judge_generative.official@v3+") {
				t.Errorf("%s: metadata %v", bk.name, meta)
			}
			gen[bk.name] = rows
		}
		sortJ := cmpopts.SortSlices(func(x, y schemas.Judgment) bool { return x.JudgmentID < y.JudgmentID })
		if d := cmp.Diff(gen["torch"], gen["openai"], sortJ); d != "" {
			t.Errorf("generative judgments torch vs openai (-torch +openai):\n%s", d)
		}
	})
	// A standalone judge finds the rollouts' questions through their
	// metadata (no prompts key), and a judge whose every call fails (the
	// README's old serve pairing: a model id the server does not serve)
	// fails the stage with the server's answer and keeps nothing.
	t.Run("inferred prompts and all rows failed", func(t *testing.T) {
		src := filepath.Join(w.dir, "run-openai")
		doc := modelStages(w, openaiCfg, src, schemas.JudgeYesNo)
		j := doc["stages"].(map[string]any)["judge"].(map[string]any)
		delete(j, "prompts")
		j["responses"] = []string{filepath.Join(src, "rollouts/phase=policy/step=0/role=policy/*.parquet")}
		doc["stages"] = map[string]any{"judge": j}
		judgeRole := doc["roles"].(map[string]any)["judge"].(map[string]any)
		judgeRole["top_logprobs"] = vocab
		judgeRole["model"] = "Qwen/Qwen3-1.7B"
		dir := filepath.Join(w.dir, "wrong-model-id")
		err := runStagesErr(t, mem, dir, doc, "judge")
		if !errors.Is(err, pipeline.ErrAllRowsFailed) || !strings.Contains(err.Error(), `this server serves "tiny"`) {
			t.Fatalf("judge against a server of another model: err = %v, want every row failed with the server's answer", err)
		}
		if shards, _ := filepath.Glob(filepath.Join(dir, "judgments", "*", "*", "*.parquet")); len(shards) != 0 {
			t.Errorf("an all-failed judge kept shards %v", shards)
		}
		judgeRole["model"] = m.ID()
		if err := runStagesErr(t, mem, dir, doc, "judge"); err != nil {
			t.Fatalf("rerun with the served model id: %v", err)
		}
		rows, _ := readAll(t, mem, dir, schemas.Judgments, "phase=policy/step=0")
		if len(rows) != e2ePrompts*e2eN*(e2eN+1) {
			t.Errorf("%d judgments after the fix, want %d", len(rows), e2ePrompts*e2eN*(e2eN+1))
		}
	})
	fmt.Fprintf(os.Stderr, "e2e: %d rollouts, %d rubrics, %d judgments per backend\n",
		len(runs["torch"].rollouts), len(runs["torch"].rubrics), len(runs["torch"].judgments))
}
