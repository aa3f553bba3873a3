package torchbe

import (
	"context"
	"fmt"

	"github.com/evolm/evolm/model/generate"
	"github.com/evolm/evolm/serving/backend"
)

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
