//go:build e2e

package run

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/model/safetensors"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/pipeline/pipelinetest"
	"github.com/evolm/evolm/schemas"
)

// demoEnv is a built binary, two tiny checkpoints and a deduplicated prompt
// set: what `make demo` prepares.
type demoEnv struct {
	bin, models, prompts string
}

func setup(t *testing.T) demoEnv {
	t.Helper()
	root := testutil.Root(t)
	tmp := t.TempDir()
	e := demoEnv{bin: testutil.BuildEvolm(t, tmp), models: filepath.Join(tmp, "models")}
	for i, name := range []string{"policy", "judge"} {
		run(t, e.bin, "model", "init", "--arch", "qwen3", "--preset", "tiny", "--seed", fmt.Sprint(i+1), "--out", filepath.Join(e.models, name))
	}
	dd := filepath.Join(tmp, "dedup")
	run(t, e.bin, "dedup", "--run-dir", dd, "--input", filepath.Join(root, "datasets/sample/tulu3_sample.parquet"), "--progress", "off", "--log-level", "warn")
	e.prompts = filepath.Join(dd, "prompts", "**", "*.parquet")
	matches, _ := filepath.Glob(filepath.Join(dd, "prompts", "*", "*.parquet"))
	if len(matches) == 0 {
		matches, _ = filepath.Glob(filepath.Join(dd, "prompts", "*.parquet"))
	}
	if len(matches) == 0 {
		t.Fatalf("dedup wrote no prompts under %s", dd)
	}
	e.prompts = strings.Join(matches, ",")
	return e
}

func run(t *testing.T, bin string, args ...string) string {
	t.Helper()
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("evolm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// writeConfig writes the demo loop config: 6 steps with K = 2 (policy,
// policy, rubric, rubric, policy, policy), checkpoints every 2 steps.
func (e demoEnv) writeConfig(t *testing.T, dir string) string {
	t.Helper()
	cfg := fmt.Sprintf(`stages:
  run:
    input: [%s]
    steps: 6
    k: 2
    prompts_per_step: 6
    samples: 3
    rubric_samples: 2
    checkpoint_every: 2
    temporal_min_age: 1
    temporal_max_age: 2
    lr: 1.0e-4
    seed: 11
roles:
  policy:
    model: %s
    max_tokens: 12
    threads: 1
    disable_thinking: true
  rubric_generator:
    max_tokens: 12
  judge:
    model: %s
    mode: yesno
    threads: 1
pipeline:
  progress: "off"
log:
  level: warn
`, e.prompts, filepath.Join(e.models, "policy"), filepath.Join(e.models, "judge"))
	p := filepath.Join(dir, "demo.yaml")
	if err := os.WriteFile(p, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func readTable[T any](t *testing.T, run string, tab *schemas.Table[T]) []T {
	t.Helper()
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	r, m := pipelinetest.Manifest(t, run, Name)
	var rows []T
	for _, p := range m.Paths(tab.Name) {
		rows = append(rows, pipelinetest.ReadRows(t, r.Path(p), tab, pipeline.ReadOptions{Mem: mem, Schema: tab.Schema()})...)
	}
	return rows
}

// TestE2ELoopAlternatesAndCheckpoints runs the demo loop and checks the
// schedule, the checkpoints (loaded back in HF transformers), the three pair
// strategies with their provenance, and every table's row-count invariants.
func TestE2ELoopAlternatesAndCheckpoints(t *testing.T) {
	e := setup(t)
	dir := t.TempDir()
	runDir := filepath.Join(dir, "run")
	run(t, e.bin, "run", "--config", e.writeConfig(t, dir), "--run-dir", runDir)

	steps := readTable(t, runDir, schemas.Steps)
	sort.Slice(steps, func(i, j int) bool { return steps[i].Step < steps[j].Step })
	var phases []string
	var counts [3]int64
	for _, s := range steps {
		phases = append(phases, s.Phase)
		counts[0] += s.CountTemporal
		counts[1] += s.CountBacktranslate
		counts[2] += s.CountRubricGuided
		if s.Phase == schemas.PhaseRubric && s.RewardMean == 0 && s.ZeroStdFrac < 1 {
			t.Errorf("step %d: rubric step with zero mean reward and signal: %+v", s.Step, s)
		}
	}
	if diff := cmp.Diff([]string{"policy", "policy", "rubric", "rubric", "policy", "policy"}, phases); diff != "" {
		t.Errorf("phases alternate at K = 2 (-want +got):\n%s", diff)
	}
	t.Logf("pairs per strategy (temporal, backtranslate, rubric_guided) = %v", counts)
	for i, c := range counts {
		if c == 0 {
			t.Errorf("strategy %s never used in the demo: counts %v", schemas.Strategies[i], counts)
		}
	}
	ps := readTable(t, runDir, schemas.Pairs)
	if got := int64(len(ps)); got != counts[0]+counts[1]+counts[2] {
		t.Errorf("pairs table has %d rows, steps table counts %v", got, counts)
	}
	for _, p := range ps {
		if p.ChosenRolloutID == "" || p.RejectedRolloutID == "" || p.Chosen == "" && p.Rejected == "" {
			t.Errorf("pair %s: provenance missing: %+v", p.PairID, p)
		}
		if (p.Strategy == schemas.StrategyBacktranslate) != (p.InferredQuestion != nil) {
			t.Errorf("pair %s (%s): inferred question %v", p.PairID, p.Strategy, p.InferredQuestion)
		}
		if p.Strategy == schemas.StrategyTemporal {
			// Ages count policy steps (the official clock): the schedule's
			// policy steps are 0, 1, 4, 5, so at steps 2 and 3 the newest
			// buffered answer is from step 1 and a− from step 0 is 1 old.
			policyIndex := map[int64]int64{0: 0, 1: 1, 4: 2, 5: 3}
			if p.TemporalAge == nil || p.TemporalFallback == nil {
				t.Errorf("temporal pair %s: age %v, fallback %v recorded", p.PairID, p.TemporalAge, p.TemporalFallback)
				continue
			}
			if want := policyIndex[1] - policyIndex[p.RejectedStep]; *p.TemporalAge != want {
				t.Errorf("temporal pair %s: a− from step %d has age %d, want %d policy steps", p.PairID, p.RejectedStep, *p.TemporalAge, want)
			}
			if *p.TemporalFallback == schemas.TemporalWindow && (*p.TemporalAge < 1 || *p.TemporalAge > 2) {
				t.Errorf("temporal pair %s: age %d served by the window [1, 2]", p.PairID, *p.TemporalAge)
			}
		}
	}
	// Row counts: policy steps have 6 rubrics, 6·3 answers and one judgment
	// per answer; rubric steps have 2 rubrics per pair and two judgments per
	// rubric.
	rubs := readTable(t, runDir, schemas.Rubrics)
	js := readTable(t, runDir, schemas.Judgments)
	rolls := readTable(t, runDir, schemas.Rollouts)
	perStep := func(n func(phase string) int) int { // Σ over the schedule
		s := 0
		for _, p := range phases {
			s += n(p)
		}
		return s
	}
	wantRubrics := perStep(func(p string) int { return map[string]int{"policy": 6, "rubric": 6 * 2}[p] })
	wantJudgments := perStep(func(p string) int { return map[string]int{"policy": 6 * 3, "rubric": 6 * 2 * 2}[p] })
	if len(rubs) != wantRubrics || len(js) != wantJudgments {
		t.Errorf("rubrics %d (want %d), judgments %d (want %d)", len(rubs), wantRubrics, len(js), wantJudgments)
	}
	policyAnswers := 0
	for _, r := range rolls {
		if r.Phase == schemas.PhasePolicy && r.Role == schemas.RolePolicy {
			policyAnswers++
			if len(r.TokenIDs) != int(r.CompletionTokens) || len(r.TokenLogprobs) != len(r.TokenIDs) {
				t.Errorf("rollout %s: %d token ids, %d log-probs, %d completion tokens", r.RolloutID, len(r.TokenIDs), len(r.TokenLogprobs), r.CompletionTokens)
			}
		}
	}
	if policyAnswers != 4*6*3 {
		t.Errorf("policy-phase answers = %d, want %d", policyAnswers, 4*6*3)
	}

	for _, ck := range []string{"step-000002", "step-000004", "step-000006"} {
		for _, f := range []string{"policy/config.json", "policy/model.safetensors", "policy/tokenizer.json", "policy_optimizer.safetensors", "replay.parquet", "state.json"} {
			if _, err := os.Stat(filepath.Join(runDir, "checkpoints", ck, f)); err != nil {
				t.Errorf("checkpoint %s: %v", ck, err)
			}
		}
	}
	out := testutil.RunPython(t, "hf_load_checkpoint.py", filepath.Join(runDir, "checkpoints", "step-000006", "policy"))
	t.Logf("transformers: %s", bytes.TrimSpace(out))

	// A finished run reruns as a no-op; a corrupt or incomplete checkpoint is a clear error.
	run(t, e.bin, "run", "--resume", runDir)
	statePath := filepath.Join(runDir, "checkpoints", "step-000006", "state.json")
	state, err := os.ReadFile(statePath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(statePath, []byte(`{"version": 1, "next_step": 5`), 0o644); err != nil {
		t.Fatal(err)
	}
	outb, err := exec.Command(e.bin, "run", "--resume", runDir).CombinedOutput()
	if err == nil || !strings.Contains(string(outb), "corrupt state.json") {
		t.Errorf("corrupt state.json: err %v, output:\n%s", err, outb)
	}
	if err := os.WriteFile(statePath, state, 0o644); err != nil {
		t.Fatal(err)
	}
	// Another config is refused; raising steps (a volatile key) is not.
	outb, err = exec.Command(e.bin, "run", "--resume", runDir, "--lr", "0.5").CombinedOutput()
	if err == nil || !strings.Contains(string(outb), "config") {
		t.Errorf("resume with another lr: err %v, output:\n%s", err, outb)
	}
	if err := os.Remove(filepath.Join(runDir, "checkpoints", "step-000006", "replay.parquet")); err != nil {
		t.Fatal(err)
	}
	outb, err = exec.Command(e.bin, "run", "--resume", runDir, "--steps", "7").CombinedOutput()
	if err == nil || !strings.Contains(string(outb), "replay") || !strings.Contains(string(outb), "missing") {
		t.Errorf("missing replay buffer: err %v, output:\n%s", err, outb)
	}
}

// TestE2ELoopResumeIsExact kills `evolm run` at random moments and at the
// failpoints inside a shard write and inside a checkpoint, resumes it each
// time, and checks that every table's rows and the final weights equal an
// uninterrupted run's.
func TestE2ELoopResumeIsExact(t *testing.T) {
	e := setup(t)
	dir := t.TempDir()
	cfg := e.writeConfig(t, dir)
	ref := filepath.Join(dir, "ref")
	run(t, e.bin, "run", "--config", cfg, "--run-dir", ref)

	crash := filepath.Join(dir, "crash")
	rng := rand.New(rand.NewPCG(5, 8))
	attempts := []struct {
		failpoint string
		after     time.Duration // SIGKILL from outside after this long (0: none)
	}{
		{failpoint: "shard-mid@3"},
		{failpoint: "checkpoint-mid@1"},
		{after: time.Duration(2000+rng.IntN(6000)) * time.Millisecond},
		{failpoint: "shard-mid@5"},
		{after: time.Duration(2000+rng.IntN(6000)) * time.Millisecond},
	}
	for i, a := range attempts {
		cmd := exec.Command(e.bin, "run", "--config", cfg, "--run-dir", crash)
		if a.failpoint != "" {
			cmd.Env = append(os.Environ(), "EVOLM_FAILPOINT="+a.failpoint)
		}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if a.after > 0 {
			time.AfterFunc(a.after, func() { _ = cmd.Process.Signal(syscall.SIGKILL) })
		}
		err := cmd.Wait()
		t.Logf("attempt %d (%+v): %v", i, a, err)
		if a.failpoint != "" && (err == nil || !strings.Contains(err.Error(), "killed")) {
			t.Fatalf("attempt %d: failpoint %s did not kill the run (%v):\n%s", i, a.failpoint, err, out.String())
		}
		assertNoVisiblePartial(t, crash)
	}
	run(t, e.bin, "run", "--resume", crash)

	compareTable(t, ref, crash, schemas.Rollouts, func(r schemas.Rollout) string { return r.RolloutID })
	compareTable(t, ref, crash, schemas.Rubrics, func(r schemas.Rubric) string { return r.RubricID })
	compareTable(t, ref, crash, schemas.Judgments, func(r schemas.Judgment) string { return r.JudgmentID })
	compareTable(t, ref, crash, schemas.Pairs, func(r schemas.Pair) string { return r.PairID })
	compareTable(t, ref, crash, schemas.Steps, func(r schemas.StepMetrics) string { return fmt.Sprint(r.Step) },
		cmpopts.IgnoreFields(schemas.StepMetrics{}, wallTimeFields...))
	maxDiff := compareWeights(t, filepath.Join(ref, "checkpoints/step-000006/policy/model.safetensors"),
		filepath.Join(crash, "checkpoints/step-000006/policy/model.safetensors"))
	t.Logf("final weights: max |Δ| = %g over every tensor", maxDiff)
	if maxDiff > 0 {
		t.Errorf("final weights differ from the uninterrupted run by up to %g; want bit-identical on one CPU thread", maxDiff)
	}
}

// assertNoVisiblePartial checks that every Parquet file visible in the run
// is committed in the manifest (temp files are hidden dot-files) and that no
// checkpoint directory lacks its state.json.
func assertNoVisiblePartial(t *testing.T, run string) {
	t.Helper()
	_, m := pipelinetest.Manifest(t, run, Name)
	committed := map[string]bool{}
	for _, s := range m.Shards {
		committed[s.Path] = true
	}
	_ = filepath.WalkDir(run, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(run, p)
		rel = filepath.ToSlash(rel)
		if strings.HasSuffix(rel, ".parquet") && !strings.HasPrefix(filepath.Base(rel), ".") && !strings.HasPrefix(rel, "checkpoints/") && !committed[rel] {
			t.Errorf("visible shard %s is not committed", rel)
		}
		return nil
	})
	cks, _ := filepath.Glob(filepath.Join(run, "checkpoints", "step-*"))
	for _, c := range cks {
		if _, err := os.Stat(filepath.Join(c, "state.json")); err != nil {
			t.Errorf("checkpoint %s visible without state.json", c)
		}
	}
}

func compareTable[T any](t *testing.T, a, b string, tab *schemas.Table[T], key func(T) string, opts ...cmp.Option) {
	t.Helper()
	ra, rb := readTable(t, a, tab), readTable(t, b, tab)
	sort.Slice(ra, func(i, j int) bool { return key(ra[i]) < key(ra[j]) })
	sort.Slice(rb, func(i, j int) bool { return key(rb[i]) < key(rb[j]) })
	if len(ra) == 0 {
		t.Errorf("%s: the reference run has no rows", tab.Name)
	}
	if diff := cmp.Diff(ra, rb, opts...); diff != "" {
		t.Errorf("%s differs after crash and resume (-uninterrupted +resumed):\n%s", tab.Name, diff)
	}
}

func compareWeights(t *testing.T, a, b string) float64 {
	t.Helper()
	fa, err := safetensors.Open(a)
	if err != nil {
		t.Fatal(err)
	}
	defer fa.Close()
	fb, err := safetensors.Open(b)
	if err != nil {
		t.Fatal(err)
	}
	defer fb.Close()
	if diff := cmp.Diff(fa.Names(), fb.Names()); diff != "" {
		t.Fatalf("tensor names differ:\n%s", diff)
	}
	worst := 0.0
	for _, n := range fa.Names() {
		da, _ := fa.Data(n)
		db, _ := fb.Data(n)
		if len(da) != len(db) {
			t.Fatalf("%s: %d vs %d bytes", n, len(da), len(db))
		}
		for i := 0; i+4 <= len(da); i += 4 {
			x := math.Float32frombits(binary.LittleEndian.Uint32(da[i:]))
			y := math.Float32frombits(binary.LittleEndian.Uint32(db[i:]))
			worst = math.Max(worst, math.Abs(float64(x-y)))
		}
	}
	return worst
}

// TestE2ELoopTwoModels runs the two-model ablation: a separate rubric
// generator with its own optimizer and reference, checkpointed beside the
// policy.
func TestE2ELoopTwoModels(t *testing.T) {
	e := setup(t)
	dir := t.TempDir()
	rubricModel := filepath.Join(e.models, "rubric")
	run(t, e.bin, "model", "init", "--arch", "qwen3", "--preset", "tiny", "--seed", "3", "--out", rubricModel)
	runDir := filepath.Join(dir, "run")
	run(t, e.bin, "run", "--config", e.writeConfig(t, dir), "--run-dir", runDir, "--steps", "4", "--rubric-generator-model", rubricModel,
		"--rubric-generator-threads", "1", "--rubric-generator-disable-thinking")
	for _, f := range []string{"policy/model.safetensors", "policy_optimizer.safetensors", "rubric_generator/model.safetensors", "rubric_generator_optimizer.safetensors", "replay.parquet"} {
		if _, err := os.Stat(filepath.Join(runDir, "checkpoints", "step-000004", f)); err != nil {
			t.Errorf("two-model checkpoint: %v", err)
		}
	}
	models := map[string]map[string]bool{}
	for _, r := range readTable(t, runDir, schemas.Rollouts) {
		if models[r.Role] == nil {
			models[r.Role] = map[string]bool{}
		}
		models[r.Role][r.Model] = true
	}
	if diff := cmp.Diff(map[string]map[string]bool{
		schemas.RolePolicy: {"policy": true}, schemas.RoleRubricGenerator: {"rubric_generator": true},
	}, models); diff != "" {
		t.Errorf("models per role (-want +got):\n%s", diff)
	}
	// The rubric generator is trained in its own phase.
	if d := compareWeights(t, filepath.Join(e.models, "rubric", "model.safetensors"),
		filepath.Join(runDir, "checkpoints", "step-000004", "rubric_generator", "model.safetensors")); d == 0 {
		t.Error("the rubric generator's weights never changed in the rubric steps")
	}
}

// TestE2EDemoPreset runs `make demo`'s commands with the shipped preset
// (stages/presets/demo.yaml), only pointing its model and data paths into a
// temp dir and cutting the run to 4 steps.
func TestE2EDemoPreset(t *testing.T) {
	e := setup(t)
	root := testutil.Root(t)
	preset := filepath.Join(root, "stages", "presets", "demo.yaml")
	runDir := filepath.Join(t.TempDir(), "demo")
	common := []string{"--config", preset, "--run-dir", runDir, "--progress", "off", "--log-level", "warn"}
	run(t, e.bin, append([]string{"dedup", "--input", filepath.Join(root, "datasets/sample/tulu3_sample.parquet")}, common...)...)
	run(t, e.bin, append([]string{"run", "--steps", "4",
		"--policy-model", filepath.Join(e.models, "policy"), "--judge-model", filepath.Join(e.models, "judge")}, common...)...)
	run(t, e.bin, append([]string{"analyze", "rubrics"}, common...)...)
	run(t, e.bin, append([]string{"export"}, common...)...)
	steps := readTable(t, runDir, schemas.Steps)
	if len(steps) != 4 {
		t.Fatalf("demo preset run wrote %d steps rows, want 4", len(steps))
	}
	if _, err := os.Stat(filepath.Join(runDir, "checkpoints", "step-000004", "policy", "model.safetensors")); err != nil {
		t.Errorf("demo checkpoint: %v", err)
	}
}

// TestE2ELoopPaperOptionsWithLoRA runs the loop with the paper preset's
// fidelity options (the official age clock and fallback, active sampling in
// both phases, every group in the replay buffer, each phase's own prompt
// order, a frozen copy of the initial model inferring questions, population
// std, fill_mean in the rubric phase, pack loss norm, lenient R_format, the
// official judge reading, rubric-phase sampling) and the non-stop penalty
// on a LoRA adapter with gradient checkpointing, and checks that a run
// stopped after 4 steps and resumed to 6 ends with the same adapter as an
// uninterrupted one.
func TestE2ELoopPaperOptionsWithLoRA(t *testing.T) {
	e := setup(t)
	dir := t.TempDir()
	base := e.writeConfig(t, dir)
	b, err := os.ReadFile(base)
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.Replace(string(b), "    seed: 11\n", `    seed: 11
    temporal_age: newest_global
    temporal_fallback: official
    active_sampling: true
    rubric_active_sampling: true
    active_sampling_rounds: 2
    replay_fill: every_group
    prompt_order: replay
    backtranslate_source: frozen_initial
    adv_std: population
    rubric_missing_reward: fill_mean
    loss_norm: pack
    pack_length: 64
    non_stop_penalty: true
    rubric_phase_temperature: 1.0
    rubric_phase_top_p: 0.95
    lora_rank: 4
    lora_alpha: 8
    grad_checkpointing: true
`, 1)
	cfg += "rubric:\n  format: lenient\n  judge_reply: official\n"
	cfgPath := filepath.Join(dir, "paper-options.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	ref := filepath.Join(dir, "ref")
	run(t, e.bin, "run", "--config", cfgPath, "--run-dir", ref)
	split := filepath.Join(dir, "split")
	run(t, e.bin, "run", "--config", cfgPath, "--run-dir", split, "--steps", "4")
	run(t, e.bin, "run", "--resume", split, "--steps", "6")

	for _, ck := range []string{"step-000002", "step-000004", "step-000006"} {
		for _, f := range []string{"policy/adapter_config.json", "policy/adapter_model.safetensors", "policy_optimizer.safetensors", "state.json"} {
			if _, err := os.Stat(filepath.Join(ref, "checkpoints", ck, f)); err != nil {
				t.Errorf("LoRA checkpoint %s: %v", ck, err)
			}
		}
		if _, err := os.Stat(filepath.Join(ref, "checkpoints", ck, "policy", "model.safetensors")); err == nil {
			t.Errorf("LoRA checkpoint %s holds the whole model", ck)
		}
	}
	want, err := os.ReadFile(filepath.Join(ref, "checkpoints", "step-000006", "policy", "adapter_model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(split, "checkpoints", "step-000006", "policy", "adapter_model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("LoRA adapter after resuming at step 4 differs from the uninterrupted run's")
	}

	steps := readTable(t, ref, schemas.Steps)
	if len(steps) != 6 {
		t.Fatalf("%d steps rows, want 6", len(steps))
	}
	for _, s := range steps {
		if s.GroupsTrained > 6 || s.RefillRounds > 2 || (s.RefillRounds == 0) != (s.RefillPrompts == 0) {
			t.Errorf("step %d: groups_trained %d, refill rounds %d, refill prompts %d (prompts_per_step 6, at most 2 rounds)",
				s.Step, s.GroupsTrained, s.RefillRounds, s.RefillPrompts)
		}
		if s.Phase == schemas.PhasePolicy && s.GroupsTrained < 6 && s.RefillRounds < 2 && s.ZeroStdFrac > 0 {
			t.Errorf("step %d: %d groups trained with %d of 2 refill rounds run", s.Step, s.GroupsTrained, s.RefillRounds)
		}
	}
	rolls := readTable(t, ref, schemas.Rollouts)
	for _, r := range rolls {
		if r.Phase == schemas.PhaseRubric && r.Role == schemas.RoleRubricGenerator && r.Temperature != 1.0 {
			t.Errorf("rubric-phase rubric %s sampled at temperature %v, want rubric_phase_temperature 1.0", r.RolloutID, r.Temperature)
			break
		}
	}
	for _, p := range readTable(t, ref, schemas.Pairs) {
		if p.Strategy == schemas.StrategyTemporal && (p.TemporalFallback == nil || p.TemporalAge == nil) {
			t.Errorf("temporal pair %s: fallback stage and age not recorded", p.PairID)
		}
	}
}
