package run

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	_ "github.com/evolm/evolm/serving/openai"  // the openai backend
	_ "github.com/evolm/evolm/serving/torchbe" // the torch backend: its learner checks LoRA targets

	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/pipeline/pipelinetest"
	"github.com/evolm/evolm/schemas"
	_ "github.com/evolm/evolm/stages/rubrics" // the rubrics stage's moved key
)

func TestConfigErrorsNameTheKey(t *testing.T) {
	base := map[string]any{"roles.policy.model": "p", "roles.judge.model": "j"}
	tests := []struct {
		name string
		set  map[string]any
		want string // substring of the error
	}{
		{"K = 0", map[string]any{"k": 0}, "stages.run.k"},
		{"alpha above 1", map[string]any{"alpha": 1.5}, "stages.run.alpha"},
		{"alpha below 0", map[string]any{"alpha": -0.1}, "stages.run.alpha"},
		{"unknown strategy", map[string]any{"strategies": []string{"temporal", "random_pairs"}}, `unknown strategy "random_pairs"`},
		{"no strategy weight", map[string]any{"weight_temporal": 0.0, "weight_backtranslate": 0.0, "weight_rubric_guided": 0.0}, "stages.run.weight_temporal"},
		{"one sample is no group", map[string]any{"samples": 1}, "stages.run.samples"},
		{"bad window", map[string]any{"temporal_min_age": 50, "temporal_max_age": 20}, "stages.run.temporal_min_age"},
		{"openai judge without endpoints", map[string]any{"roles.judge.backend": "openai"}, "roles.judge.endpoints"},
		{"openai policy", map[string]any{"roles.policy.backend": "openai", "roles.policy.endpoints": []string{"http://x/v1"}}, "roles.policy.backend"},
		{"shared rubric generator with its own device", map[string]any{"roles.rubric_generator.device": "cuda"}, "roles.rubric_generator.device"},
		{"no policy model", map[string]any{"roles.policy.model": ""}, "roles.policy.model"},
		{"epsilon at 1", map[string]any{"epsilon": 1.0}, "stages.run.epsilon"},
		{"top_p above 1", map[string]any{"roles.rubric_generator.top_p": 1.5}, "roles.rubric_generator.top_p"},
		{"bad rubric reward", map[string]any{"rubric_reward": "hinge"}, "rubric_reward"},
		{"alpha NaN", map[string]any{"alpha": "NaN"}, "stages.run.alpha"},
		{"no skipped update allowed", map[string]any{"max_skipped_updates": 0}, "stages.run.max_skipped_updates"},
		{"huge skipped updates", map[string]any{"max_skipped_updates": 100000}, "stages.run.max_skipped_updates"},
		{"unknown age clock", map[string]any{"temporal_age": "wall_clock"}, "stages.run.temporal_age"},
		{"unknown fallback", map[string]any{"temporal_fallback": "random"}, "stages.run.temporal_fallback"},
		{"unknown adv std", map[string]any{"adv_std": "mad"}, "stages.run.adv_std"},
		{"too many refill rounds", map[string]any{"active_sampling_rounds": 1000}, "stages.run.active_sampling_rounds"},
		{"LoRA on an unknown module", map[string]any{"lora_rank": 8, "lora_targets": []string{"q", "lm_head"}}, "stages.run.lora_targets"},
		{"LoRA dropout 1", map[string]any{"lora_rank": 8, "lora_dropout": 1.0}, "stages.run.lora_dropout"},
		{"LoRA dropout with checkpointing", map[string]any{"lora_rank": 8, "lora_dropout": 0.05, "grad_checkpointing": true}, "stages.run.lora_dropout"},
		{"pack length 0", map[string]any{"pack_length": 0}, "stages.run.pack_length"},
		{"unknown R_format", map[string]any{"rubric.format": "loose"}, "rubric.format"},
		{"unknown judge reply reading", map[string]any{"rubric.judge_reply": "lenient"}, "rubric.judge_reply"},
		{"unusable rubric judged by a yes/no judge", map[string]any{"unusable_rubric": "judge", "roles.judge.mode": "yesno"}, "stages.run.unusable_rubric"},
		{"unknown prompt order", map[string]any{"prompt_order": "random"}, "stages.run.prompt_order"},
		{"unknown replay fill", map[string]any{"replay_fill": "all"}, "stages.run.replay_fill"},
		{"unknown back-translation source", map[string]any{"backtranslate_source": "judge"}, "stages.run.backtranslate_source"},
		{"huge micro batch", map[string]any{"micro_batch": 1 << 20}, "stages.run.micro_batch"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			vals := map[string]any{}
			for k, v := range base {
				vals[k] = v
			}
			for k, v := range tc.set {
				vals[k] = v
			}
			cfg, err := pipeline.StageConfig(Name, vals)
			if err == nil {
				_, err = FromConfig(cfg)
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestConfigDefaultsArePaper(t *testing.T) {
	cfg, err := pipeline.StageConfig(Name, map[string]any{"roles.policy.model": "p", "roles.judge.model": "j"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := FromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	got := []float64{float64(c.K), float64(c.Samples), float64(c.PromptsPerStep), c.Learner.LR, c.Learner.Beta, c.Learner.Epsilon,
		c.Alpha, c.Policy.Sampling.Temperature, c.RubricGen.Sampling.Temperature, c.Judge.Sampling.Temperature, c.InferTemp, float64(c.CheckpointEvery), float64(c.ReplaySize), float64(c.MinAge), float64(c.MaxAge)}
	want := []float64{50, 8, 64, 1e-6, 0.001, 0.2, 0.7, 1.0, 0.6, 0.6, 0.3, 25, 2048, 20, 100}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("default %d = %v, want %v (the paper)", i, got[i], want[i])
		}
	}
	for _, s := range schemas.Strategies {
		if c.Weights[s] != 1 {
			t.Errorf("weight of %s = %v, want 1 (1:1:1)", s, c.Weights[s])
		}
	}
	for s, want := range map[int]string{0: "policy", 49: "policy", 50: "rubric", 99: "rubric", 100: "policy"} {
		if got := c.Phase(s); got != want {
			t.Errorf("Phase(%d) = %s, want %s", s, got, want)
		}
	}
}

func TestUnusedStrategiesGetZeroWeight(t *testing.T) {
	cfg, err := pipeline.StageConfig(Name, map[string]any{"roles.policy.model": "p", "roles.judge.model": "j", "strategies": []string{"backtranslate"}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := FromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if c.Weights[schemas.StrategyTemporal] != 0 || c.Weights[schemas.StrategyRubricGuided] != 0 || c.Weights[schemas.StrategyBacktranslate] != 1 {
		t.Errorf("weights = %v", c.Weights)
	}
}

func TestQuestionTextShowsTheConversation(t *testing.T) {
	single := schemas.Prompt{Prompt: "What is 2+2?", Messages: []schemas.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "What is 2+2?"}}}
	if got := questionText(&single); got != "What is 2+2?" {
		t.Errorf("single turn: %q", got)
	}
	multi := schemas.Prompt{Prompt: "Make it shorter.", Messages: []schemas.Message{
		{Role: "user", Content: "Write a haiku about rain."}, {Role: "assistant", Content: "Rain on the tin roof"}, {Role: "user", Content: "Make it shorter."}}}
	got := questionText(&multi)
	for _, want := range []string{"Write a haiku about rain.", "[assistant]\nRain on the tin roof", "to be answered:\nMake it shorter."} {
		if !strings.Contains(got, want) {
			t.Errorf("multi-turn question %q lacks %q", got, want)
		}
	}
}

// TestRunRefusesAPlanOverTheDevice: full fine-tuning of Qwen3-8B (its
// preset shape, from the directory name) in float32 on this CPU cannot fit
// the machine's memory, so the loop refuses it before loading anything,
// with the plan and the way out; memory_check false lets it through.
func TestRunRefusesAPlanOverTheDevice(t *testing.T) {
	vals := map[string]any{"roles.policy.model": "models/Qwen3-8B", "roles.judge.model": "models/Qwen3-1.7B"}
	cfg, err := pipeline.StageConfig(Name, vals)
	if err != nil {
		t.Fatal(err)
	}
	_, err = newFromConfig(cfg)
	if err == nil {
		t.Fatal("an 8B full fine-tuning plan on this CPU was accepted")
	}
	for _, want := range []string{"does not fit", "stages.run.memory_check", "micro_batch"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal lacks %q:\n%v", want, err)
		}
	}
	vals["memory_check"] = false
	if cfg, err = pipeline.StageConfig(Name, vals); err != nil {
		t.Fatal(err)
	}
	if _, err := newFromConfig(cfg); err != nil {
		t.Errorf("memory_check false: %v", err)
	}
}

// TestRubricPhaseSamplingFollowsTheRole: unset, the rubric phase samples
// candidate rubrics with roles.rubric_generator's temperature and top_p;
// set, with the stages.run values (the paper preset's 1.0 / 0.95).
func TestRubricPhaseSamplingFollowsTheRole(t *testing.T) {
	base := map[string]any{"roles.policy.model": "p", "roles.judge.model": "j",
		"roles.rubric_generator.temperature": 0.4, "roles.rubric_generator.top_p": 0.8}
	c := pipelinetest.FromConfig(t, Name, base, FromConfig)
	if s := c.rubricPhaseSampling(); s.Temperature != 0.4 || s.TopP != 0.8 {
		t.Errorf("unset: temperature %v, top_p %v; want the role's 0.4, 0.8", s.Temperature, s.TopP)
	}
	base["rubric_phase_temperature"], base["rubric_phase_top_p"] = 1.0, 0.95
	c = pipelinetest.FromConfig(t, Name, base, FromConfig)
	if s := c.rubricPhaseSampling(); s.Temperature != 1.0 || s.TopP != 0.95 {
		t.Errorf("set: temperature %v, top_p %v; want 1.0, 0.95", s.Temperature, s.TopP)
	}
	if c.RubricGen.Sampling.Temperature != 0.4 {
		t.Errorf("the policy phase's rubric temperature changed to %v", c.RubricGen.Sampling.Temperature)
	}
}

// TestOldRubricFormatKeyNamesTheNewOne: the loop's and the rubrics stage's
// former R_format keys fail, naming the one key that replaced both.
func TestOldRubricFormatKeyNamesTheNewOne(t *testing.T) {
	for _, old := range []string{"stages:\n  run:\n    rubric_format: lenient\n", "stages:\n  rubrics:\n    format: lenient\n"} {
		p := filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(p, []byte(old), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := pipeline.LoadConfig(pipeline.LoadOptions{File: p})
		if err == nil || !strings.Contains(err.Error(), "has moved to rubric.format") {
			t.Errorf("config %q: err = %v, want one naming rubric.format", old, err)
		}
	}
}
