package lmstage

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/serving/roles"
)

// SampleEach reports each backend call's rows as the call finishes, so that
// a stage's progress moves during a long batch.
func TestSampleEachReportsEachCall(t *testing.T) {
	b := roles.NewBackend("fake", "fake", &fakeGenerator{}, nil, nil, nil)
	sp := SampleSpec{Role: schemas.RolePolicy, Phase: schemas.PhasePolicy, N: 2, Sampling: backend.Sampling{MaxTokens: 4}}
	var done []int
	rows, err := SampleEach(context.Background(), b, 4, sp, []Item{{ID: "a"}, {ID: "b"}, {ID: "c"}}, func(n int) { done = append(done, n) })
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int{4, 2}, done); diff != "" || len(rows) != 6 {
		t.Errorf("rows reported per call (-want +got):\n%s (%d rows)", diff, len(rows))
	}
}
