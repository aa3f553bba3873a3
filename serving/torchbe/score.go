package torchbe

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/evolm/evolm/model/fused"
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
	if m.adapter != nil || m.fixed != nil {
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
