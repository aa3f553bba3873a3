package grpo

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestPacks: greedy in-order packing, a row flushed when the next sequence
// would overflow it, an overlong sequence alone in its row.
func TestPacks(t *testing.T) {
	got := Packs([]int{2, 3, 1, 30, 2, 2}, []int{4, 4, 9, 1, 3, 3}, 14)
	want := []Pack{{Seqs: []int{0, 1}, Tokens: 8}, {Seqs: []int{2}, Tokens: 9}, {Seqs: []int{3}, Tokens: 1}, {Seqs: []int{4, 5}, Tokens: 6}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Packs (-want +got):\n%s", diff)
	}
}
