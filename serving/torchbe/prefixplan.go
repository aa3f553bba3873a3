package torchbe

import (
	"slices"
)

// PrefixStep is how Score runs one request's Prefix tokens against the
// call's shared KV cache (PlanPrefixes).
type PrefixStep struct {
	// Cached leading Prefix tokens come from the shared cache.
	Cached int
	// Whole: the rest of the Prefix is prefilled into the shared cache
	// before the request's passes, which run after it (the Prefix is the
	// cached one, or the next request's too). Otherwise the tokens after
	// Cached run in the request's own pass, which writes them to the cache.
	Whole bool
	// Shared: the request uses the shared cache; the zero step runs
	// without it and leaves it as it was.
	Shared bool
	// Keep is how many of the Prefix's tokens the shared cache holds after
	// the request.
	Keep int
}

// PlanPrefixes plans how Score runs each request's Prefix tokens (as
// SplitScore splits them; nil for a request that fails before any pass),
// in order, against one KV cache for the call:
//
//   - a Prefix that the cache holds whole, or that the next request shares
//     whole, is made the cache's: its leading tokens the cache already
//     holds are kept and the rest prefilled (Whole);
//   - otherwise, when the Prefix begins with at least MinPrefixReuse
//     tokens of what the cache holds, or of the next request's Prefix, the
//     request takes what it shares with the cache and runs the rest in its
//     pass, which writes it to the cache; the cache then keeps as much of
//     this Prefix as the next request shares, or as it had taken;
//   - otherwise the request runs without the cache.
//
// So the rubrics of one response share its prefill, responses to one
// question share the question's, and every request the judge prompt's
// preamble. A request's log-probs depend on how its Prefix was split only
// by float rounding (within 1e-6, TestScoreSharesPrefix). The judge
// benchmark counts the tokens each side runs with this plan.
func PlanPrefixes(prefixes [][]int) []PrefixStep {
	steps, _ := PlanPrefixesFrom(nil, prefixes)
	return steps
}

// PlanPrefixesFrom is PlanPrefixes with the cache holding held (the
// Prefix tokens an earlier call left in it, KeptPrefix) before the first
// request, and returns what it holds after the last one too.
func PlanPrefixesFrom(held []int, prefixes [][]int) (steps []PrefixStep, after []int) {
	steps = make([]PrefixStep, len(prefixes))
	for i, p := range prefixes {
		if p == nil {
			continue
		}
		var next []int
		if i+1 < len(prefixes) {
			next = prefixes[i+1]
		}
		r := commonPrefix(held, p)
		if (held != nil && slices.Equal(held, p)) || (next != nil && slices.Equal(next, p)) {
			steps[i] = PrefixStep{Cached: r, Whole: true, Shared: true, Keep: len(p)}
			held = p
			continue
		}
		keep := max(r, commonPrefix(p, next))
		if keep < MinPrefixReuse {
			continue
		}
		steps[i] = PrefixStep{Cached: r, Shared: true, Keep: keep}
		held = p[:keep]
	}
	return steps, held
}

// commonPrefix is the length of a's and b's longest common prefix.
func commonPrefix(a, b []int) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}
