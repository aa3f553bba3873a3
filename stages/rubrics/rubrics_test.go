package rubrics

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/pipeline/pipelinetest"
	"github.com/evolm/evolm/schemas"
)

func TestFromRollout(t *testing.T) {
	str := func(s string) *string { return &s }
	good := `<think>weights must sum to one</think>{"criteria": [{"criterion": "Gives 42.", "weight": 0.7, "scoring_levels": {"1.0": "Gives 42", "0.0": "Another number"}}, {"criterion": "Shows work.", "weight": 0.3}]}`
	for _, tc := range []struct {
		name string
		in   schemas.Rollout
		want schemas.Rubric
	}{
		{"valid after think", schemas.Rollout{RolloutID: "r", PromptID: "q", Text: good},
			schemas.Rubric{RubricID: "r", ItemID: "q", RolloutID: "r", RawText: good, FormatOK: true,
				Criteria:      []schemas.Criterion{{Criterion: "Gives 42.", Weight: 0.7}, {Criterion: "Shows work.", Weight: 0.3}},
				ScoringLevels: [][]schemas.Level{{{Score: "1.0", Text: "Gives 42"}, {Score: "0.0", Text: "Another number"}}, {}}}},
		{"weights off keep criteria", schemas.Rollout{RolloutID: "r", PromptID: "q", Text: `{"criteria": [{"criterion": "a", "weight": 2}, {"criterion": "b", "weight": 2}]}`},
			schemas.Rubric{RubricID: "r", ItemID: "q", RolloutID: "r", RawText: `{"criteria": [{"criterion": "a", "weight": 2}, {"criterion": "b", "weight": 2}]}`,
				Criteria: []schemas.Criterion{{Criterion: "a", Weight: 2}, {Criterion: "b", Weight: 2}}, ScoringLevels: [][]schemas.Level{{}, {}},
				ParseError: str("weights sum to 4, want 1 ± 0.15")}},
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

// TestItemsPromptVariant: the rubrics stage sends the rubric generator the
// official prompt by default (the instructions as a system message, the bare
// question as the user message), evolm's first prompt when
// roles.rubric_generator.prompt_variant is evolm, and a prompt_files
// override over either.
func TestItemsPromptVariant(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	rec := schemas.Prompts.Build(mem, []schemas.Prompt{{PromptID: "p", Prompt: "How far is the Moon?", Messages: []schemas.Message{}}})
	defer rec.Release()
	override := filepath.Join(t.TempDir(), "rq.tmpl")
	if err := os.WriteFile(override, []byte("{{/* evolm-prompt name=rubric_question version=5 */ -}}\nRubric please: {{.Question}}"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		values  map[string]any
		roles   []string
		version string
		check   func(t *testing.T, sys, user string)
	}{
		{"default", nil, []string{"system", "user"}, "rubric_question.official@v3+", func(t *testing.T, sys, user string) {
			if user != "How far is the Moon?" || !strings.Contains(sys, "2 to 5 criteria") {
				t.Errorf("system %q\nuser %q", sys, user)
			}
		}},
		{"evolm", map[string]any{"roles.rubric_generator.prompt_variant": "evolm"}, []string{"user"}, "rubric_question.evolm@v1+", func(t *testing.T, _, user string) {
			if !strings.HasPrefix(user, "You are an expert evaluator.") || !strings.Contains(user, "2 to 6 criteria") || !strings.Contains(user, "<question>\nHow far is the Moon?\n</question>") {
				t.Errorf("user %q", user)
			}
		}},
		{"override wins", map[string]any{"roles.rubric_generator.prompt_variant": "evolm", "roles.rubric_generator.prompt_files": []string{"rubric_question=" + override}},
			[]string{"user"}, "rubric_question@v5+", func(t *testing.T, _, user string) {
				if user != "Rubric please: How far is the Moon?" {
					t.Errorf("user %q", user)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			values := map[string]any{"roles.policy.model": "m"}
			for k, v := range tc.values {
				values[k] = v
			}
			s := pipelinetest.FromConfig(t, Name, values, newFromConfig)
			if v := s.prompts.Versions()["rubric_question"]; !strings.HasPrefix(v, tc.version) {
				t.Errorf("version %q, want %s…", v, tc.version)
			}
			items, err := s.items(rec)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			var sys, user string
			for _, m := range items[0].Messages {
				got = append(got, m.Role)
				if m.Role == "system" {
					sys = m.Content
				} else {
					user = m.Content
				}
			}
			if d := cmp.Diff(tc.roles, got); d != "" {
				t.Fatalf("message roles (-want +got):\n%s", d)
			}
			tc.check(t, sys, user)
		})
	}
}
