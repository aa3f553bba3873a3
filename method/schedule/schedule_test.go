package schedule

import (
	"slices"
	"testing"

	"github.com/evolm/evolm/schemas"
)

// TestPolicyIndexCountsPolicySteps: the temporal strategy's policy_steps
// clock numbers policy steps only (K = 2: steps 0, 1, 4, 5, 8 are policy
// steps 0, 1, 2, 3, 4); a rubric step maps to the policy steps before it.
func TestPolicyIndexCountsPolicySteps(t *testing.T) {
	c := Schedule{K: 2}
	want := map[int64]int64{0: 0, 1: 1, 2: 2, 3: 2, 4: 2, 5: 3, 6: 4, 7: 4, 8: 4, 9: 5}
	for step, idx := range want {
		if got := c.PolicyIndex(step); got != idx {
			t.Errorf("PolicyIndex(%d) = %d, want %d", step, got, idx)
		}
	}
	for s := 0; s < 40; s++ {
		if c.Phase(s) == schemas.PhasePolicy && c.PolicyIndex(int64(s+1)) != c.PolicyIndex(int64(s))+1 {
			t.Errorf("policy step %d: the next step's index is not one more", s)
		}
	}
}

// TestStreamVisitsEveryPromptOncePerEpoch: each epoch is a permutation of
// the prompt set, epochs differ, and the same seed gives the same order.
func TestStreamVisitsEveryPromptOncePerEpoch(t *testing.T) {
	const n = 7
	st := NewStream(n, 3)
	var epochs [][]int
	for e := range 3 {
		var got []int
		for i := range n {
			got = append(got, st.At(e*n+i))
		}
		sorted := slices.Sorted(slices.Values(got))
		if !slices.Equal(sorted, []int{0, 1, 2, 3, 4, 5, 6}) {
			t.Fatalf("epoch %d is not a permutation: %v", e, got)
		}
		epochs = append(epochs, got)
	}
	if slices.Equal(epochs[0], epochs[1]) && slices.Equal(epochs[1], epochs[2]) {
		t.Error("every epoch has the same order")
	}
	// Random access (a resumed run starts mid-stream) agrees.
	again := NewStream(n, 3)
	if got := again.At(2*n + 4); got != epochs[2][4] {
		t.Errorf("At(18) on a fresh stream = %d, want %d", got, epochs[2][4])
	}
	c := Schedule{K: 2, PromptsPerStep: 3, Seed: 3}
	if got, want := c.Batch(NewStream(n, 3), 2), []int{epochs[0][6], epochs[1][0], epochs[1][1]}; !slices.Equal(got, want) {
		t.Errorf("Batch(step 2) = %v, want positions 6, 7, 8: %v", got, want)
	}
	if a, b := c.Refill(n, 4, 1, 5), c.Refill(n, 4, 1, 5); !slices.Equal(a, b) || slices.Equal(a, c.Refill(n, 4, 2, 5)) {
		t.Errorf("Refill is not a function of (seed, step, round): %v %v", a, b)
	}
}

// TestOrderReplay: under the official order each phase walks the stream
// from its own start, so rubric step j sees the prompts of policy step j;
// under the fresh order every step takes new positions.
func TestOrderReplay(t *testing.T) {
	const n = 50
	fresh := Schedule{K: 2, PromptsPerStep: 3, Seed: 7, Order: OrderFresh}
	replay := fresh
	replay.Order = OrderReplay
	st := NewStream(n, 7)
	// K = 2: steps 0 1 are policy steps 0 1, steps 2 3 rubric steps 0 1,
	// steps 4 5 policy steps 2 3, steps 6 7 rubric steps 2 3.
	for step, policyStep := range map[int]int{2: 0, 3: 1, 6: 4, 7: 5} {
		if got, want := replay.Batch(st, step), replay.Batch(st, policyStep); !slices.Equal(got, want) {
			t.Errorf("replay: rubric step %d takes %v, want policy step %d's %v", step, got, policyStep, want)
		}
		if slices.Equal(fresh.Batch(st, step), fresh.Batch(st, policyStep)) {
			t.Errorf("fresh: rubric step %d repeats policy step %d's prompts", step, policyStep)
		}
	}
	for step, pos := range map[int]int{0: 0, 1: 3, 2: 0, 3: 3, 4: 6, 5: 9, 6: 6, 8: 12} {
		if got := replay.Position(step); got != pos {
			t.Errorf("replay Position(%d) = %d, want %d", step, got, pos)
		}
		if got := fresh.Position(step); got != step*3 {
			t.Errorf("fresh Position(%d) = %d, want %d", step, got, step*3)
		}
	}
	for step, idx := range map[int64]int64{0: 0, 1: 0, 2: 0, 3: 1, 4: 2, 5: 2, 6: 2, 7: 3, 9: 4} {
		if got := replay.RubricIndex(step); got != idx {
			t.Errorf("RubricIndex(%d) = %d, want %d", step, got, idx)
		}
	}
}
