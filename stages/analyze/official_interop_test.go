package analyze_test

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/stages/analyze"
)

// fragments are the pieces generated criteria are made of: the words of
// the official patterns, their near misses, and the characters on which
// Unicode and ASCII semantics differ.
var fragments = []string{
	"the answer", "States that", "Accuracy", "Clarity", "and", "the response", "explains why",
	"avoid", "Avoided", "unavoidable", "exclude", "Excluding", "exclusion", "keyword", "keywords", "KEYWORD",
	"do not", "donot", "Do Not", "does not", "must not", "mustnot", "should not", "shouldn't",
	"prohibit", "prohibits", "restrict", "restricted", "forbid", "Forbidden",
	"formula", "Equation", "CODE", "decode", "pattern", "exact", "verbatim", "equals ", "equals", "= ", "=", "x=y",
	"3.5", "42", "7.", "٣", "²", "Ⅻ",
	"é", "ı", "İ", "ſ", "\u212A", "_", "\u0301", "😀", "—", "\u00a0", "\t", "(", ")", ",", ".", ":", "'", `"`, `\`, "\n", "{", "}",
}

// genCriterion builds a criterion from random fragments, glued with or
// without spaces so that word boundaries fall on both sides of every piece.
func genCriterion(r *rand.Rand) string {
	var b strings.Builder
	for n := 1 + r.IntN(8); n > 0; n-- {
		b.WriteString(fragments[r.IntN(len(fragments))])
		if r.IntN(3) > 0 {
			b.WriteByte(' ')
		}
	}
	return b.String()
}

// genRubric builds a generator output: a JSON rubric (with thinking,
// prose, a trailing comma that breaks the JSON, a cut-off end), or no JSON.
func genRubric(r *rand.Rand) string {
	type crit struct {
		Criterion string  `json:"criterion"`
		Weight    float64 `json:"weight"`
	}
	cs := []crit{} // not null: the official script raises on "criteria": null
	for n := r.IntN(7); n > 0; n-- {
		cs = append(cs, crit{genCriterion(r), float64(r.IntN(10)) / 10})
	}
	js, err := json.Marshal(map[string]any{"criteria": cs})
	if err != nil {
		panic(err)
	}
	s := string(js)
	switch r.IntN(8) {
	case 0:
		s = "<think>Let me weigh {the} options.</think>\n" + s
	case 1:
		s = "Here is the rubric:\n```json\n" + s + "\n```\nHope it helps {really}."
	case 2:
		s = strings.Replace(s, `}]}`, `},]}`, 1) // invalid JSON: the regex fallback
	case 3:
		s = s[:r.IntN(len(s)+1)] // cut off
	case 4:
		s = genCriterion(r) // prose, maybe with braces
	case 5:
		// U+3000 is not JSON whitespace but is Python's \s: the regex
		// fallback reads past it.
		s = strings.ReplaceAll(s, `":`, "\":\u3000")
	}
	return s
}

// TestOfficialMatchesPython checks the Go port of the official statistics
// against the official definitions run in Python (scripts/rubric_stats_reference.py)
// on generated rubrics: the same criteria and the same figures.
func TestOfficialMatchesPython(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 17))
	raws := make([]string, 600)
	for i := range raws {
		raws[i] = genRubric(r)
	}
	in, err := json.Marshal(raws)
	if err != nil {
		t.Fatal(err)
	}
	out := testutil.RunPythonInput(t, "rubric_stats_reference.py", in)
	var want []struct {
		Criteria        []string `json:"criteria"`
		CriteriaCount   int      `json:"criteria_count"`
		AvgCriterionLen float64  `json:"avg_criterion_len"`
		LabelOnlyPct    float64  `json:"label_only_pct"`
		SpecificPct     float64  `json:"specific_pct"`
		ConstraintPct   float64  `json:"constraint_pct"`
	}
	if err := json.Unmarshal(out, &want); err != nil {
		t.Fatal(err)
	}
	if len(want) != len(raws) {
		t.Fatalf("python returned %d results for %d rubrics", len(want), len(raws))
	}
	var classes [3]int // criteria python found label-only, specific, constraint
	var total, fallback int
	for i, raw := range raws {
		w := want[i]
		gotCs := analyze.OfficialCriteria(raw)
		if fmt.Sprintf("%q", gotCs) != fmt.Sprintf("%q", w.Criteria) && !(len(gotCs) == 0 && len(w.Criteria) == 0) {
			t.Errorf("rubric %d %q:\n criteria %q\n python   %q", i, raw, gotCs, w.Criteria)
			continue
		}
		got := analyze.OfficialCriteriaStats(gotCs)
		if got.Criteria != w.CriteriaCount || math.Abs(got.AvgCriterionLen-w.AvgCriterionLen) > 1e-9 ||
			math.Abs(got.LabelOnlyPct-w.LabelOnlyPct) > 1e-9 || math.Abs(got.SpecificPct-w.SpecificPct) > 1e-9 ||
			math.Abs(got.ConstraintPct-w.ConstraintPct) > 1e-9 {
			for _, c := range gotCs {
				t.Logf("  %q: label %v specific %v constraint %v", c, analyze.IsLabelOnly(c), analyze.IsSpecific(c), analyze.IsConstraint(c))
			}
			t.Errorf("rubric %d: %+v, python %+v", i, got, w)
		}
		total += w.CriteriaCount
		classes[0] += int(math.Round(w.LabelOnlyPct * float64(w.CriteriaCount) / 100))
		classes[1] += int(math.Round(w.SpecificPct * float64(w.CriteriaCount) / 100))
		classes[2] += int(math.Round(w.ConstraintPct * float64(w.CriteriaCount) / 100))
		if strings.Contains(raw, `},]}`) || strings.Contains(raw, "\u3000") {
			fallback++
		}
	}
	t.Logf("%d rubrics, %d criteria: %d label-only, %d specific, %d constraint; %d through the regex fallback",
		len(raws), total, classes[0], classes[1], classes[2], fallback)
	// The generated set must exercise every class both ways.
	for k, n := range classes {
		if n < total/20 || n > total-total/20 {
			t.Errorf("class %d holds %d of %d criteria: the generated set does not exercise it", k, n, total)
		}
	}
}
