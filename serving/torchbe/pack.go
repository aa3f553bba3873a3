package torchbe

import (
	"fmt"
	"slices"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/generate"
	"github.com/evolm/evolm/model/torch"
	"github.com/evolm/evolm/serving/backend"
)

// DefaultPackTokens is Options.PackTokens' default.
const DefaultPackTokens = 2048

// scorePack is consecutive requests whose packed rows Score runs as one
// batch, one row each (right-padded), in one forward pass: requests that
// run their prefix and extra tokens and all their tails in one pass after
// the same cached tokens (the judge prompt's preamble from the call's
// shared cache, which none of them extends, or nothing), up to MaxBatch
// tails and PackTokens positions in all, and within one prefill chunk's
// attention scores. This is what the criteria of one request already share
// in its pass: the policy phase's requests, each a response to its own
// question, then run their linear layers over all their rows at once
// instead of one short row each (on a GPU, one row of a few hundred
// positions leaves most of the device idle). Each row computes what it
// computes alone: right padding comes after every real token, which causal
// attention keeps from seeing it.
type scorePack struct {
	ids    []string
	rows   []*scoreRow
	res    []*backend.ScoreResponse
	shared bool // the rows take the shared cache's first cached tokens
	cached int
	reused int // the cached tokens the rows' plans take, not yet counted in prefixReused
	tails  int // tails in all
	width  int // the longest packed row
}

func (p *scorePack) add(id string, row *scoreRow, step PrefixStep, res *backend.ScoreResponse, reused int) {
	if len(p.rows) == 0 {
		p.shared, p.cached = step.Shared, step.Cached
	}
	p.ids, p.rows, p.res = append(p.ids, id), append(p.rows, row), append(p.res, res)
	p.reused += reused
	p.tails += len(row.tails)
	p.width = max(p.width, packedWidth(row, step))
}

func (p *scorePack) reset() { *p = scorePack{ids: p.ids[:0], rows: p.rows[:0], res: p.res[:0]} }

// packedWidth is the length of a request's packed row: its prefix and
// extra tokens after the cached ones, then every tail.
func packedWidth(row *scoreRow, step PrefixStep) int {
	n := len(row.prefix) + len(row.extra) - step.Cached
	for _, t := range row.tails {
		n += len(t)
	}
	return n
}

// packable reports whether a request can join a pack: its tails take one
// pass, its Prefix's cached tokens (if any) come from the shared cache,
// which it leaves as it found it (Keep == Cached), and its row alone fits
// one prefill chunk's scores, as scoreRequest's one pass must.
func (m *Model) packable(row *scoreRow, step PrefixStep) bool {
	if step.Whole || len(row.tails) > m.opt.MaxBatch || (step.Shared && step.Keep != step.Cached) {
		return false
	}
	T := int64(packedWidth(row, step))
	return generate.PrefillChunk(1, int64(step.Cached)+T, int64(m.lm.Config().NumAttentionHeads)) >= T
}

// fits reports whether a packable request can join p: the same cached
// tokens, MaxBatch tails in all, and the batch within one prefill chunk's
// scores.
func (m *Model) fits(p *scorePack, row *scoreRow, step PrefixStep) bool {
	if len(p.rows) == 0 {
		return true
	}
	first := p.rows[0]
	if step.Shared != p.shared || step.Cached != p.cached || !slices.Equal(row.prefix[:step.Cached], first.prefix[:p.cached]) ||
		p.tails+len(row.tails) > m.opt.MaxBatch {
		return false
	}
	B, T := int64(len(p.rows)+1), int64(max(p.width, packedWidth(row, step)))
	if B*T > int64(m.opt.PackTokens) {
		return false
	}
	return generate.PrefillChunk(B, int64(p.cached)+T, int64(m.lm.Config().NumAttentionHeads)) >= T
}

// runPack runs p's requests and empties it: one request as scoreRequest
// runs it, several as one batch of packed rows after a copy of the shared
// cache's cached tokens per row.
func (m *Model) runPack(shared *sharedPrefix, p *scorePack, q *heads) (err error) {
	if len(p.rows) == 0 {
		return nil
	}
	defer p.reset()
	if len(p.rows) == 1 {
		step := PrefixStep{Cached: p.cached, Shared: p.shared, Keep: p.cached}
		if err := m.scoreRequest(shared, p.rows[0], step, p.res[0], q); err != nil { // counts p.cached tokens as reused
			return fmt.Errorf("torch score: request %s: %w", p.ids[0], err)
		}
		prefixReused.Add(int64(p.reused - p.cached))
		return nil
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("torch score: requests %s to %s: %w", p.ids[0], p.ids[len(p.ids)-1], err)
		}
	}()
	B := len(p.rows)
	var cache *model.Cache
	if p.shared {
		pc, err := shared.take(m.lm, p.rows[0].prefix, p.cached, 0) // counts p.cached tokens as reused
		if err != nil {
			return fmt.Errorf("prefill: %w", err)
		}
		prefixReused.Add(int64(p.reused - p.cached))
		if cache, err = pc.SelectTo(make([]int64, B), p.cached+p.width); err != nil {
			return err
		}
		defer cache.Close()
	}
	rows := make([]packedRow, B)
	for i, row := range p.rows {
		rows[i] = packedRow{trunk: slices.Concat(row.prefix[p.cached:], row.extra), tails: row.tails}
	}
	prefixPrefills.Add(int64(B)) // each prefix runs (the rest of it) in the pass
	packedPasses.Add(1)
	hs, err := m.packedHidden(cache, rows)
	if err != nil {
		return fmt.Errorf("tails: %w", err)
	}
	for i, h := range hs {
		row := p.rows[i]
		if err := q.add(h, len(row.tails), row.cands, row.among, p.res[i]); err != nil {
			for _, rest := range hs[i+1:] {
				torch.Drop(rest)
			}
			return err
		}
	}
	return nil
}

// MinPrefixReuse is the fewest leading Prefix tokens that Score takes
// from, or keeps in, a call's shared cache for a request whose Prefix is
// not cached whole: below it a request runs without the cache.
const MinPrefixReuse = 16
