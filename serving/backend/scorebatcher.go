package backend

import "context"

// ScoreBatcher coalesces concurrent Score calls as Batcher coalesces
// Generate calls (the same queue, bisection on failure, cancellation and
// Linger), and orders each batch so that requests with the same Prefix are
// consecutive, in the order the first of each arrived. Unlike Batcher's, the
// first call of a burst waits up to Gather (DefaultGather) for the rest of
// it, so that a response's first rubric does not run alone. An in-process scorer
// prefills a Prefix once for the consecutive requests that share it
// (model/torchbe), so the rubrics of one response, sent as separate HTTP
// requests to `evolm serve`, share one prefill as they would in one call,
// and the head runs over the criteria of several requests at once.
type ScoreBatcher struct {
	coalescer[ScoreRequest, ScoreResponse]
}

// NewScoreBatcher wraps s; maxBatch and maxRunning are NewBatcher's.
func NewScoreBatcher(s Scorer, maxBatch, maxRunning int) *ScoreBatcher {
	b := &ScoreBatcher{}
	b.init("scorer", maxBatch, maxRunning, func(ctx context.Context, reqs []ScoreRequest, deliver func(int, ScoreResponse) error) error {
		order := byPrefix(reqs)
		sorted := make([]ScoreRequest, len(reqs))
		for k, i := range order {
			sorted[k] = reqs[i]
		}
		resps, err := s.Score(ctx, sorted)
		if err != nil {
			return err
		}
		return b.deliverAll(sorted, resps, func(k int, r ScoreResponse) error { return deliver(order[k], r) })
	}, func(r *ScoreRequest) *string { return &r.ID }, func(r *ScoreResponse) *string { return &r.ID })
	b.Gather = DefaultGather
	return b
}

// Score implements Scorer.
func (b *ScoreBatcher) Score(ctx context.Context, reqs []ScoreRequest) ([]ScoreResponse, error) {
	return b.do(ctx, reqs)
}

// byPrefix returns the indices of reqs grouped by Prefix: the groups in
// the order of their first request, each group in arrival order.
func byPrefix(reqs []ScoreRequest) []int {
	groups := map[string][]int{}
	var firsts []string
	for i, r := range reqs {
		if _, ok := groups[r.Prefix]; !ok {
			firsts = append(firsts, r.Prefix)
		}
		groups[r.Prefix] = append(groups[r.Prefix], i)
	}
	order := make([]int, 0, len(reqs))
	for _, p := range firsts {
		order = append(order, groups[p]...)
	}
	return order
}

var _ Scorer = (*ScoreBatcher)(nil)
