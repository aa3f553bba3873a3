package roles_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/serving/backend"
	_ "github.com/evolm/evolm/serving/openai" // registers the openai backend
	"github.com/evolm/evolm/serving/roles"
)

func policy(t *testing.T, env ...string) (roles.Config, error) {
	t.Helper()
	cfg, err := pipeline.LoadConfig(pipeline.LoadOptions{Env: append([]string{"EVOLM_ROLES_POLICY_BACKEND=openai",
		"EVOLM_ROLES_POLICY_MODEL=m", "EVOLM_ROLES_POLICY_ENDPOINTS=http://127.0.0.1:1/v1"}, env...)})
	if err != nil {
		return roles.Config{}, err
	}
	return roles.Read(cfg, roles.Policy)
}

// TestSamplingKeys: vLLM's sampling controls and the response format are
// role keys, read into the role's backend.Sampling (which every stage
// hands to its backend), and checked.
func TestSamplingKeys(t *testing.T) {
	schema := filepath.Join(t.TempDir(), "rubric.schema.json")
	if err := os.WriteFile(schema, []byte(`{"type": "object"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := policy(t, "EVOLM_ROLES_POLICY_MIN_P=0.05", "EVOLM_ROLES_POLICY_REPETITION_PENALTY=1.1", "EVOLM_ROLES_POLICY_PRESENCE_PENALTY=0.5",
		"EVOLM_ROLES_POLICY_FREQUENCY_PENALTY=-0.5", "EVOLM_ROLES_POLICY_MIN_TOKENS=3", "EVOLM_ROLES_POLICY_STOP_TOKEN_IDS=7,9",
		"EVOLM_ROLES_POLICY_INCLUDE_STOP_STR_IN_OUTPUT=true", "EVOLM_ROLES_POLICY_SKIP_SPECIAL_TOKENS=false",
		"EVOLM_ROLES_POLICY_TRUNCATE_PROMPT_TOKENS=100", "EVOLM_ROLES_POLICY_RESPONSE_FORMAT="+schema)
	if err != nil {
		t.Fatal(err)
	}
	s := c.Sampling
	want := backend.Sampling{MaxTokens: s.MaxTokens, Temperature: s.Temperature, TopP: s.TopP, Stop: s.Stop, MinP: 0.05, RepetitionPenalty: 1.1,
		PresencePenalty: 0.5, FrequencyPenalty: -0.5, MinTokens: 3, StopTokenIDs: []int{7, 9}, IncludeStopStr: true, KeepSpecialTokens: true,
		TruncatePromptTokens: 100, Format: &backend.OutputFormat{Type: backend.FormatJSONSchema, Schema: []byte(`{"type": "object"}`)}}
	if diff := cmp.Diff(want, s); diff != "" {
		t.Errorf("sampling (-want +got):\n%s", diff)
	}
	// The defaults are vLLM's (nothing constrained: the paper's).
	c, err = policy(t)
	if err != nil {
		t.Fatal(err)
	}
	if s := c.Sampling; s.RepetitionPenalty != 1 || s.MinP != 0 || s.KeepSpecialTokens || s.Format != nil || s.MinTokens != 0 {
		t.Errorf("defaults: %+v", s)
	}
	for _, tc := range []struct{ env, want string }{
		{"EVOLM_ROLES_POLICY_STOP_TOKEN_IDS=7,x", "roles.policy.stop_token_ids"},
		{"EVOLM_ROLES_POLICY_MIN_TOKENS=5000", "roles.policy.min_tokens"},
		{"EVOLM_ROLES_POLICY_RESPONSE_FORMAT=/no/such/schema.json", "roles.policy.response_format"},
		{"EVOLM_ROLES_POLICY_REPETITION_PENALTY=0", "repetition_penalty"},
	} {
		if _, err := policy(t, tc.env); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %s", tc.env, err, tc.want)
		}
	}
}
