package analyze_test

import (
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/stages/analyze"
)

// The official definitions on labelled criteria, with the edge cases of the
// official script's patterns.
func TestOfficialClasses(t *testing.T) {
	for _, tc := range []struct {
		text                        string
		label, specific, constraint bool
	}{
		// label-only: <= 40 code points.
		{text: strings.Repeat("a", 40), label: true},
		{text: strings.Repeat("a", 41)},
		{text: strings.Repeat("é", 40), label: true}, // 80 bytes, 40 characters
		{text: strings.Repeat("é", 41)},
		{text: strings.Repeat("😀", 40), label: true},
		{text: "", label: true},
		{text: "Accuracy", label: true},
		// specific: a digit, "= ", "equals ", formula, equation, code,
		// pattern, exact, verbatim (case-insensitive).
		{text: "States that the boiling point is 3.5 degrees Celsius", specific: true},
		{text: "x=3", label: true, specific: true},                        // the digit
		{text: "Writes the result as x = y", label: true, specific: true}, // "= " with a space
		{text: "Writes the result as x =y", label: true},                  // "=" without one
		{text: "Writes the result as x=", label: true},                    // "=" at the end: no space
		{text: "The total equals forty", label: true, specific: true},
		{text: "The total equals", label: true}, // "equals" needs its space
		{text: "Gives the FORMULA for the area", label: true, specific: true},
		{text: "Mentions the quadratic Equation", label: true, specific: true},
		{text: "Includes runnable Python", label: true},
		{text: "Decodes the message", label: true, specific: true}, // "code" inside a word counts
		{text: "Matches the exact wording", label: true, specific: true},
		{text: "Quotes the passage verbatim", label: true, specific: true},
		{text: "Lists the patterns", label: true, specific: true},
		{text: "Uses Arabic-Indic digit ٣", label: true, specific: true}, // Python's \d is any Nd digit
		{text: "Uses superscript ²", label: true},                        // No, not Nd: no digit for \d
		// constraint.
		{text: "Does not mention the competitor", label: true}, // "does not" is no constraint word
		{text: "Do not mention the competitor", label: true, constraint: true},
		{text: "Donot mention the competitor", label: true}, // "donot"
		{text: "It must not be rude", label: true, constraint: true},
		{text: "It should not be rude", label: true, constraint: true},
		{text: "It shouldn't be rude", label: true},
		{text: "Avoided jargon", label: true, constraint: true},
		{text: "Avoids jargon", label: true, constraint: true},
		{text: "Unavoidable caveats are stated", label: true}, // no boundary before "avoid"
		{text: "Excluding the intro", label: true, constraint: true},
		{text: "Exclusion of ads", label: true}, // "exclus" is not "exclud"
		{text: "Uses the keyword 'apple'", label: true, constraint: true},
		{text: "Uses the keywords", label: true}, // \bkeyword\b: not "keywords"
		{text: "Prohibits slurs", label: true},   // \bprohibit\b: not "prohibits"
		{text: "Slurs are prohibit", label: true, constraint: true},
		{text: "restricts the scope", label: true},
		{text: "Stays within the restrict zone", label: true, constraint: true},
		{text: "Forbidden topics are skipped", label: true, constraint: true},
		{text: "do_not repeat", label: true},     // _ is a word character: no \b after "do"
		{text: "_avoid repetition", label: true}, // nor before "avoid"
		{text: "(avoid) repetition", label: true, constraint: true},
		{text: "DO NOT repeat", label: true, constraint: true},
		{text: "do  not repeat", label: true}, // two spaces
		// non-ASCII, as Python's re (Unicode \w, \b, IGNORECASE) reads them.
		{text: "éavoid repetition", label: true},                        // é is a word character: no \b
		{text: "\u0301avoid repetition", label: true, constraint: true}, // a combining mark is not
		{text: "avoidé", label: true, constraint: true},
		{text: "AVOİD repetition", label: true, constraint: true},  // İ matches i
		{text: "avoıd repetition", label: true, constraint: true},  // so does ı
		{text: "muſt not repeat", label: true, constraint: true},   // ſ matches s
		{text: "\u212Aeyword only", label: true, constraint: true}, // the Kelvin sign matches k
		{text: "ⅻdo not", label: true},                             // Ⅻ is numeric: a word character
	} {
		got := [3]bool{analyze.IsLabelOnly(tc.text), analyze.IsSpecific(tc.text), analyze.IsConstraint(tc.text)}
		if want := [3]bool{tc.label, tc.specific, tc.constraint}; got != want {
			t.Errorf("%q: (label, specific, constraint) = %v, want %v", tc.text, got, want)
		}
	}
}

func TestOfficialCriteria(t *testing.T) {
	for _, tc := range []struct {
		name, raw string
		want      []string
	}{
		{"json", `{"criteria": [{"criterion": "A", "weight": 0.5}, {"criterion": "B", "weight": 0.5}]}`, []string{"A", "B"}},
		{"think and prose", "<think>draft {\"criteria\": []}</think>Here:\n```json\n{\"criteria\": [{\"criterion\": \"A\", \"weight\": 1}]}\n``` done", []string{"A"}},
		{"no criteria key", `{"rubric": [{"criterion": "A", "weight": 1}]}`, []string{}},
		{"not a list", `{"criteria": "A"}`, []string{}},
		{"entry not an object", `{"criteria": ["A", {"criterion": "B"}, {"weight": 1}]}`, []string{"", "B", ""}},
		{"numeric string weight", `{"criteria": [{"criterion": "A", "weight": "0.5"}]}`, []string{"A"}},
		{"huge number", `{"criteria": [{"criterion": "A", "weight": 1e400}]}`, []string{"A"}},
		// Invalid JSON: the regex fallback reads the pairs it can.
		{"trailing comma", `{"criteria": [{"criterion": "Says \"hi\"\nnow", "weight": 0.5,}, {"criterion": "B", "weight": 0.5}]}`,
			[]string{`Says "hi" now`, "B"}},
		{"escaped newline", `{"criteria": [{"criterion": "line\none", "weight": 1,}]}`, []string{"line one"}},
		{"weight first", `{"criteria": [{"weight": 0.5, "criterion": "A"},]}`, nil},
		{"unclosed", `{"criteria": [{"criterion": "A", "weight": 0.5}, {"criterion": "B", "wei`, []string{"A"}},
		{"only invalid JSON", `{criteria: [accuracy, clarity]}`, nil},
		{"no braces", `"criterion": "A", "weight": .5 and "criterion":"B","weight":1`, []string{"A", "B"}},
		{"empty", "", nil},
		{"only thinking", "<think>{\"criteria\": [{\"criterion\": \"A\", \"weight\": 1}]}</think>", nil},
		{"unclosed thinking", "<think>{\"criteria\": [{\"criterion\": \"A\", \"weight\": 1}]}", []string{"A"}},
	} {
		got := analyze.OfficialCriteria(tc.raw)
		if d := cmp.Diff(tc.want, got); d != "" {
			t.Errorf("%s: criteria (-want +got):\n%s", tc.name, d)
		}
	}
}

func TestOfficialRubricStats(t *testing.T) {
	cs := []string{
		"Accuracy", // label-only
		"States that the capital of Australia is Canberra, not Sydney",
		"Gives the population as about 460,000 people in 2021 census", // specific
		"Avoids listing unrelated cities or trivia about the country", // constraint
	}
	raw := `{"criteria": [{"criterion": "` + strings.Join(cs, `", "weight": 0.25}, {"criterion": "`) + `", "weight": 0.25}]}`
	got := analyze.OfficialRubricStats(raw)
	chars := 0
	for _, c := range cs {
		chars += len(c)
	}
	want := analyze.OfficialRubric{Criteria: 4, AvgCriterionLen: float64(chars) / 4, LabelOnlyPct: 25, SpecificPct: 25, ConstraintPct: 25}
	if got != want {
		t.Errorf("stats %+v, want %+v", got, want)
	}
	// A rubric without criteria (none, or only invalid JSON) counts 0 for
	// every figure.
	for _, raw := range []string{`{"criteria": []}`, "{criteria: oops}", "", "I cannot write a rubric."} {
		if got := analyze.OfficialRubricStats(raw); got != (analyze.OfficialRubric{}) {
			t.Errorf("%q: %+v, want zeros", raw, got)
		}
	}
}

// The aggregate: each rubric's percentages, averaged per prompt, then over
// prompts; an empty rubric pulls its prompt's mean down.
func TestOfficialAggregate(t *testing.T) {
	rubric := func(cs ...string) string {
		var b strings.Builder
		b.WriteString(`{"criteria": [`)
		for i, c := range cs {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(`{"criterion": "` + c + `", "weight": 1}`)
		}
		b.WriteString("]}")
		return b.String()
	}
	long := "Explains the mechanism in enough detail for a student to follow"
	rows := []schemas.Rubric{
		// prompt p1, two candidates: 50% and 100% label-only → 75%.
		{ItemID: "p1", Phase: "rubric", Step: 2, RawText: rubric("Accuracy", long)},
		{ItemID: "p1", Phase: "rubric", Step: 2, RawText: rubric("Clarity")},
		// prompt p2: an empty rubric → 0%, 0 criteria.
		{ItemID: "p2", Phase: "rubric", Step: 2, RawText: "not JSON at all"},
		// another step.
		{ItemID: "p1", Phase: "policy", Step: 2, RawText: rubric("Do not use 3 words", long, long)},
	}
	var acc analyze.OfficialAccumulator
	for i := range rows {
		acc.Add(&rows[i])
	}
	got := acc.Stats()
	if len(got) != 2 || got[0].Phase != "policy" || got[1].Phase != "rubric" {
		t.Fatalf("stats %+v", got)
	}
	r := got[1]
	approx := func(name string, got, want float64) {
		if math.Abs(got-want) > 1e-9 {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if r.Rubrics != 3 || r.Prompts != 2 {
		t.Errorf("rubrics %d prompts %d, want 3, 2", r.Rubrics, r.Prompts)
	}
	approx("label_only_pct", r.LabelOnlyPct, (75+0)/2.0)
	approx("criteria_count", r.CriteriaCount, (1.5+0)/2)
	approx("avg_criterion_len", r.AvgCriterionLen, ((8+float64(len(long)))/2+7)/2/2)
	p := got[0]
	approx("policy label_only_pct", p.LabelOnlyPct, 100.0/3)
	approx("policy specific_pct", p.SpecificPct, 100.0/3)
	approx("policy constraint_pct", p.ConstraintPct, 100.0/3)
	approx("policy criteria_count", p.CriteriaCount, 3)
}
