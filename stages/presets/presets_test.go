package presets_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/pipeline"
	_ "github.com/evolm/evolm/stages/dedup"
	_ "github.com/evolm/evolm/stages/judge"
	_ "github.com/evolm/evolm/stages/loop"
	"github.com/evolm/evolm/stages/presets"
	_ "github.com/evolm/evolm/stages/rollout"
	_ "github.com/evolm/evolm/stages/rubrics"
)

func TestPresetsLoadAndBuildEveryStage(t *testing.T) {
	if d := cmp.Diff([]string{"demo", "paper"}, presets.Names()); d != "" {
		t.Fatalf("presets (-want +got):\n%s", d)
	}
	want := map[string]map[string]any{
		"paper": {
			"stages.rollout.n": 8, "stages.rollout.temperature": 1.0, "stages.rollout.model": "models/Qwen3-8B",
			"stages.rubrics.temperature": 0.6, "stages.rubrics.model": "models/Qwen3-8B",
			"stages.judge.model": "models/Qwen3-1.7B", "stages.judge.mode": "generative", "stages.judge.temperature": 0.6,
			"stages.run.k": 50, "stages.run.samples": 8, "stages.run.alpha": 0.7, "stages.run.lr": 1e-6, "stages.run.beta": 0.001,
			"stages.run.checkpoint_every": 25, "stages.run.prompts_per_step": 64, "stages.run.judge_mode": "generative",
		},
		"demo": {
			"stages.rollout.n": 2, "stages.rollout.max_tokens": 16, "stages.judge.mode": "yesno",
			"stages.rollout.model": "runs/demo-models/policy", "stages.judge.model": "runs/demo-models/judge",
			"stages.run.judge_mode": "yesno", "stages.run.policy_model": "runs/demo-models/policy",
		},
	}
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
			for _, stage := range []string{"rollout", "rubrics", "judge"} {
				spec, _ := pipeline.Lookup(stage)
				if _, err := spec.New(cfg.Section("stages." + stage)); err != nil {
					t.Errorf("stage %s: %v", stage, err)
				}
			}
		})
	}
	if _, err := presets.YAML("nope"); err == nil || !strings.Contains(err.Error(), "demo, paper") {
		t.Errorf("unknown preset error = %v", err)
	}
}
