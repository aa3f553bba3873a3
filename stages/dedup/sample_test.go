package dedup

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/datasets"
)

// TestSamplePlantedDuplicates: on the committed sample set, dedup removes
// exactly the planted duplicates, each kept by its original, and keeps every
// prompt of the far-but-sharing-words groups.
func TestSamplePlantedDuplicates(t *testing.T) {
	set, err := datasets.Sample()
	if err != nil {
		t.Fatal(err)
	}
	res, err := Analyze(context.Background(), []string{samplePath(t)}, t.TempDir(), DefaultParams())
	if err != nil {
		t.Fatal(err)
	}
	want := map[uint32]uint32{}
	var exact, near int64
	for _, p := range set.Plants {
		want[uint32(p.Row)] = uint32(p.Of)
		if p.Kind == datasets.PlantExact {
			exact++
		} else {
			near++
		}
	}
	got := map[uint32]uint32{}
	for i := range set.Rows {
		if k := res.Keeper(uint32(i)); k != uint32(i) {
			got[uint32(i)] = k
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("removed row → keeper (-planted +found):\n%s", diff)
	}
	if res.ExactDups != exact || res.NearDups != near {
		t.Errorf("exact %d near %d, planted %d %d", res.ExactDups, res.NearDups, exact, near)
	}
	for _, g := range set.FarGroups {
		for _, row := range g {
			if res.InCluster(uint32(row)) {
				t.Errorf("far-group row %d %q is in a cluster", row, set.Rows[row].Prompt)
			}
		}
	}
	t.Log(res.Summary())
}

// The planted duplicates are what they claim: exact ones normalize to their
// original, near ones differ but keep word 5-gram Jaccard ≥ 0.7 (the verification threshold), and far
// groups share a frame but stay below 0.5.
func TestSamplePlantsAreWhatTheyClaim(t *testing.T) {
	set, err := datasets.Sample()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range set.Plants {
		a, b := set.Rows[p.Of].Prompt, set.Rows[p.Row].Prompt
		switch p.Kind {
		case datasets.PlantExact:
			if Normalize(a) != Normalize(b) {
				t.Errorf("exact plant %d (%s): %q and %q normalize differently", p.Row, p.How, a, b)
			}
		case datasets.PlantNear:
			if Normalize(a) == Normalize(b) {
				t.Errorf("near plant %d (%s) is an exact duplicate", p.Row, p.How)
			}
			if j := Jaccard(shinglesOf(a), shinglesOf(b)); j < 0.7 {
				t.Errorf("near plant %d (%s): Jaccard %.2f < 0.7: %q vs %q", p.Row, p.How, j, a, b)
			}
		}
		if p.Of >= p.Row {
			t.Errorf("plant %d precedes its original %d", p.Row, p.Of)
		}
	}
	for _, g := range set.FarGroups {
		for i := range g {
			for j := i + 1; j < len(g); j++ {
				a, b := set.Rows[g[i]].Prompt, set.Rows[g[j]].Prompt
				if jac := Jaccard(shinglesOf(a), shinglesOf(b)); jac >= 0.5 {
					t.Errorf("far pair Jaccard %.2f: %q vs %q", jac, a, b)
				}
			}
		}
	}
}
