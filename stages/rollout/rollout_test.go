package rollout

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/pipeline/pipelinetest"
	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/serving/backend"
)

func TestConversation(t *testing.T) {
	user := []schemas.Message{{Role: "user", Content: "hi"}}
	withSys := []schemas.Message{{Role: "system", Content: "own"}, {Role: "user", Content: "hi"}}
	for _, tc := range []struct {
		name   string
		p      schemas.Prompt
		system string
		want   []backend.Message
	}{
		{"messages, no system prompt", schemas.Prompt{Prompt: "hi", Messages: user}, "", []backend.Message{{Role: "user", Content: "hi"}}},
		{"system prompt prepended", schemas.Prompt{Prompt: "hi", Messages: user}, "sys",
			[]backend.Message{{Role: "system", Content: "sys"}, {Role: "user", Content: "hi"}}},
		{"the prompt's own system turn wins", schemas.Prompt{Prompt: "hi", Messages: withSys}, "sys",
			[]backend.Message{{Role: "system", Content: "own"}, {Role: "user", Content: "hi"}}},
		{"no messages: the prompt text as one user turn", schemas.Prompt{Prompt: "q"}, "", []backend.Message{{Role: "user", Content: "q"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if d := cmp.Diff(tc.want, Conversation(&tc.p, tc.system)); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		values map[string]any
		want   string
	}{
		{map[string]any{"roles.policy.model": "m", "n": 0}, "stages.rollout.n"},
		{map[string]any{"roles.policy.model": "m", "roles.policy.max_tokens": -1}, "roles.policy.max_tokens"},
		{map[string]any{"roles.policy.model": "m", "roles.policy.top_p": 0.0}, "roles.policy.top_p"},
		{map[string]any{"roles.policy.model": "m", "roles.policy.stop": []string{""}}, "roles.policy.stop"},
		{map[string]any{"roles.policy.model": "m", "roles.policy.backend": "vllm"}, "roles.policy.backend"},
		{map[string]any{}, "roles.policy.model"},
	} {
		cfg, err := pipeline.StageConfig(Name, tc.values)
		if err == nil {
			_, err = newFromConfig(cfg)
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want it to name %s", tc.values, err, tc.want)
		}
	}
}

// TestPolicyPromptVariant: roles.policy.prompt_variant chooses the policy's
// system prompt: none (the default) sends none, assistant the official
// code's one-line assistant prompt; the variant is in the prompt's version.
func TestPolicyPromptVariant(t *testing.T) {
	for _, tc := range []struct {
		variant, system, version string
	}{
		{"", "", "policy.none@v1+"},
		{"none", "", "policy.none@v1+"},
		{"assistant", "You are a helpful assistant.", "policy.assistant@v1+"},
	} {
		values := map[string]any{"roles.policy.model": "m"}
		if tc.variant != "" {
			values["roles.policy.prompt_variant"] = tc.variant
		}
		s := pipelinetest.FromConfig(t, Name, values, newFromConfig)
		if sys, err := s.prompts.Policy(); err != nil || sys != tc.system {
			t.Errorf("variant %q: system prompt %q, %v; want %q", tc.variant, sys, err, tc.system)
		}
		if v := s.prompts.Versions()["policy"]; !strings.HasPrefix(v, tc.version) {
			t.Errorf("variant %q: version %q, want %s…", tc.variant, v, tc.version)
		}
	}
	cfg, err := pipeline.StageConfig(Name, map[string]any{"roles.policy.model": "m", "roles.policy.prompt_variant": "official"})
	if err == nil {
		_, err = newFromConfig(cfg)
	}
	if err == nil || !strings.Contains(err.Error(), "roles.policy.prompt_variant") {
		t.Errorf("policy variant official: error %v, want it to name roles.policy.prompt_variant", err)
	}
}
