package torchbe

import (
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/generate"
	"github.com/evolm/evolm/model/torch"
	"github.com/evolm/evolm/serving/backend"
)

// scoreRequest scores row's tails, up to MaxBatch of them per forward pass,
// each pass one packed row (packedHidden): the tokens not yet cached (the
// trunk) and the tails after it as branches. It queues on q, per tail, the
// final hidden state at its last token, for res.
//
// What is cached first follows step (PlanPrefixes): with Whole, the shared
// cache holding the whole prefix, whose passes extend it and truncate it
// back; with Shared alone, the shared cache holding the prefix's first
// Cached tokens, the pass running the rest of it with the extra tokens
// and the cache keeping the prefix's first Keep tokens after it; else
// nothing, and the prefix and extra tokens are the trunk of the one pass.
// When the tails take more than one pass, or the one pass would attend
// more scores than one chunk of generate.Prefill, the prefix and extra
// tokens are first prefilled (chunked) into a cache of the request's own.
func (m *Model) scoreRequest(shared *sharedPrefix, row *scoreRow, step PrefixStep, res *backend.ScoreResponse, q *heads) error {
	var groups [][][]int // the tails of each pass
	width := 0           // the most tail tokens in a pass
	for start := 0; start < len(row.tails); start += m.opt.MaxBatch {
		g := row.tails[start:min(start+m.opt.MaxBatch, len(row.tails))]
		groups = append(groups, g)
		n := 0
		for _, t := range g {
			n += len(t)
		}
		width = max(width, n)
	}
	past := 0 // positions cached before the pass
	switch {
	case step.Whole:
		past = len(row.prefix)
	case step.Shared:
		past = step.Cached
	}
	T := len(row.prefix) + len(row.extra) - past + width // the longest packed row
	maxLen := len(row.prefix) + len(row.extra) + width
	var cache *model.Cache
	var trunk []int
	keep := -1 // the shared cache's length after the passes, when they extend it
	switch {
	case len(groups) > 1 || generate.PrefillChunk(1, int64(past+T), int64(m.lm.Config().NumAttentionHeads)) < int64(T):
		own, err := m.requestCache(shared, row, step, maxLen)
		if err != nil {
			return err
		}
		defer own.Close() // also when an engine panic unwinds
		cache = own
	case step.Whole:
		pc, err := shared.take(m.lm, row.prefix, len(row.prefix), maxLen)
		if err != nil {
			return fmt.Errorf("prefill: %w", err)
		}
		cache, trunk, keep = pc, row.extra, len(row.prefix)
	case step.Shared:
		pc, err := shared.take(m.lm, row.prefix, step.Cached, maxLen)
		if err != nil {
			return fmt.Errorf("prefill: %w", err)
		}
		if step.Cached < len(row.prefix) {
			prefixPrefills.Add(1) // the rest of the prefix runs in the pass
		}
		cache, trunk, keep = pc, slices.Concat(row.prefix[step.Cached:], row.extra), step.Keep
	default:
		prefixPrefills.Add(1) // the prefix runs in the pass
		trunk = slices.Concat(row.prefix, row.extra)
	}
	base := 0
	if cache != nil {
		base = cache.Len()
	}
	for _, g := range groups {
		var h *torch.Tensor
		hs, err := m.packedHidden(cache, []packedRow{{trunk: trunk, tails: g}})
		if err == nil {
			h = hs[0]
		}
		if cache != nil {
			// Back to what was cached before the pass, for the next pass
			// or request, or, for the shared cache, to the prefix's first
			// Keep tokens, which the pass wrote after those it took.
			to := base
			if keep >= 0 {
				to = keep
				shared.ids = row.prefix[:keep]
			}
			if terr := cache.Truncate(to); err == nil {
				err = terr
			}
		}
		if err != nil {
			torch.Drop(h)
			return fmt.Errorf("tails: %w", err)
		}
		if err := q.add(h, len(g), row.cands, row.among, res); err != nil {
			return err
		}
	}
	return nil
}

// requestCache returns a one-row cache of capacity maxLen holding the
// row's prefix and extra tokens prefilled, owned by the caller. With a
// shared step, the shared cache is made to hold the whole prefix first
// (as step plans it, the first Cached tokens taken, the rest prefilled),
// the request's cache is a copy of it followed by the extra tokens, and
// the shared cache keeps the prefix's first Keep tokens; else both are
// prefilled in one pass.
func (m *Model) requestCache(shared *sharedPrefix, row *scoreRow, step PrefixStep, maxLen int) (cache *model.Cache, err error) {
	ids := slices.Concat(row.prefix, row.extra)
	if step.Shared {
		pc, err := shared.take(m.lm, row.prefix, len(row.prefix), 0)
		if err != nil {
			return nil, fmt.Errorf("prefill: %w", err)
		}
		cache, err = pc.SelectTo([]int64{0}, maxLen)
		if err == nil {
			err = pc.Truncate(step.Keep)
			shared.ids = row.prefix[:step.Keep]
		}
		ids = row.extra
	} else {
		prefixPrefills.Add(1)
		cache, err = model.NewCache(m.lm, 1, maxLen)
	}
	if err != nil {
		if cache != nil {
			cache.Close()
		}
		return nil, err
	}
	ok := false
	defer func() { // an error or an engine panic in the prefill frees it
		if !ok {
			cache.Close()
		}
	}()
	if len(ids) > 0 {
		if err := prefill(m.lm, cache, ids); err != nil {
			return nil, fmt.Errorf("prefill: %w", err)
		}
	}
	ok = true
	return cache, nil
}

// sharedPrefix is a call's KV cache of Prefix tokens (one row): ids, the
// tokens it holds prefilled, are the first tokens of the last Prefix that
// used it. Requests extend it and truncate it back, so what a request
// computes after its cached tokens does not depend on which request
// prefilled them.
type sharedPrefix struct {
	ids   []int
	cache *model.Cache
}

// take makes the cache hold ids[:n] prefilled, with room for at least
// maxLen positions, and returns it, still owned by p: it keeps the tokens
// it holds that ids[:n] begins with, truncates the rest, and prefills the
// tokens of ids[:n] after them.
func (p *sharedPrefix) take(lm model.CausalLM, ids []int, n, maxLen int) (*model.Cache, error) {
	maxLen = max(maxLen, n, 1)
	r := 0
	if p.cache != nil {
		r = commonPrefix(p.ids, ids[:n])
		if err := p.cache.Truncate(r); err != nil {
			p.close()
			return nil, err
		}
		p.ids = ids[:r]
		if p.cache.MaxLen() < maxLen { // a copy with more room
			grown, err := p.cache.SelectTo([]int64{0}, maxLen)
			if err != nil {
				return nil, err
			}
			p.cache.Close()
			p.cache = grown
		}
	} else {
		cache, err := model.NewCache(lm, 1, maxLen)
		if err != nil {
			return nil, err
		}
		// p owns the cache from here, so that p.close frees it after an
		// error or a panic in the prefill too.
		p.ids, p.cache = ids[:0], cache
	}
	prefixReused.Add(int64(r))
	if r < n {
		prefixPrefills.Add(1)
		if err := prefill(lm, p.cache, ids[r:n]); err != nil {
			p.close()
			return nil, err
		}
		p.ids = ids[:n]
	}
	return p.cache, nil
}

// prefixPrefills counts the prefixes Score prefilled, whole or in part,
// apart or in a request's pass, and prefixReused the prefix tokens it took
// from a call's shared cache instead (for tests).
var prefixPrefills, prefixReused atomic.Int64

func (p *sharedPrefix) close() {
	if p.cache != nil {
		p.cache.Close()
	}
	p.ids, p.cache = nil, nil
}

// prefill runs ids (one row) through lm after what cache holds.
func prefill(lm model.CausalLM, cache *model.Cache, ids []int) error {
	s := torch.NewScope()
	defer s.Close()
	x := make([]int64, len(ids))
	for j, id := range ids {
		x[j] = int64(id)
	}
	_, err := generate.Prefill(s, lm, model.Batch{IDs: s.To(s.FromInt64(x, 1, int64(len(x))), lm.Device(), torch.Int64), Cache: cache})
	return err
}
