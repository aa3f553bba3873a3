package torchbe

import (
	"context"
	"fmt"

	"github.com/evolm/evolm/model/torch"
	"github.com/evolm/evolm/serving/backend"
)

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
