package dedup

import (
	"context"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A prompt long enough that a one-word edit at its end keeps 5-gram Jaccard
// above 0.9, and a second one sharing much of its vocabulary.
const (
	base = "Write a short story about a lighthouse keeper who finds a message in a bottle that was written by her grandmother fifty years ago"
	// far: same words, different order and meaning; few shared 5-grams.
	far = "Her grandmother wrote a short message about a lighthouse fifty years ago, and a keeper finds it in a bottle; write the story of who she was"
)

// analyze dedups prompts (one JSONL file) and returns, per row, its keeper.
func analyze(t *testing.T, p Params, prompts ...string) ([]uint32, *Result) {
	t.Helper()
	dir := t.TempDir()
	path := writeJSONL(t, dir, prompts)
	res, err := Analyze(context.Background(), []string{path}, dir+"/work", p)
	if err != nil {
		t.Fatal(err)
	}
	keep := make([]uint32, len(prompts))
	for i := range prompts {
		keep[i] = res.Keeper(uint32(i))
	}
	return keep, res
}

func TestClusters(t *testing.T) {
	noVerify := DefaultParams()
	noVerify.Verify = false
	strict := DefaultParams()
	strict.Threshold = 0.99
	for _, tc := range []struct {
		name    string
		p       Params
		prompts []string
		keeper  []uint32 // per row
		exact   int64
		near    int64
	}{
		{"distinct", DefaultParams(), []string{"What is the capital of France?", "How do I bake bread at home?", "Explain recursion."},
			[]uint32{0, 1, 2}, 0, 0},
		{"exact copy", DefaultParams(), []string{"Tell me a joke.", "Something else entirely.", "Tell me a joke."},
			[]uint32{0, 1, 0}, 1, 0},
		{"exact after normalization", DefaultParams(), []string{"TELL  me a\tjoke.", "Ｔｅｌｌ me a joke.", "tell me a joke."},
			[]uint32{0, 0, 0}, 2, 0},
		{"short prompts differing by a word are not near duplicates", DefaultParams(), []string{"Tell me a joke.", "Tell me a story."},
			[]uint32{0, 1}, 0, 0},
		{"near: appended word", DefaultParams(), []string{base, base + " today"},
			[]uint32{0, 0}, 0, 1},
		{"near: punctuation only", DefaultParams(), []string{base + ".", "Write a short story, about a lighthouse keeper who finds a message in a bottle that was written by her grandmother fifty years ago!"},
			[]uint32{0, 0}, 0, 1},
		{"far but sharing words", DefaultParams(), []string{base, far},
			[]uint32{0, 1}, 0, 0},
		{"far but sharing words, unverified", noVerify, []string{base, far},
			[]uint32{0, 1}, 0, 0},
		{"keeper is the earliest row", DefaultParams(), []string{"unrelated prompt number one about gardening in spring", base + " today", base},
			[]uint32{0, 1, 1}, 0, 1},
		{"chain: transitive cluster", DefaultParams(), []string{base, base + " today", base + " today please"},
			[]uint32{0, 0, 0}, 0, 2},
		{"exact copy of a near duplicate", DefaultParams(), []string{base, base + " today", base + " TODAY"},
			[]uint32{0, 0, 0}, 1, 1},
		{"strict threshold rejects the near pair", strict, []string{base, base + " today"},
			[]uint32{0, 1}, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keep, res := analyze(t, tc.p, tc.prompts...)
			if diff := cmp.Diff(tc.keeper, keep); diff != "" {
				t.Errorf("keepers (-want +got):\n%s", diff)
			}
			if res.ExactDups != tc.exact || res.NearDups != tc.near {
				t.Errorf("exact %d near %d, want %d %d", res.ExactDups, res.NearDups, tc.exact, tc.near)
			}
			if res.RowsIn != int64(len(tc.prompts)) || res.RowsOut != res.RowsIn-tc.exact-tc.near {
				t.Errorf("rows in %d out %d", res.RowsIn, res.RowsOut)
			}
		})
	}
}

func TestClusterReport(t *testing.T) {
	_, res := analyze(t, DefaultParams(), base, "Unrelated: how do tides work?", base+" today", base, "Unrelated: how do tides work?")
	got := res.ClusterList()
	want := []Cluster{
		{ID: 0, Keeper: 0, Removed: []Member{{Row: 2, Similarity: Jaccard(shinglesOf(base+" today"), shinglesOf(base))}, {Row: 3, Exact: true, Similarity: 1}}},
		{ID: 1, Keeper: 1, Removed: []Member{{Row: 4, Exact: true, Similarity: 1}}},
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 })); diff != "" {
		t.Errorf("clusters (-want +got):\n%s", diff)
	}
	if res.Clusters != 2 {
		t.Errorf("Clusters = %d", res.Clusters)
	}
	h0, ok0 := res.ContentHash(0)
	h3, ok3 := res.ContentHash(3)
	if !ok0 || !ok3 || h0 != h3 || h0.String() != PromptID(base) {
		t.Errorf("content hashes of exact duplicates: %v %v", h0, h3)
	}
}

// shinglesOf is what the spill stores: the 32-bit truncated shingle set.
func shinglesOf(s string) []uint32 {
	p := DefaultParams().Shingle
	sh, _ := Shingles(p.Words(Normalize(s), nil), p.NGram, nil, nil)
	out := make([]uint32, len(sh))
	for i, x := range sh {
		out[i] = uint32(x)
	}
	slices.Sort(out)
	return slices.Compact(out)
}
