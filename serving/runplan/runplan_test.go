package runplan_test

import (
	"strings"
	"testing"

	"github.com/evolm/evolm/serving/backend"
	_ "github.com/evolm/evolm/serving/torchbe" // the torch backend (its placement)

	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/plan"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/serving/runplan"
	_ "github.com/evolm/evolm/stages/dedup" // the preset configures it
	_ "github.com/evolm/evolm/stages/rollout"
	_ "github.com/evolm/evolm/stages/rubrics"
	"github.com/evolm/evolm/stages/run"
)

// learner is the learner `evolm run` builds from cfg.
func learner(t *testing.T, cfg *pipeline.Config) backend.LearnerConfig {
	t.Helper()
	spec, _ := pipeline.Lookup(run.Name)
	c, err := run.FromConfig(pipeline.StageView(cfg, spec))
	if err != nil {
		t.Fatal(err)
	}
	return c.Learner
}

// TestPaperInput: the paper preset's models resolve to the qwen3-8b and
// qwen3-1.7b presets by name, in bf16 on CUDA with the judge in process;
// the sequences follow the roles' max_tokens; the learner keys take their
// defaults, or the values set over the config.
func TestPaperInput(t *testing.T) {
	cfg, err := pipeline.LoadConfig(pipeline.LoadOptions{File: testutil.Root(t) + "/stages/presets/paper.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	lc := learner(t, cfg)
	in, src, err := runplan.Input(cfg, lc, runplan.Options{})
	if err != nil {
		t.Fatal(err)
	}
	q8, _ := model.PresetConfig("qwen3", "qwen3-8b", model.QwenVocabSize)
	q17, _ := model.PresetConfig("qwen3", "qwen3-1.7b", model.QwenVocabSize)
	if in.Policy != plan.ShapeOf(q8) || in.Judge == nil || *in.Judge != plan.ShapeOf(q17) || in.RubricGenerator != nil {
		t.Errorf("shapes: policy %+v, judge %v, rubric generator %v", in.Policy, in.Judge, in.RubricGenerator)
	}
	if src.Policy != "preset qwen3-8b" || !strings.Contains(src.RubricGenerator, "shared") {
		t.Errorf("sources %+v", src)
	}
	// Budgets of 16,384 tokens per role: an answer or a rubric is trained at
	// 1024 + 16384; back-translation generates from a whole answer,
	// 1024 + 2·16384; the judge reads question, answer and a rubric of at
	// most its budget, as written, and writes 16,384.
	const budget = 16384
	if !in.CUDA || in.ParamBytes != 2 || in.JudgeBytes != 2 || in.SeqLen != 1024+budget || in.GenTokens != 1024+2*budget || in.JudgeTok != 1024+3*budget {
		t.Errorf("input %+v", in)
	}
	if in.MicroBatch != 4 || in.Beta != 0.001 || in.LoRA.Rank != 0 || !in.GradCheckpointing || in.GenRows != 64 {
		t.Errorf("learner %+v", in)
	}
	lc.LoRA, lc.GradCheckpointing = backend.LoRAConfig{Rank: 64, Alpha: 16, Targets: []string{"q_proj", "v_proj"}}, true
	in, _, err = runplan.Input(cfg, lc, runplan.Options{PromptTokens: 10})
	if err != nil {
		t.Fatal(err)
	}
	if in.LoRA.Rank != 64 || len(in.LoRA.Targets) != 2 || !in.GradCheckpointing || in.SeqLen != 10+budget {
		t.Errorf("with overrides: %+v", in)
	}
	// truncate_prompt_tokens caps what each role reads: the policy's
	// prompts at 512, the judge's at 4,096.
	cut, err := pipeline.LoadConfig(pipeline.LoadOptions{File: testutil.Root(t) + "/stages/presets/paper.yaml",
		Env: []string{"EVOLM_ROLES_POLICY_TRUNCATE_PROMPT_TOKENS=512", "EVOLM_ROLES_JUDGE_TRUNCATE_PROMPT_TOKENS=4096"}})
	if err != nil {
		t.Fatal(err)
	}
	if in, _, err = runplan.Input(cut, learner(t, cut), runplan.Options{}); err != nil {
		t.Fatal(err)
	}
	// The rubric generator keeps whole prompts: its sequences are the longest.
	if in.SeqLen != 1024+budget || in.GenTokens != 1024+budget || in.JudgeTok != 4096+budget {
		t.Errorf("with truncate_prompt_tokens: %+v", in)
	}
	// The paper's back-translation source is a frozen copy of the initial
	// policy: the plan holds it beside the policy, P parameters in bf16.
	in, _, err = runplan.Input(cfg, learner(t, cfg), runplan.Options{FrozenInferrer: true})
	if err != nil || in.Inferrer == nil || *in.Inferrer != in.Policy {
		t.Fatalf("frozen inferrer: %+v, %v", in.Inferrer, err)
	}
	with, without := plan.Estimate(in), plan.Estimate(func() plan.Input { c := in; c.Inferrer = nil; return c }())
	if d := with.Total - without.Total; d != in.Policy.Params()*2 {
		t.Errorf("the frozen inferrer adds %d bytes, want %d (P × 2)", d, in.Policy.Params()*2)
	}
	// A model that is neither a checkpoint nor a preset name is an error naming the key.
	if _, _, err := runplan.ShapeOf("models/NoSuchModel"); err == nil || !strings.Contains(err.Error(), "not a preset") {
		t.Errorf("unknown model: %v", err)
	}
}

// TestRefuse: a plan larger than the capacity is refused with the plan in
// the error.
func TestRefuse(t *testing.T) {
	cfg, err := pipeline.LoadConfig(pipeline.LoadOptions{File: testutil.Root(t) + "/stages/presets/paper.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	p, _, err := runplan.ForRun(cfg, learner(t, cfg), runplan.Options{Capacity: 80 << 30})
	if err != nil {
		t.Fatal(err)
	}
	if p.Fits() {
		t.Fatalf("full fine-tuning of Qwen3-8B fits 80 GiB: %s", plan.GiB(p.Total))
	}
	p, _, err = runplan.ForRun(cfg, learner(t, cfg), runplan.Options{Capacity: 1 << 50})
	if err != nil || !p.Fits() {
		t.Fatalf("1 PiB: fits %v, %v", p.Fits(), err)
	}
}
