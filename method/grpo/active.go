package grpo

import (
	"context"
	"fmt"
)

// Refills counts what active sampling added to a step.
type Refills struct {
	Prompts int // prompts sampled beyond the step's own
	Rounds  int // refill rounds run
}

// FillGroups gathers want groups that carry a learning signal, as the
// official trainer's active sampling does (open-instruct's
// accumulate_inference_batches with active_sampling: a group whose rewards
// all tie is dropped and not counted, and more prompts are sampled until the
// step has its full count).
//
// sample(ctx, round, n) samples, scores and returns the groups of n prompts:
// round 0 is the step's own want prompts, rounds 1, 2, … are refills of as
// many prompts as groups are still missing. signal reports whether a group
// has a reward spread (non-zero std). At most maxRounds refill rounds run
// (0: none, groups without a signal are simply dropped); after the last the
// step trains on what it has. kept holds the groups with a signal, in the
// order sampled (at most want); all holds every group sampled, for the
// caller's records and statistics.
func FillGroups[G any](ctx context.Context, want, maxRounds int, sample func(ctx context.Context, round, n int) ([]G, error),
	signal func(G) bool) (kept, all []G, r Refills, err error) {
	if want <= 0 {
		return nil, nil, r, fmt.Errorf("active sampling: want %d groups, want > 0", want)
	}
	if maxRounds < 0 {
		return nil, nil, r, fmt.Errorf("active sampling: %d refill rounds, want ≥ 0", maxRounds)
	}
	n := want
	for round := 0; ; round++ {
		if err := ctx.Err(); err != nil {
			return nil, nil, r, err
		}
		gs, err := sample(ctx, round, n)
		if err != nil {
			return nil, nil, r, err
		}
		if len(gs) != n {
			return nil, nil, r, fmt.Errorf("active sampling round %d: %d groups for %d prompts", round, len(gs), n)
		}
		if round > 0 {
			r.Prompts += n
			r.Rounds++
		}
		all = append(all, gs...)
		for _, g := range gs {
			if signal(g) {
				kept = append(kept, g)
			}
		}
		n = want - len(kept)
		if n == 0 || round >= maxRounds {
			return kept, all, r, nil
		}
	}
}
