package torchbe

import (
	"context"
	"fmt"
	"math"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/backend"
	"github.com/evolm/evolm/model/generate"
	"github.com/evolm/evolm/model/torch"
)

// scoreRow is one ScoreRequest tokenized: the shared prefix and the tails.
type scoreRow struct {
	prefix []int   // tokens every full prompt starts with (≥ 1 unless some prompt is one token)
	tails  [][]int // per suffix, the rest (each ≥ 1 token)
	cands  []int   // candidate token ids
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

// tokenizeScore tokenizes Prefix+Suffixes[k] whole and splits off the
// longest common token prefix, leaving every tail at least one token.
func (m *Model) tokenizeScore(r *backend.ScoreRequest) (scoreRow, error) {
	cands, err := m.candidates(r.Candidates)
	if err != nil {
		return scoreRow{}, err
	}
	full := make([][]int, len(r.Suffixes))
	for k, suf := range r.Suffixes {
		full[k] = m.tok.Encode(r.Prefix + suf)
		if len(full[k]) == 0 {
			return scoreRow{}, fmt.Errorf("suffix %d: prompt encodes to no tokens", k)
		}
		if m.maxLen > 0 && len(full[k]) > m.maxLen {
			return scoreRow{}, fmt.Errorf("suffix %d: prompt of %d tokens exceeds the context of %d", k, len(full[k]), m.maxLen)
		}
	}
	L := len(full[0]) - 1
	for _, f := range full[1:] {
		n := 0
		for n < L && n < len(f)-1 && f[n] == full[0][n] {
			n++
		}
		L = min(L, n)
	}
	row := scoreRow{prefix: full[0][:L], cands: cands}
	for _, f := range full {
		row.tails = append(row.tails, f[L:])
	}
	return row, nil
}

// Score implements backend.Scorer with prefix reuse (see the package doc).
func (m *Model) Score(ctx context.Context, reqs []backend.ScoreRequest) (_ []backend.ScoreResponse, err error) {
	defer recoverEngine("torch score", &err)
	if err := backend.CheckRequests(reqs, func(r *backend.ScoreRequest) string { return r.ID }); err != nil {
		return nil, fmt.Errorf("torch score: %w", err)
	}
	return m.scoreRows(ctx, reqs, func(r *backend.ScoreRequest, res *backend.ScoreResponse) error {
		row, err := m.tokenizeScore(r)
		if err != nil {
			res.Failure = rejected("request %s: %v", r.ID, err)
			return nil
		}
		lps := make([][]float64, 0, len(row.tails))
		for start := 0; start < len(row.tails); start += m.opt.MaxBatch {
			end := min(start+m.opt.MaxBatch, len(row.tails))
			part, err := m.scoreTails(row.prefix, row.tails[start:end], row.cands)
			if err != nil {
				return fmt.Errorf("torch score: request %s: %w", r.ID, err)
			}
			lps = append(lps, part...)
		}
		res.LogProbs = lps
		return nil
	})
}

// scoreRows answers the requests in order while it holds the engine, with
// autograd off: row fills a response (its LogProbs or a Failure) and its
// error ends the call.
func (m *Model) scoreRows(ctx context.Context, reqs []backend.ScoreRequest, row func(*backend.ScoreRequest, *backend.ScoreResponse) error) ([]backend.ScoreResponse, error) {
	out := make([]backend.ScoreResponse, len(reqs))
	release, err := m.hold(ctx, "torch score")
	if err != nil {
		return nil, err
	}
	defer release()
	defer torch.SetGrad(false)()
	for i := range reqs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		out[i] = backend.ScoreResponse{ID: reqs[i].ID, Model: m.id}
		if err := row(&reqs[i], &out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// scoreTails prefills prefix once, runs the tails after it as one
// right-padded batch and returns, per tail, the candidates' log-probs at its
// last token. Right padding needs no mask: causal attention keeps every real
// token from seeing the padding after it.
func (m *Model) scoreTails(prefix []int, tails [][]int, cands []int) ([][]float64, error) {
	s := torch.NewScope()
	defer s.Close()
	dev := m.lm.Device()
	K := int64(len(tails))
	Tt := 0
	for _, t := range tails {
		Tt = max(Tt, len(t))
	}
	P := int64(len(prefix))
	cache, err := model.NewCache(m.lm, 1, len(prefix)+Tt)
	if err != nil {
		return nil, err
	}
	defer func() { cache.Close() }()
	if P > 0 {
		ids := make([]int64, P)
		for j, id := range prefix {
			ids[j] = int64(id)
		}
		if _, err := generate.Prefill(s, m.lm, model.Batch{IDs: s.To(s.FromInt64(ids, 1, P), dev, torch.Int64), Cache: cache}); err != nil {
			return nil, fmt.Errorf("prefill: %w", err)
		}
	}
	expanded, err := cache.Select(make([]int64, K)) // every row copies row 0
	if err != nil {
		return nil, err
	}
	cache.Close()
	cache = expanded

	ids, last := rightPad(tails, Tt)
	h, err := m.lm.Hidden(s, model.Batch{IDs: s.To(s.FromInt64(ids, K, int64(Tt)), dev, torch.Int64), Cache: cache}) // (K, Tt, C)
	if err != nil {
		return nil, fmt.Errorf("tails: %w", err)
	}
	return m.candidateLogProbs(s, m.lastHidden(s, h, last), cands)
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

// lastHidden picks, from hidden states h (K, T, C), the rows at the flat
// indices last: (K, C).
func (m *Model) lastHidden(s *torch.Scope, h *torch.Tensor, last []int64) *torch.Tensor {
	C := int64(m.lm.Config().HiddenSize)
	K := int64(len(last))
	return s.IndexSelect(s.Reshape(h, -1, C), 0, s.To(s.FromInt64(last, K), m.lm.Device(), torch.Int64))
}

// candidateLogProbs turns final hidden states (K, C) into the candidates'
// log-probs (K, J).
func (m *Model) candidateLogProbs(s *torch.Scope, h *torch.Tensor, cands []int) ([][]float64, error) {
	lg, err := m.lm.Logits(s, h) // (K, V)
	if err != nil {
		return nil, err
	}
	ci := make([]int64, len(cands))
	for j, c := range cands {
		ci[j] = int64(c)
	}
	sel := s.IndexSelect(s.LogSoftmax(lg, -1, torch.Float32), 1, s.To(s.FromInt64(ci, int64(len(ci))), m.lm.Device(), torch.Int64)) // (K, J)
	sel = s.To(sel, torch.CPU, torch.Float32)
	if err := s.Err(); err != nil {
		return nil, err
	}
	flat, err := torch.Float32s(sel)
	if err != nil {
		return nil, err
	}
	J := len(cands)
	K := len(flat) / J
	out := make([][]float64, K)
	for k := range out {
		out[k] = make([]float64, J)
		for j := range out[k] {
			v := float64(flat[k*J+j])
			if math.IsNaN(v) {
				v = math.Inf(-1)
			}
			out[k][j] = v
		}
	}
	return out, nil
}

// ScoreNaive answers like Score without prefix reuse: it runs full forward
// passes over Prefix+Suffix[k], the suffixes batched exactly as Score batches
// them (up to MaxBatch rows per forward pass, right-padded), so that the only
// difference between the two is the shared prefill. It is the baseline of
// the judge benchmark and the reference Score is tested against.
func (m *Model) ScoreNaive(ctx context.Context, reqs []backend.ScoreRequest) (_ []backend.ScoreResponse, err error) {
	defer recoverEngine("torch score", &err)
	for i := range reqs {
		if err := reqs[i].Validate(); err != nil {
			return nil, fmt.Errorf("torch score: %w", err)
		}
	}
	return m.scoreRows(ctx, reqs, func(r *backend.ScoreRequest, res *backend.ScoreResponse) error {
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
		for start := 0; start < len(full); start += m.opt.MaxBatch {
			if err := ctx.Err(); err != nil {
				return err
			}
			end := min(start+m.opt.MaxBatch, len(full))
			part, err := m.scoreFull(full[start:end], cands)
			if err != nil {
				return fmt.Errorf("torch score: request %s: %w", r.ID, err)
			}
			res.LogProbs = append(res.LogProbs, part...)
		}
		return nil
	})
}

// scoreFull runs one forward pass, without a cache, over the full prompts as
// one right-padded batch and returns, per prompt, the candidates' log-probs
// at its last token (right padding needs no mask, as in scoreTails).
func (m *Model) scoreFull(rows [][]int, cands []int) ([][]float64, error) {
	s := torch.NewScope()
	defer s.Close()
	dev := m.lm.Device()
	K := int64(len(rows))
	T := 0
	for _, r := range rows {
		T = max(T, len(r))
	}
	ids, last := rightPad(rows, T)
	h, err := m.lm.Hidden(s, model.Batch{IDs: s.To(s.FromInt64(ids, K, int64(T)), dev, torch.Int64)}) // (K, T, C)
	if err != nil {
		return nil, err
	}
	return m.candidateLogProbs(s, m.lastHidden(s, h, last), cands)
}

// LogProbs implements backend.LogProber over generate.LogProbs.
func (m *Model) LogProbs(ctx context.Context, reqs []backend.LogProbRequest) (_ []backend.LogProbResponse, err error) {
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
