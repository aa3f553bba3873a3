package rubrics

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/schemas"
)

func TestFromRollout(t *testing.T) {
	str := func(s string) *string { return &s }
	good := `<think>weights must sum to one</think>{"criteria": [{"criterion": "Gives 42.", "weight": 0.7}, {"criterion": "Shows work.", "weight": 0.3}]}`
	for _, tc := range []struct {
		name string
		in   schemas.Rollout
		want schemas.Rubric
	}{
		{"valid after think", schemas.Rollout{RolloutID: "r", PromptID: "q", Text: good},
			schemas.Rubric{RubricID: "r", ItemID: "q", RolloutID: "r", RawText: good, FormatOK: true,
				Criteria: []schemas.Criterion{{Criterion: "Gives 42.", Weight: 0.7}, {Criterion: "Shows work.", Weight: 0.3}}}},
		{"weights off keep criteria", schemas.Rollout{RolloutID: "r", PromptID: "q", Text: `{"criteria": [{"criterion": "a", "weight": 2}, {"criterion": "b", "weight": 2}]}`},
			schemas.Rubric{RubricID: "r", ItemID: "q", RolloutID: "r", RawText: `{"criteria": [{"criterion": "a", "weight": 2}, {"criterion": "b", "weight": 2}]}`,
				Criteria: []schemas.Criterion{{Criterion: "a", Weight: 2}, {Criterion: "b", Weight: 2}}, ParseError: str("weights sum to 4, want 1 ± 0.15")}},
		{"no json", schemas.Rollout{RolloutID: "r", PromptID: "q", Text: "no idea"},
			schemas.Rubric{RubricID: "r", ItemID: "q", RolloutID: "r", RawText: "no idea", Criteria: []schemas.Criterion{}, ParseError: str("no JSON object found")}},
		{"generation failed", schemas.Rollout{RolloutID: "r", PromptID: "q", FinishReason: "error", Error: str("backend rejected: HTTP 400")},
			schemas.Rubric{RubricID: "r", ItemID: "q", RolloutID: "r", Criteria: []schemas.Criterion{}, ParseError: str("generation failed: backend rejected: HTTP 400")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if d := cmp.Diff(tc.want, FromRollout(&tc.in)); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}
