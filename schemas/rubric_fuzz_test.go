package schemas

import (
	"math"
	"strings"
	"testing"
)

// FuzzValidateRubric checks the rubric parser and R_format on arbitrary
// generator output: no panic, and whatever it accepts obeys every R_format
// rule (README.md, "The method"), checked here independently of the parser.
func FuzzValidateRubric(f *testing.F) {
	for _, s := range []string{
		`{"criteria": [{"criterion": "a", "weight": 0.5}, {"criterion": "b", "weight": 0.5}]}`,
		"<think>x</think>```json\n{\"criteria\": [{\"criterion\": \"a\", \"weight\": 0.6, \"scoring_levels\": {\"1\": \"ok\"}}, {\"criterion\": \"b\", \"weight\": 0.4}]}\n```",
		`prose {"criteria": [{"criterion": "a", "weight": 1e308}, {"criterion": "b", "weight": 1e308}]} more`,
		`{"criteria": [{"criterion": " ", "weight": 0.5}, {"criterion": "b", "weight": 0.5}]}`,
		`{"criteria": [{"criterion": "a", "weight": "0.5"}, {"criterion": "b", "weight": -0.5}]}`,
		`</think>{"criteria": []}<think>`,
		`{"a": "{\"criteria\": 1}"} {"criteria": [{"criterion": "\u00e9", "weight": 0.3}, {"criterion": "b", "weight": 0.7}]}`,
		`{{{{"criteria"`,
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		crit, err := ValidateRubric(raw)
		if got, want := RFormat(raw), map[bool]float64{true: 1, false: 0}[err == nil]; got != want {
			t.Fatalf("RFormat = %v but ValidateRubric error = %v", got, err)
		}
		stripped := StripThink(raw)
		if strings.Contains(stripped, "<think>") || strings.Contains(stripped, "</think>") {
			t.Fatalf("StripThink(%q) = %q still holds a think tag", raw, stripped)
		}
		if err != nil && crit == nil {
			return
		}
		if len(crit) < MinCriteria {
			t.Fatalf("%d criteria returned, want at least %d", len(crit), MinCriteria)
		}
		sum := 0.0
		for i, c := range crit {
			if strings.TrimSpace(c.Criterion) == "" {
				t.Fatalf("criterion %d is empty", i)
			}
			if !(c.Weight > 0) || math.IsInf(c.Weight, 0) {
				t.Fatalf("criterion %d has weight %v", i, c.Weight)
			}
			sum += c.Weight
		}
		if err == nil && !(math.Abs(sum-1) <= WeightSumTol+1e-6) {
			t.Fatalf("accepted a rubric whose weights sum to %v", sum)
		}
		if err != nil && math.Abs(sum-1) <= WeightSumTol-1e-6 {
			t.Fatalf("rejected a rubric whose weights sum to %v: %v", sum, err)
		}
	})
}
