package rules

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/schemas"
)

func TestJudgingRubric(t *testing.T) {
	why := "no JSON object found"
	bad := schemas.Rubric{RubricID: "r", RawText: "<think>hmm</think>Be correct and brief.", ParseError: &why, Criteria: []schemas.Criterion{}}
	got := JudgingRubric(bad, InvalidRawText)
	if d := cmp.Diff([]schemas.Criterion{{Criterion: "Be correct and brief.", Weight: 1}}, got.Criteria); d != "" {
		t.Errorf("raw_text (-want +got):\n%s", d)
	}
	if got := JudgingRubric(bad, InvalidSkip); len(got.Criteria) != 0 {
		t.Errorf("skip: %v", got.Criteria)
	}
	partial := bad
	partial.Criteria = []schemas.Criterion{{Criterion: "Accuracy", Weight: 0.4}}
	if got := JudgingRubric(partial, InvalidRawText); !cmp.Equal(got.Criteria, partial.Criteria) {
		t.Errorf("parsed criteria of an invalid rubric are kept: %v", got.Criteria)
	}
	ok := schemas.Rubric{FormatOK: true, RawText: "x", Criteria: []schemas.Criterion{{Criterion: "A", Weight: 0.5}, {Criterion: "B", Weight: 0.5}}}
	if got := JudgingRubric(ok, InvalidRawText); !cmp.Equal(got, ok) {
		t.Errorf("valid rubric changed: %+v", got)
	}
}

func TestUsable(t *testing.T) {
	for _, tc := range []struct {
		w    []float64
		want bool
	}{
		{nil, false}, {[]float64{0}, false}, {[]float64{0.5, 0.5}, true}, {[]float64{1, -0.1}, false},
		{[]float64{math.NaN()}, false}, {[]float64{math.Inf(1)}, false}, {[]float64{0, 2}, true},
	} {
		var r schemas.Rubric
		for _, w := range tc.w {
			r.Criteria = append(r.Criteria, schemas.Criterion{Criterion: "c", Weight: w})
		}
		if got := Usable(r); got != tc.want {
			t.Errorf("Usable(%v) = %v, want %v", tc.w, got, tc.want)
		}
	}
}

// TestIDs pins the ids byte for byte: stored runs, replay and export join on
// them, and a resumed run must rewrite the rows it recomputes unchanged.
func TestIDs(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{RolloutID("p-17#3", schemas.PhasePolicy, 12, schemas.RolePolicy, 5), "p-17#3/policy/000012/policy/5"},
		{RolloutID("pair-000051-002", schemas.PhaseRubric, 51, schemas.RoleRubricGenerator, 0), "pair-000051-002/rubric/000051/rubric_generator/0"},
		{PairID(51, 2), "pair-000051-002"},
		{PairID(1234567, 1234), "pair-1234567-1234"},
		{PairRolloutID(51, 2, "chosen"), "pair/000051/002/chosen"},
		{ChosenID("pair-000051-002"), "pair-000051-002/chosen"},
		{RejectedID("pair-000051-002"), "pair-000051-002/rejected"},
		{RubricID("p-17#3/policy/000012/rubric_generator/0"), "p-17#3/policy/000012/rubric_generator/0"},
		{JudgmentID("pair-000051-002/chosen", "pair-000051-002/rubric/000051/rubric_generator/0"),
			"pair-000051-002/chosen|pair-000051-002/rubric/000051/rubric_generator/0"},
		{JudgmentID("p-17#3/policy/000012/policy/5", "p-17#3/policy/000012/rubric_generator/0"),
			"p-17#3/policy/000012/policy/5|p-17#3/policy/000012/rubric_generator/0"},
		{ItemKey("p-17", 0, 3), "p-17#3"},
		{ItemKey("p-17", 2, 3), "p-17#r2.3"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

func TestDeriveSeedIsStable(t *testing.T) {
	// Golden value from Python: int.from_bytes(sha256(pack('<Q', 1) +
	// b'\x00prompt' + b'\x00policy').digest()[:8], 'little') >> 1. Changing
	// the derivation changes every recorded seed.
	if got, want := DeriveSeed(1, "prompt", "policy"), int64(3986447386733033590); got != want {
		t.Fatalf("DeriveSeed = %d, want %d", got, want)
	}
	for _, c := range [][2][]string{{{"a", "b"}, {"ab"}}, {{"a"}, {"b"}}} {
		if DeriveSeed(1, c[0]...) == DeriveSeed(1, c[1]...) {
			t.Errorf("DeriveSeed(%q) == DeriveSeed(%q)", c[0], c[1])
		}
	}
	if DeriveSeed(1, "x") == DeriveSeed(2, "x") {
		t.Error("the base seed does not change the derived seed")
	}
}
