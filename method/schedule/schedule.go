// Package schedule is the co-evolution loop's clock and data order, as
// pure functions of the run's settings and the step, so that a resumed run
// recomputes exactly what an uninterrupted one would and needs no saved
// cursor.
//
//   - Phases: step s (0-based) is a policy step when ⌊s/K⌋ is even and a
//     rubric step otherwise (K policy steps, then K rubric steps, …).
//   - Policy steps are numbered among themselves by PolicyIndex: the
//     temporal strategy's policy_steps clock.
//   - The prompt stream visits every prompt once per epoch in a seeded
//     order (Stream), reshuffled every epoch. Under OrderFresh step s takes
//     positions s·P … s·P+P−1, so a rubric step sees prompts no policy step
//     saw; under OrderReplay (the official code's: each phase's actor has
//     its own iterator over the same seeded order) the j-th step of a phase
//     takes positions j·P … j·P+P−1, so the rubric phase replays the
//     prompts the policy saw first (Batch, Position).
//   - Active sampling's refill rounds draw prompts by a seeded draw from
//     the whole prompt set, a function of (seed, step, round) (Refill).
//
// State is what a checkpoint records of the loop (state.json).
package schedule

import (
	"math/rand/v2"

	"github.com/evolm/evolm/schemas"
)

// Schedule is a run's clock.
type Schedule struct {
	K              int   // phase length in steps
	PromptsPerStep int   // P: prompts (policy step) or pairs (rubric step) per step
	Seed           int64 // the run's base seed
	Order          Order // which stream positions each phase's steps take ("" is OrderFresh)
}

// Order says which positions of the prompt stream the steps of each phase
// take.
type Order string

const (
	// OrderFresh walks one stream through both phases: step s takes
	// positions s·P …, and rubric steps see prompts the policy never saw.
	OrderFresh Order = "fresh"
	// OrderReplay gives each phase its own walk of the same seeded stream,
	// as the official code's policy and rubric actors each iterate the
	// dataset with the same seed: the j-th step of a phase takes positions
	// j·P …, so the rubric phase replays the prompts the policy saw first.
	OrderReplay Order = "replay"
)

// Enum lists the orders (a config key's allowed values).
func (Order) Enum() []string { return []string{string(OrderFresh), string(OrderReplay)} }

// Phase returns the phase of step s: schemas.PhasePolicy or
// schemas.PhaseRubric.
func (c Schedule) Phase(s int) string {
	if (s/c.K)%2 == 0 {
		return schemas.PhasePolicy
	}
	return schemas.PhaseRubric
}

// PolicyIndex maps a policy-phase step to its number among policy steps
// (0, 1, …): steps 0…K−1 are policy steps 0…K−1, steps 2K…3K−1 are K…2K−1,
// and so on; a rubric step maps to the number of policy steps before it.
// It is the temporal strategy's policy_steps clock.
func (c Schedule) PolicyIndex(step int64) int64 {
	k := int64(c.K)
	return step/(2*k)*k + min(step%(2*k), k)
}

// RubricIndex maps a rubric-phase step to its number among rubric steps
// (0, 1, …): steps K…2K−1 are rubric steps 0…K−1, steps 3K…4K−1 are
// K…2K−1, and so on; a policy step maps to the number of rubric steps
// before it.
func (c Schedule) RubricIndex(step int64) int64 {
	k := int64(c.K)
	return step/(2*k)*k + max(step%(2*k)-k, 0)
}

// Position returns the stream position of step's first prompt.
func (c Schedule) Position(step int) int {
	p := int64(step)
	if c.Order == OrderReplay {
		if c.Phase(step) == schemas.PhasePolicy {
			p = c.PolicyIndex(p)
		} else {
			p = c.RubricIndex(p)
		}
	}
	return int(p) * c.PromptsPerStep
}

// Stream orders a prompt set of N prompts: every prompt once per epoch, in
// an order seeded by (seed, epoch). Not safe for concurrent use (it keeps
// the current epoch's order).
type Stream struct {
	N     int
	Seed  int64
	epoch int
	order []int
}

// NewStream returns the stream of n prompts under seed.
func NewStream(n int, seed int64) *Stream { return &Stream{N: n, Seed: seed, epoch: -1} }

// At returns the prompt index at stream position pos.
func (st *Stream) At(pos int) int {
	if e := pos / st.N; e != st.epoch {
		st.epoch = e
		st.order = rand.New(rand.NewPCG(uint64(st.Seed), uint64(e))).Perm(st.N)
	}
	return st.order[pos%st.N]
}

// Batch returns the prompt indexes of step: the P positions from
// Position(step).
func (c Schedule) Batch(st *Stream, step int) []int {
	out := make([]int, c.PromptsPerStep)
	pos := c.Position(step)
	for i := range out {
		out[i] = st.At(pos + i)
	}
	return out
}

// Refill returns the n prompt indexes of refill round round of step: a
// seeded draw from the whole prompt set of size total, a function of (seed,
// step, round) only.
func (c Schedule) Refill(total, step, round, n int) []int {
	rng := rand.New(rand.NewPCG(uint64(c.Seed)^0x5eed_ac71_7e00_0000, uint64(step)<<8|uint64(round)))
	out := make([]int, n)
	for i := range out {
		out[i] = rng.IntN(total)
	}
	return out
}
