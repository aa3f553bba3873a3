package schemas

import (
	"strings"

	"github.com/evolm/evolm/internal/jsonobj"
)

// Rubric format (R_format, README.md, "The method"). A rubric generator's output is JSON of the form
//
//	{"criteria": [{"criterion": "…", "weight": 0.4, "scoring_levels": {…}}, …]}
//
// possibly preceded by <think>…</think> reasoning and surrounded by prose or a
// ```json fence. ValidateRubric decides R_format.

// RubricDoc is the rubric JSON document.
type RubricDoc struct {
	Criteria []RubricItem `json:"criteria"`
}

// RubricItem is one criterion of a RubricDoc. ScoringLevels is free-form.
type RubricItem struct {
	Criterion     string         `json:"criterion"`
	Weight        float64        `json:"weight"`
	ScoringLevels map[string]any `json:"scoring_levels,omitempty"`
}

// Rubric format rules.
const (
	MinCriteria     = 2
	WeightSumTol    = 0.15
	weightSumEpsilo = 1e-9 // float slack so that a sum of exactly 1.15 passes
)

// ErrNoJSON is returned (wrapped) when no JSON object can be extracted.
var ErrNoJSON = jsonobj.ErrNoJSON

// ValidateRubric applies the R_format rules to a generator's raw output:
//
//  1. a JSON object can be extracted once every <think>…</think> is stripped;
//  2. it has "criteria" with at least 2 entries;
//  3. every entry has a non-empty string "criterion" and a numeric "weight" > 0;
//  4. the weights sum to 1 ± 0.15.
//
// It returns the parsed criteria when rules 1–3 hold (even if rule 4 fails),
// and a nil error exactly when R_format = 1. The error text says which rule
// failed and is what the rubrics table stores as parse_error.
func ValidateRubric(raw string) ([]Criterion, error) {
	return ValidateRubricAs(raw, FormatStrict)
}

// RFormat is 1 when raw passes ValidateRubric and 0 otherwise.
func RFormat(raw string) float64 {
	if _, err := ValidateRubric(raw); err != nil {
		return 0
	}
	return 1
}

// StripThink removes every <think>…</think> block. An unclosed <think> drops
// the rest of the text; a stray </think> (the template opened the block)
// drops everything before it.
func StripThink(s string) string {
	for {
		i := strings.Index(s, "<think>")
		j := strings.Index(s, "</think>")
		switch {
		case i < 0 && j < 0:
			return s
		case j >= 0 && (i < 0 || j < i):
			s = s[j+len("</think>"):]
		case j < 0:
			return s[:i]
		default:
			s = s[:i] + s[j+len("</think>"):]
		}
	}
}
