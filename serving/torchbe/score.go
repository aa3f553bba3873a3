package torchbe

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync/atomic"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/fused"
	"github.com/evolm/evolm/model/generate"
	"github.com/evolm/evolm/model/torch"
	"github.com/evolm/evolm/serving/backend"
)

// scoreRow is one ScoreRequest tokenized: the shared prefix, split in two,
// and the tails.
type scoreRow struct {
	prefix []int   // the tokens of Prefix alone, when every full prompt starts with them; else the common prefix
	extra  []int   // the rest of the tokens every full prompt starts with (often "Criterion:")
	tails  [][]int // per suffix, the rest (each ≥ 1 token)
	cands  []int   // candidate token ids
	among  bool    // log-probs among the candidates (ScoreRequest.AmongCandidates)
}

// candidates maps candidate strings to single token ids.
func (m *Model) candidates(cs []string) ([]int, error) {
	out := make([]int, len(cs))
	for j, c := range cs {
		ids := m.tok.Encode(c)
		if len(ids) != 1 {
			return nil, fmt.Errorf("candidate %q is %d tokens, want 1", c, len(ids))
		}
		out[j] = ids[0]
	}
	return out, nil
}

// SplitScore is how Score splits one request's full prompts (Prefix +
// Suffixes[k], each tokenized whole; at least one, none empty), given
// prefix, the tokens of Prefix alone. The first L tokens are common to
// every full prompt, L as large as leaves each tail at least one token; of
// them, the first P are prefilled once for consecutive requests with the
// same Prefix. P is len(prefix) when every full prompt starts with prefix
// (requests about one response, the rubrics of a pair in the rubric phase,
// share Prefix but not always the tokens after it), else L.
func SplitScore(prefix []int, full [][]int) (P, L int) {
	L = len(full[0]) - 1
	for _, f := range full[1:] {
		n := 0
		for n < L && n < len(f)-1 && f[n] == full[0][n] {
			n++
		}
		L = min(L, n)
	}
	if len(prefix) > 0 && len(prefix) <= L && slices.Equal(prefix, full[0][:len(prefix)]) {
		return len(prefix), L
	}
	return L, L
}

// tokenizeScore tokenizes Prefix+Suffixes[k], with Encode's ids but the
// Prefix's text tokenized once (tokenizer.EncodePrefixed), and splits them
// as SplitScore says.
func (m *Model) tokenizeScore(r *backend.ScoreRequest) (scoreRow, error) {
	cands, err := m.candidates(r.Candidates)
	if err != nil {
		return scoreRow{}, err
	}
	prefix, full := m.tok.EncodePrefixed(r.Prefix, r.Suffixes)
	for k := range full {
		if len(full[k]) == 0 {
			return scoreRow{}, fmt.Errorf("suffix %d: prompt encodes to no tokens", k)
		}
		if m.maxLen > 0 && len(full[k]) > m.maxLen {
			return scoreRow{}, fmt.Errorf("suffix %d: prompt of %d tokens exceeds the context of %d", k, len(full[k]), m.maxLen)
		}
	}
	P, L := SplitScore(prefix, full)
	row := scoreRow{prefix: full[0][:P], extra: full[0][P:L], cands: cands, among: r.AmongCandidates}
	for _, f := range full {
		row.tails = append(row.tails, f[L:])
	}
	return row, nil
}

// Score implements backend.Scorer with prefix reuse (see the package doc).
// The call keeps one KV cache of Prefix tokens for its requests, which take
// from it the leading tokens their Prefix shares with what it holds, as
// PlanPrefixes plans: a Prefix that the next request shares whole is
// prefilled into it once for both, and a Prefix that begins like its
// neighbours' (the judge prompt's preamble, a question several responses
// answer) reuses that beginning and leaves it for the next. A request
// that shares too little with either neighbour runs without the cache,
// its prefix and extra tokens in its one pass, and leaves the cache as it
// was for the requests after it.
func (m *Model) Score(ctx context.Context, reqs []backend.ScoreRequest) ([]backend.ScoreResponse, error) {
	return onEngine(ctx, m, func() ([]backend.ScoreResponse, error) { return m.score(ctx, reqs) })
}

func (m *Model) score(ctx context.Context, reqs []backend.ScoreRequest) (_ []backend.ScoreResponse, err error) {
	defer recoverEngine("torch score", &err)
	if err := backend.CheckRequests(reqs, func(r *backend.ScoreRequest) string { return r.ID }); err != nil {
		return nil, fmt.Errorf("torch score: %w", err)
	}
	rows := make([]scoreRow, len(reqs))
	bad := make([]error, len(reqs))
	prefixes := make([][]int, len(reqs))
	for i := range reqs {
		rows[i], bad[i] = m.tokenizeScore(&reqs[i])
		if bad[i] == nil {
			prefixes[i] = rows[i].prefix
		}
	}
	var steps []PrefixStep
	var shared sharedPrefix
	defer shared.close()
	var pack scorePack
	i := 0
	return m.scoreRows(ctx, reqs, func(r *backend.ScoreRequest, res *backend.ScoreResponse, q *heads) error {
		if steps == nil { // holding the engine: the prefix an earlier call kept is this call's
			shared = m.takeKept()
			steps, _ = PlanPrefixesFrom(shared.ids, prefixes)
		}
		row, step, err := &rows[i], steps[i], bad[i]
		i++
		if err != nil {
			res.Failure = rejected("request %s: %v", r.ID, err)
			return nil
		}
		reused := step.Cached // the prefix tokens the plan takes from the cache, not yet counted
		if ahead := (PrefixStep{Cached: step.Keep, Shared: true, Keep: step.Keep}); step.Shared && step.Keep > step.Cached && m.packable(row, ahead) {
			// The next request shares more of this Prefix than the cache
			// holds (the question a group's responses answer, or the
			// preamble, in the call's first request): that part goes to
			// the cache first, in a pass of its own, so that this request
			// packs with the next ones instead of running it in a pass
			// alone.
			if err := m.runPack(&shared, &pack, q); err != nil {
				return err
			}
			if _, err := shared.take(m.lm, row.prefix, step.Keep, 0); err != nil { // counts the step's Cached tokens as reused
				return fmt.Errorf("torch score: request %s: prefill: %w", r.ID, err)
			}
			step, reused = ahead, 0
		}
		if m.packable(row, step) {
			if !m.fits(&pack, row, step) {
				if err := m.runPack(&shared, &pack, q); err != nil {
					return err
				}
			}
			pack.add(r.ID, row, step, res, reused)
			return nil
		}
		if err := m.runPack(&shared, &pack, q); err != nil {
			return err
		}
		if err := m.scoreRequest(&shared, row, step, res, q); err != nil {
			return fmt.Errorf("torch score: request %s: %w", r.ID, err)
		}
		return nil
	}, func(q *heads) error {
		if err := m.runPack(&shared, &pack, q); err != nil {
			return err
		}
		m.keep(&shared)
		return nil
	})
}

// KeptPrefix is the most Prefix tokens of a call's shared cache that
// Score keeps for the next call (takeKept, keep): the judge prompt's
// preamble, which every call's requests begin with, or a question several
// calls' responses answer, is then prefilled once for all of them, as
// vLLM's automatic prefix caching does across requests. For the paper's
// 1.7B judge in bfloat16 that is at most 56 MiB held between calls (28
// layers × keys and values × 8 heads × 128 × 2 bytes a token).
const KeptPrefix = 512

// takeKept hands the prefix cache an earlier call kept to this one, or an
// empty one when none was kept or the weights changed since (their
// WeightsStamp differs: an optimizer step, a load into them, other
// tensors), so that a kept cache never holds keys of other weights. With
// an adapter attached (which can be switched off, and trained) nothing is
// kept. It runs while the call holds the engine.
func (m *Model) takeKept() sharedPrefix {
	p := m.kept
	m.kept = sharedPrefix{}
	if p.cache != nil && (m.keptStamp == 0 || m.weightsStamp() != m.keptStamp) {
		p.close()
	}
	return p
}

// keep keeps the first KeptPrefix tokens of p, a call's shared cache when
// it ends without an error, for the next call, in a cache as long as they
// are: a copy where p's has room for more (whole prompts), else p's own,
// which p gives up.
func (m *Model) keep(p *sharedPrefix) {
	stamp := m.weightsStamp()
	if p.cache == nil || len(p.ids) < MinPrefixReuse || stamp == 0 {
		return
	}
	n := min(len(p.ids), KeptPrefix)
	err := p.cache.Truncate(n)
	if err != nil {
		return
	}
	c := p.cache
	if c.Batch() == 1 && c.MaxLen() == n { // already a cache of their length (the kept one, unextended): hand it on
		p.cache = nil
	} else if c, err = p.cache.SelectTo([]int64{0}, n); err != nil {
		return // nothing kept; the next call prefills afresh
	}
	m.kept.close()
	m.kept, m.keptStamp = sharedPrefix{ids: slices.Clone(p.ids[:n]), cache: c}, stamp
}

// weightsStamp is the model's parameters' fused.WeightsStamp, or 0 (keep
// nothing) with an adapter attached.
func (m *Model) weightsStamp() uint64 {
	if m.adapter != nil {
		return 0
	}
	ps := m.lm.Parameters()
	ts := make([]*torch.Tensor, len(ps))
	for i, p := range ps {
		ts[i] = p.Tensor
	}
	return fused.WeightsStamp(ts)
}

// packedPasses and naivePackedPasses count the passes that packed several
// requests' rows, Score's and ScoreNaive's (for tests).
var packedPasses, naivePackedPasses atomic.Int64

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

// scoreRows answers the requests in order while it holds the engine, with
// autograd off: row fills a response, a Failure or the final hidden states
// of its criteria queued on q, and its error ends the call. The queued rows
// get their heads before scoreRows returns.
func (m *Model) scoreRows(ctx context.Context, reqs []backend.ScoreRequest, row func(*backend.ScoreRequest, *backend.ScoreResponse, *heads) error, end func(*heads) error) ([]backend.ScoreResponse, error) {
	out := make([]backend.ScoreResponse, len(reqs))
	release, err := m.hold(ctx, "torch score")
	if err != nil {
		return nil, err
	}
	defer release()
	defer torch.SetGrad(false)()
	// The call's passes reuse each other's large host blocks (activations,
	// the head's logits) instead of mapping them afresh, within the call's
	// peak; they go back to the OS when it returns.
	err = fused.KeepBlocks(func() error {
		q := &heads{m: m}
		defer q.close()
		for i := range reqs {
			if err := ctx.Err(); err != nil {
				return err
			}
			out[i] = backend.ScoreResponse{ID: reqs[i].ID, Model: m.id}
			if err := row(&reqs[i], &out[i], q); err != nil {
				return err
			}
		}
		if err := end(q); err != nil {
			return err
		}
		if err := q.flush(); err != nil {
			return fmt.Errorf("torch score: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// heads runs the vocabulary head over the criteria's final hidden states of
// several forward passes at once, up to MaxBatch rows per call, in the
// order they were queued. A head over a few rows is bound by reading its
// weight (V × C, most of a small model), so one call for the criteria of
// several requests costs about what one for a single request did.
type heads struct {
	m    *Model
	rows []*torch.Tensor // owned (K, C) final hidden states, in queue order
	dst  []headDst
	n    int // rows queued
}

// headDst is where the log-probs of k queued rows go: appended, one per row,
// to res.LogProbs.
type headDst struct {
	res   *backend.ScoreResponse
	k     int
	cands []int
	among bool // log-probs among the candidates (ScoreRequest.AmongCandidates)
}

// add queues h (k rows, owned by q from here) for res, after flushing the
// queue first if h would take it past MaxBatch rows.
func (q *heads) add(h *torch.Tensor, k int, cands []int, among bool, res *backend.ScoreResponse) error {
	if q.n > 0 && q.n+k > q.m.opt.MaxBatch {
		if err := q.flush(); err != nil {
			torch.Drop(h)
			return err
		}
	}
	q.rows = append(q.rows, h)
	q.dst = append(q.dst, headDst{res: res, k: k, cands: cands, among: among})
	q.n += k
	return nil
}

// flush runs the head over the queued rows and appends each row's
// candidates' log-probs to its response. When every queued request asks
// for them among its candidates, the head runs over the candidates' rows
// of its weight alone (N × K × C instead of N × V × C, and no log-softmax
// over V); otherwise over the vocabulary, and the rows that asked are
// renormalized after.
func (q *heads) flush() error {
	if len(q.rows) == 0 {
		return nil
	}
	rows, dst := q.rows, q.dst
	q.rows, q.dst, q.n = nil, nil, 0
	headCalls.Add(1)
	s := torch.NewScope()
	defer s.Close()
	for _, r := range rows {
		s.Adopt(r)
	}
	h := rows[0]
	if len(rows) > 1 {
		h = s.Cat(rows, 0) // (N, C)
	}
	dev := q.m.lm.Device()
	// lg is (N, W): log-probs over the vocabulary (W = V) or the
	// candidates' logits (W of them); cols[i][j] is the column of dst[i]'s
	// candidate j.
	var lg *torch.Tensor
	var W int64
	cols := make([][]int64, len(dst))
	tl, ok := q.m.lm.(model.TokenLogitser)
	if ok && !slices.ContainsFunc(dst, func(d headDst) bool { return !d.among }) {
		// Every row wants log-probs among its candidates: the head's rows
		// for the candidates of the call alone, normalized below.
		var ids []int64
		at := map[int]int64{}
		for i, d := range dst {
			for _, c := range d.cands {
				if _, ok := at[c]; !ok {
					at[c] = int64(len(ids))
					ids = append(ids, int64(c))
				}
				cols[i] = append(cols[i], at[c])
			}
		}
		W = int64(len(ids))
		candidateHeads.Add(1)
		var err error
		if lg, err = tl.TokenLogits(s, h, s.To(s.FromInt64(ids, W), dev, torch.Int64)); err != nil { // (N, W)
			return err
		}
	} else {
		l, err := q.m.lm.Logits(s, h) // (N, V)
		if err != nil {
			return err
		}
		lg, W = s.LogSoftmax(l, -1, torch.Float32), int64(q.m.lm.Config().VocabSize)
		for i, d := range dst {
			for _, c := range d.cands {
				cols[i] = append(cols[i], int64(c))
			}
		}
	}
	var idx []int64 // flat index of each row's candidates in the (N, W) result
	row := int64(0)
	for i, d := range dst {
		for range d.k {
			for _, c := range cols[i] {
				idx = append(idx, row*W+c)
			}
			row++
		}
	}
	sel := s.IndexSelect(s.Reshape(lg, -1), 0, s.To(s.FromInt64(idx, int64(len(idx))), dev, torch.Int64))
	sel = s.To(sel, torch.CPU, torch.Float32)
	if err := s.Err(); err != nil {
		return err
	}
	flat, err := torch.Float32s(sel)
	if err != nil {
		return err
	}
	for _, d := range dst {
		for range d.k {
			lp := make([]float64, len(d.cands))
			for j := range lp {
				if lp[j] = float64(flat[j]); math.IsNaN(lp[j]) {
					lp[j] = math.Inf(-1)
				}
			}
			flat = flat[len(lp):]
			if d.among {
				backend.AmongCandidates(d.cands, lp)
			}
			d.res.LogProbs = append(d.res.LogProbs, lp)
		}
	}
	return nil
}

// headCalls counts the heads flush ran, and candidateHeads those of them
// over the candidates' rows alone (for tests).
var headCalls, candidateHeads atomic.Int64

// close drops rows still queued (after an error).
func (q *heads) close() {
	torch.Drop(q.rows...)
	q.rows, q.dst, q.n = nil, nil, 0
}

// packedRow is one row of a packed pass: trunk tokens (may be none) after
// the cached ones, then each tail as a branch of its own.
type packedRow struct {
	trunk []int
	tails [][]int
}

// packedHidden runs rows as one right-padded batch after what cache holds
// (nil: nothing; else one cache row per row, its keys appended to it, which
// the caller truncates): in each row the trunk, then each tail as a branch
// of its own (model.Batch.Branches) at the positions it has in its full
// prompt. It returns, owned, per row the final hidden state at each tail's
// last token (K, C): what a row holding the cached tokens, the trunk and
// that tail alone computes there. The padding after a row's last token
// (id 0, in the trunk) is after every real token, so causal attention
// keeps them from it.
func (m *Model) packedHidden(cache *model.Cache, rows []packedRow) ([]*torch.Tensor, error) {
	s := torch.NewScope()
	defer s.Close()
	past := 0
	if cache != nil {
		past = cache.Len()
	}
	T := 0
	for _, r := range rows {
		n := len(r.trunk)
		for _, t := range r.tails {
			n += len(t)
		}
		T = max(T, n)
	}
	B := len(rows)
	ids, pos, branch := make([]int64, 0, B*T), make([]int64, 0, B*T), make([]int64, 0, B*T)
	last := make([][]int64, B) // flat (b·T + j) index of each tail's last token
	for b, r := range rows {
		for j, id := range r.trunk {
			ids, pos, branch = append(ids, int64(id)), append(pos, int64(past+j)), append(branch, 0)
		}
		for k, t := range r.tails {
			for j, id := range t {
				ids, pos, branch = append(ids, int64(id)), append(pos, int64(past+len(r.trunk)+j)), append(branch, int64(k+1))
			}
			last[b] = append(last[b], int64(len(ids)-1))
		}
		for j := len(ids) - b*T; j < T; j++ { // right padding
			ids, pos, branch = append(ids, 0), append(pos, int64(past+j)), append(branch, 0)
		}
	}
	dev := m.lm.Device()
	h, err := m.lm.Hidden(s, model.Batch{
		IDs:       s.To(s.FromInt64(ids, int64(B), int64(T)), dev, torch.Int64),
		Positions: s.To(s.FromInt64(pos, int64(B), int64(T)), dev, torch.Int64),
		Branches:  s.To(s.FromInt64(branch, int64(B), int64(T)), dev, torch.Int64),
		Cache:     cache,
	}) // (B, T, C)
	if err != nil {
		return nil, err
	}
	all := slices.Concat(last...)
	x := s.IndexSelect(s.Reshape(h, int64(B*T), -1), 0, s.To(s.FromInt64(all, int64(len(all))), dev, torch.Int64)) // a copy: the tails' rows, not h
	out := make([]*torch.Tensor, B)
	at := int64(0)
	for b, idx := range last {
		out[b] = s.Narrow(x, 0, at, int64(len(idx))) // row b's, a view of x
		at += int64(len(idx))
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	for _, x := range out {
		s.Keep(x)
	}
	return out, nil
}

// lastHidden runs full prompts as one right-padded batch and returns,
// owned, the final hidden state at each row's last token (K, C). Right
// padding needs no mask: causal attention keeps every real token from
// seeing the padding after it.
func (m *Model) lastHidden(rows [][]int) (*torch.Tensor, error) {
	s := torch.NewScope()
	defer s.Close()
	K, T := int64(len(rows)), longest(rows)
	ids, last := rightPad(rows, T)
	h, err := m.lm.Hidden(s, model.Batch{IDs: s.To(s.FromInt64(ids, K, int64(T)), m.lm.Device(), torch.Int64)}) // (K, T, C)
	if err != nil {
		return nil, err
	}
	C := int64(m.lm.Config().HiddenSize)
	x := s.IndexSelect(s.Reshape(h, -1, C), 0, s.To(s.FromInt64(last, K), m.lm.Device(), torch.Int64)) // a copy: K rows, not h
	if err := s.Err(); err != nil {
		return nil, err
	}
	return s.Keep(x), nil
}

// rightPad lays rows out as one (len(rows), T) batch of ids, right-padded
// with 0, and returns it with the flat index of each row's last real token.
func rightPad(rows [][]int, T int) (ids, last []int64) {
	ids = make([]int64, 0, len(rows)*T)
	last = make([]int64, len(rows))
	for k, r := range rows {
		for j := 0; j < T; j++ {
			id := 0
			if j < len(r) {
				id = r[j]
			}
			ids = append(ids, int64(id))
		}
		last[k] = int64(k*T + len(r) - 1)
	}
	return ids, last
}

// ScoreNaive answers like Score without prefix reuse: it runs full forward
// passes over Prefix+Suffix[k], the suffixes batched as Score batches them
// (up to MaxBatch rows per forward pass, right-padded, consecutive requests'
// rows in one pass as Score packs consecutive requests, and the head over up
// to MaxBatch queued rows across requests), so that the only difference
// between the two is the prefix's reuse: its shared prefill, and its text
// tokenized once (each full prompt here is encoded whole, to the same ids).
// It is the baseline of the judge benchmark and the reference Score is
// tested against.
func (m *Model) ScoreNaive(ctx context.Context, reqs []backend.ScoreRequest) ([]backend.ScoreResponse, error) {
	return onEngine(ctx, m, func() ([]backend.ScoreResponse, error) { return m.scoreNaive(ctx, reqs) })
}

func (m *Model) scoreNaive(ctx context.Context, reqs []backend.ScoreRequest) (_ []backend.ScoreResponse, err error) {
	defer recoverEngine("torch score", &err)
	for i := range reqs {
		if err := reqs[i].Validate(); err != nil {
			return nil, fmt.Errorf("torch score: %w", err)
		}
	}
	var pack naivePack
	return m.scoreRows(ctx, reqs, func(r *backend.ScoreRequest, res *backend.ScoreResponse, q *heads) error {
		cands, err := m.candidates(r.Candidates)
		if err != nil {
			res.Failure = rejected("request %s: %v", r.ID, err)
			return nil
		}
		full := make([][]int, len(r.Suffixes))
		for k, suf := range r.Suffixes {
			if full[k] = m.tok.Encode(r.Prefix + suf); len(full[k]) == 0 {
				res.Failure = rejected("request %s: suffix %d: prompt encodes to no tokens", r.ID, k)
				return nil
			}
		}
		if !m.naiveFits(&pack, full) {
			if err := m.runNaive(&pack, q); err != nil {
				return err
			}
		}
		if len(full) <= m.opt.MaxBatch { // joins the next pass
			pack.ids, pack.res = append(pack.ids, r.ID), append(pack.res, headDst{res: res, k: len(full), cands: cands, among: r.AmongCandidates})
			pack.rows, pack.width = append(pack.rows, full...), max(pack.width, longest(full))
			return nil
		}
		for start := 0; start < len(full); start += m.opt.MaxBatch {
			if err := ctx.Err(); err != nil {
				return err
			}
			end := min(start+m.opt.MaxBatch, len(full))
			h, err := m.lastHidden(full[start:end])
			if err != nil {
				return fmt.Errorf("torch score: request %s: %w", r.ID, err)
			}
			if err := q.add(h, end-start, cands, r.AmongCandidates, res); err != nil {
				return fmt.Errorf("torch score: request %s: %w", r.ID, err)
			}
		}
		return nil
	}, func(q *heads) error { return m.runNaive(&pack, q) })
}

// naivePack is consecutive requests' full prompts that ScoreNaive runs in
// one pass, up to MaxBatch rows, as Score packs consecutive requests'
// packed rows (scorePack).
type naivePack struct {
	ids   []string
	res   []headDst // where each request's rows go
	rows  [][]int
	width int // the longest row
}

// longest is the length of the longest of rows.
func longest(rows [][]int) int {
	n := 0
	for _, r := range rows {
		n = max(n, len(r))
	}
	return n
}

// naiveFits reports whether full joins p's pass: MaxBatch rows and
// PackTokens positions at most, or p is empty.
func (m *Model) naiveFits(p *naivePack, full [][]int) bool {
	if len(p.rows) == 0 {
		return true
	}
	n, T := len(p.rows)+len(full), max(p.width, longest(full))
	return n <= m.opt.MaxBatch && n*T <= m.opt.PackTokens
}

// runNaive runs p's rows as one right-padded batch, queues each request's
// final hidden states on q, and empties p.
func (m *Model) runNaive(p *naivePack, q *heads) error {
	if len(p.rows) == 0 {
		return nil
	}
	defer func() { p.ids, p.res, p.rows, p.width = p.ids[:0], p.res[:0], p.rows[:0], 0 }()
	if len(p.res) > 1 {
		naivePackedPasses.Add(1)
	}
	h, err := m.lastHidden(p.rows)
	if err != nil {
		return fmt.Errorf("torch score: requests %s to %s: %w", p.ids[0], p.ids[len(p.ids)-1], err)
	}
	at := int64(0)
	for i, d := range p.res {
		x := h
		if len(p.res) > 1 {
			s := torch.NewScope()
			x = s.Keep(s.Narrow(h, 0, at, int64(d.k)))
			err := s.Err()
			s.Close()
			if err != nil {
				torch.Drop(h)
				return err
			}
		}
		at += int64(d.k)
		if err := q.add(x, d.k, d.cands, d.among, d.res); err != nil {
			if len(p.res) > 1 {
				torch.Drop(h)
			}
			return fmt.Errorf("torch score: request %s: %w", p.ids[i], err)
		}
	}
	if len(p.res) > 1 {
		torch.Drop(h)
	}
	return nil
}

// LogProbs implements backend.LogProber over generate.LogProbs.
func (m *Model) LogProbs(ctx context.Context, reqs []backend.LogProbRequest) ([]backend.LogProbResponse, error) {
	return onEngine(ctx, m, func() ([]backend.LogProbResponse, error) { return m.logProbs(ctx, reqs) })
}

func (m *Model) logProbs(ctx context.Context, reqs []backend.LogProbRequest) (_ []backend.LogProbResponse, err error) {
	defer recoverEngine("torch log-probs", &err)
	if err := backend.CheckIDs(reqs, func(r *backend.LogProbRequest) string { return r.ID }); err != nil {
		return nil, fmt.Errorf("torch log-probs: %w", err)
	}
	out := make([]backend.LogProbResponse, len(reqs))
	var rows []generate.Continuation
	var idx []int
	vocab := m.lm.Config().VocabSize
	for i := range reqs {
		r := &reqs[i]
		out[i] = backend.LogProbResponse{ID: r.ID, Model: m.id}
		p, c := r.PromptTokenIDs, r.CompletionTokenIDs
		if p == nil {
			p = m.tok.Encode(r.Prompt)
		}
		if c == nil {
			c = m.tok.Encode(r.Completion)
		}
		switch {
		case len(p) == 0:
			out[i].Failure = rejected("request %s: empty prompt", r.ID)
			continue
		case len(c) == 0:
			out[i].LogProbs = []backend.TokenLogProb{}
			continue
		case m.maxLen > 0 && len(p)+len(c) > m.maxLen:
			out[i].Failure = rejected("request %s: %d tokens exceed the context of %d", r.ID, len(p)+len(c), m.maxLen)
			continue
		}
		if bad := outside(p, vocab); bad >= 0 {
			out[i].Failure = rejected("request %s: prompt token %d outside the vocabulary", r.ID, bad)
			continue
		}
		if bad := outside(c, vocab); bad >= 0 {
			out[i].Failure = rejected("request %s: completion token %d outside the vocabulary", r.ID, bad)
			continue
		}
		rows = append(rows, generate.Continuation{Prompt: p, Completion: c})
		idx = append(idx, i)
	}
	if len(rows) == 0 {
		return out, nil
	}
	release, err := m.hold(ctx, "torch log-probs")
	if err != nil {
		return nil, err
	}
	defer release()
	lps, _, err := generate.LogProbs(ctx, m.lm, rows, m.opt.MaxBatch, false)
	if err != nil {
		return nil, fmt.Errorf("torch log-probs: %w", err)
	}
	for k, lp := range lps {
		res := &out[idx[k]]
		res.LogProbs = make([]backend.TokenLogProb, len(lp))
		for t, v := range lp {
			id := rows[k].Completion[t]
			res.LogProbs[t] = backend.TokenLogProb{Token: m.tokenText(id), TokenID: id, LogProb: float64(v)}
			res.Sum += float64(v)
		}
	}
	return out, nil
}

func outside(ids []int, vocab int) int {
	for _, id := range ids {
		if id < 0 || id >= vocab {
			return id
		}
	}
	return -1
}
