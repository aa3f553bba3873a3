package schemas

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestValidateRubric(t *testing.T) {
	two := []Criterion{{"Accurate facts", 0.6}, {"Cites sources", 0.4}}
	tests := []struct {
		name    string
		raw     string
		want    []Criterion // nil: no criteria returned
		wantErr string      // "" means R_format = 1
	}{
		// Rule 1: a JSON object can be extracted once <think> is stripped.
		{"plain json", `{"criteria":[{"criterion":"Accurate facts","weight":0.6},{"criterion":"Cites sources","weight":0.4}]}`, two, ""},
		{"think stripped", `<think>maybe {"criteria": []} no</think>{"criteria":[{"criterion":"Accurate facts","weight":0.6},{"criterion":"Cites sources","weight":0.4}]}`, two, ""},
		{"stray close think", `reasoning {"criteria":[]} </think> {"criteria":[{"criterion":"Accurate facts","weight":0.6},{"criterion":"Cites sources","weight":0.4}]}`, two, ""},
		{"unclosed think drops rest", `<think>{"criteria":[{"criterion":"a","weight":0.5},{"criterion":"b","weight":0.5}]}`, nil, "no JSON object"},
		{"fenced with prose", "Here is the rubric:\n```json\n{\"criteria\":[{\"criterion\":\"Accurate facts\",\"weight\":0.6,\"scoring_levels\":{\"1\":\"all {correct}\"}},{\"criterion\":\"Cites sources\",\"weight\":0.4}]}\n```\nDone.", two, ""},
		{"braces inside strings", `x {"criteria":[{"criterion":"Accurate facts","weight":0.6},{"criterion":"Cites sources","weight":0.4}],"note":"} {"}`, two, ""},
		{"first brace not json", `use {braces} then {"criteria":[{"criterion":"Accurate facts","weight":0.6},{"criterion":"Cites sources","weight":0.4}]}`, two, ""},
		{"no json", `The response should be accurate.`, nil, "no JSON object"},
		{"truncated json", `{"criteria":[{"criterion":"a","weight":0.5},{"criterion":"b","weight":0.5}`, nil, `no "criteria" key`}, // only inner objects are complete
		{"json array not object", `[{"criterion":"a","weight":0.5},{"criterion":"b","weight":0.5}]`, nil, `no "criteria" key`},
		// Rule 2: criteria has at least 2 entries.
		{"no criteria key", `{"items":[]}`, nil, `no "criteria" key`},
		{"criteria not list", `{"criteria":{"criterion":"a","weight":1}}`, nil, "not a list"},
		{"one criterion", `{"criteria":[{"criterion":"a","weight":1.0}]}`, nil, "has 1 entries, want at least 2"},
		{"zero criteria", `{"criteria":[]}`, nil, "has 0 entries"},
		// Rule 3: each entry has a criterion and a float weight > 0.
		{"entry not object", `{"criteria":["a","b"]}`, nil, "criteria[0] is not an object"},
		{"missing criterion", `{"criteria":[{"criterion":"a","weight":0.5},{"weight":0.5}]}`, nil, `criteria[1] has no "criterion"`},
		{"criterion not string", `{"criteria":[{"criterion":3,"weight":0.5},{"criterion":"b","weight":0.5}]}`, nil, "criteria[0].criterion is not a string"},
		{"empty criterion", `{"criteria":[{"criterion":"  ","weight":0.5},{"criterion":"b","weight":0.5}]}`, nil, "criteria[0].criterion is empty"},
		{"missing weight", `{"criteria":[{"criterion":"a"},{"criterion":"b","weight":0.5}]}`, nil, `criteria[0] has no "weight"`},
		{"weight string", `{"criteria":[{"criterion":"a","weight":"0.5"},{"criterion":"b","weight":0.5}]}`, nil, "criteria[0].weight is not a number"},
		{"weight bool", `{"criteria":[{"criterion":"a","weight":true},{"criterion":"b","weight":0.5}]}`, nil, "criteria[0].weight is not a number"},
		{"weight null", `{"criteria":[{"criterion":"a","weight":0.5},{"criterion":"b","weight":null}]}`, nil, "criteria[1].weight is 0, want > 0"},
		{"weight zero", `{"criteria":[{"criterion":"a","weight":1.0},{"criterion":"b","weight":0}]}`, nil, "criteria[1].weight is 0, want > 0"},
		{"weight negative", `{"criteria":[{"criterion":"a","weight":1.2},{"criterion":"b","weight":-0.2}]}`, nil, "criteria[1].weight is -0.2, want > 0"},
		// Rule 4: weights sum to 1 ± 0.15.
		{"sum 1.15 inclusive", `{"criteria":[{"criterion":"a","weight":0.65},{"criterion":"b","weight":0.5}]}`, []Criterion{{"a", 0.65}, {"b", 0.5}}, ""},
		{"sum 0.85 inclusive", `{"criteria":[{"criterion":"a","weight":0.35},{"criterion":"b","weight":0.5}]}`, []Criterion{{"a", 0.35}, {"b", 0.5}}, ""},
		{"sum too high", `{"criteria":[{"criterion":"a","weight":0.7},{"criterion":"b","weight":0.5}]}`, []Criterion{{"a", 0.7}, {"b", 0.5}}, "weights sum to 1.2, want 1 ± 0.15"},
		{"sum too low", `{"criteria":[{"criterion":"a","weight":0.3},{"criterion":"b","weight":0.5}]}`, []Criterion{{"a", 0.3}, {"b", 0.5}}, "weights sum to 0.8"},
		{"integer points not weights", `{"criteria":[{"criterion":"a","weight":3},{"criterion":"b","weight":2}]}`, []Criterion{{"a", 3}, {"b", 2}}, "weights sum to 5"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ValidateRubric(tc.raw)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("criteria (-want +got):\n%s", diff)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("err = %v, want R_format = 1", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("err = %v, want it to contain %q", err, tc.wantErr)
			}
			wantR := 1.0
			if tc.wantErr != "" {
				wantR = 0
			}
			if r := RFormat(tc.raw); r != wantR {
				t.Errorf("RFormat = %v, want %v", r, wantR)
			}
		})
	}
}

func TestStripThink(t *testing.T) {
	tests := []struct{ in, want string }{
		{"no tags", "no tags"},
		{"<think>a</think>b", "b"},
		{"x<think>a</think>y<think>b</think>z", "xyz"},
		{"a</think>b", "b"},
		{"a<think>b", "a"},
		{"", ""},
	}
	for _, tc := range tests {
		if got := StripThink(tc.in); got != tc.want {
			t.Errorf("StripThink(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
