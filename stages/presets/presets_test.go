package presets_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/pipeline"
	_ "github.com/evolm/evolm/serving/openai"  // the backends' keys of the role sections
	_ "github.com/evolm/evolm/serving/torchbe" // (device, disable_thinking, …)
	_ "github.com/evolm/evolm/stages/dedup"
	_ "github.com/evolm/evolm/stages/judge"
	"github.com/evolm/evolm/stages/presets"
	_ "github.com/evolm/evolm/stages/rollout"
	_ "github.com/evolm/evolm/stages/rubrics"
	_ "github.com/evolm/evolm/stages/run"
)

func TestPresetsLoadAndBuildEveryStage(t *testing.T) {
	if d := cmp.Diff([]string{"demo", "paper", "toyworld"}, presets.Names()); d != "" {
		t.Fatalf("presets (-want +got):\n%s", d)
	}
	want := map[string]map[string]any{
		"paper": {
			"roles.policy.model": "models/Qwen3-8B", "roles.policy.temperature": 1.0, "roles.policy.device": "cuda",
			"roles.rubric_generator.model": "", "roles.rubric_generator.temperature": 0.6,
			"roles.judge.model": "models/Qwen3-1.7B", "roles.judge.mode": "generative", "roles.judge.temperature": 0.6,
			"stages.rollout.n": 8, "stages.run.k": 50, "stages.run.samples": 8, "stages.run.alpha": 0.7, "stages.run.lr": 1e-6,
			"stages.run.beta": 0.001, "stages.run.checkpoint_every": 25, "stages.run.prompts_per_step": 64,
		},
		"demo": {
			"stages.rollout.n": 2, "roles.policy.max_tokens": 24, "roles.judge.mode": "yesno",
			"roles.policy.model": "runs/demo-models/policy", "roles.judge.model": "runs/demo-models/judge",
			"roles.rubric_generator.model": "",
		},
		"toyworld": {
			"roles.policy.model": "runs/toyworld/models/policy", "roles.judge.model": "runs/toyworld/models/judge",
			"roles.judge.mode": "yesno", "roles.rubric_generator.model": "", "stages.run.alpha": 0.7,
			"stages.run.rubric_reward": "margin", "stages.run.policy_reward": "judge_score",
			"stages.run.strategies": []string{"temporal", "backtranslate", "rubric_guided"},
		},
	}
	// toyworld's prompt files are named from the repository root, where make runs.
	t.Chdir(testutil.Root(t))
	for _, name := range presets.Names() {
		t.Run(name, func(t *testing.T) {
			path, err := presets.WriteFile(name, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := pipeline.LoadConfig(pipeline.LoadOptions{File: path})
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]any{}
			for k := range want[name] {
				got[k] = cfg.Get(k)
			}
			if d := cmp.Diff(want[name], got); d != "" {
				t.Errorf("values (-want +got):\n%s", d)
			}
			for _, stage := range []string{"rollout", "rubrics", "judge", "run"} {
				spec, _ := pipeline.Lookup(stage)
				if _, err := spec.New(pipeline.StageView(cfg, spec)); err != nil {
					t.Errorf("stage %s: %v", stage, err)
				}
			}
		})
	}
	if _, err := presets.YAML("nope"); err == nil || !strings.Contains(err.Error(), "demo, paper, toyworld") {
		t.Errorf("unknown preset error = %v", err)
	}
}
