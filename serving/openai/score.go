package openai

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"

	"golang.org/x/sync/errgroup"

	"github.com/evolm/evolm/serving/backend"
)

// Score implements backend.Scorer. Through the /v1/evolm/score extension
// (see Config.ScoreAPI) one call answers a whole request. Otherwise each
// suffix is one /v1/completions call with prompt Prefix+Suffix, max_tokens
// 1, temperature 1 and ScoreTopLogprobs alternatives, read for each
// candidate; a candidate outside them gets -Inf, and the server's prefix
// cache is what saves the shared prefix. A suffix the server rejects fails
// its row.
func (c *Client) Score(ctx context.Context, reqs []backend.ScoreRequest) ([]backend.ScoreResponse, error) {
	if err := backend.CheckRequests(reqs, func(r *backend.ScoreRequest) string { return r.ID }); err != nil {
		return nil, fmt.Errorf("openai score: %w", err)
	}
	out, err := eachRow(ctx, c, reqs, c.scoreRow)
	if err != nil {
		return nil, fmt.Errorf("openai score: %w", err)
	}
	return out, nil
}

// scoreRow answers one request, through the extension when it can.
func (c *Client) scoreRow(ctx context.Context, r *backend.ScoreRequest, led *ledger) (backend.ScoreResponse, error) {
	res := backend.ScoreResponse{ID: r.ID, Model: c.cfg.Model}
	if c.cfg.ScoreAPI == ScoreExtension || (c.cfg.ScoreAPI == ScoreAuto && !c.noScoreExt.Load()) {
		lps, model, err := c.scoreExt(ctx, r)
		var rej *rejectedError
		switch {
		case err == nil:
			if err := led.commit(r.ID); err != nil {
				return res, err
			}
			if model != "" {
				res.Model = model
			}
			res.LogProbs = among(r, lps)
			return res, nil
		case c.cfg.ScoreAPI == ScoreAuto && errors.As(err, &rej) &&
			(rej.status == http.StatusNotFound || rej.status == http.StatusMethodNotAllowed):
			c.noScoreExt.Store(true) // fall through to top log-probs
		default:
			f, ferr := rowFailure(err)
			if ferr != nil {
				return res, ferr
			}
			if err := led.commit(r.ID); err != nil {
				return res, err
			}
			res.Failure = f
			return res, nil
		}
	}

	type slot struct {
		lps     []float64
		failure *backend.RowFailure
		model   string
	}
	slots := make([]slot, len(r.Suffixes))
	g, gctx := errgroup.WithContext(ctx)
	for k := range r.Suffixes {
		g.Go(func() error {
			key := fmt.Sprintf("%s#%d", r.ID, k)
			lps, model, err := c.scoreOne(gctx, key, r.Prefix+r.Suffixes[k], r.Candidates)
			if err != nil {
				f, ferr := rowFailure(err)
				if ferr != nil {
					return ferr
				}
				slots[k].failure = f
			}
			if err := led.commit(key); err != nil {
				return err
			}
			slots[k].lps, slots[k].model = lps, model
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return res, err
	}
	for k, s := range slots {
		if s.failure != nil {
			return backend.ScoreResponse{ID: r.ID, Model: res.Model,
				Failure: &backend.RowFailure{Reason: s.failure.Reason, Message: fmt.Sprintf("suffix %d: %s", k, s.failure.Message)}}, nil
		}
		if s.model != "" {
			res.Model = s.model
		}
		res.LogProbs = append(res.LogProbs, s.lps)
	}
	res.LogProbs = among(r, res.LogProbs)
	return res, nil
}

// among rewrites lps as log-probs among r's candidates when r asks for
// them. The server's top log-probs are over the vocabulary; the extension
// may have normalized them already, and normalizing again changes nothing.
func among(r *backend.ScoreRequest, lps [][]float64) [][]float64 {
	if r.AmongCandidates {
		for _, row := range lps {
			backend.AmongCandidates(r.Candidates, row)
		}
	}
	return lps
}

// scoreExt answers one request through POST /v1/evolm/score.
func (c *Client) scoreExt(ctx context.Context, r *backend.ScoreRequest) ([][]float64, string, error) {
	body := ScoreBody{Model: c.cfg.Model, Prefix: r.Prefix, Suffixes: r.Suffixes, Candidates: r.Candidates, AmongCandidates: r.AmongCandidates}
	var resp ScoreAnswer
	dec := decodeInto(&resp)
	check := func(b []byte) error {
		if err := dec(b); err != nil {
			return err
		}
		if len(resp.Logprobs) != len(r.Suffixes) {
			return &malformedError{fmt.Sprintf("%d log-prob rows for %d suffixes", len(resp.Logprobs), len(r.Suffixes))}
		}
		for k, row := range resp.Logprobs {
			if len(row) != len(r.Candidates) {
				return &malformedError{fmt.Sprintf("suffix %d: %d log-probs for %d candidates", k, len(row), len(r.Candidates))}
			}
			for j := range row {
				lp, err := logprob(row[j])
				if err != nil {
					return &malformedError{fmt.Sprintf("suffix %d candidate %q: %v", k, r.Candidates[j], err)}
				}
				row[j] = lp
			}
		}
		return nil
	}
	if err := c.call(ctx, r.ID, "/evolm/score", body, check); err != nil {
		return nil, "", err
	}
	return resp.Logprobs, resp.Model, nil
}

// scoreOne returns the candidates' next-token log-probs after prompt.
func (c *Client) scoreOne(ctx context.Context, key, prompt string, cands []string) ([]float64, string, error) {
	// Temperature 1 and no top-p/top-k: the one sampled token is not used,
	// and a server that reports log-probs after its logits processors (vLLM's
	// processed_logprobs mode) then still reports the model's distribution.
	one, t1, k := 1, 1.0, c.cfg.ScoreTopLogprobs
	body := CompletionRequest{Model: c.cfg.Model, Prompt: Prompt{Texts: []string{prompt}}, MaxTokens: &one, Temperature: &t1, N: &one, Logprobs: &k}
	var resp CompletionResponse
	out := make([]float64, len(cands))
	dec := decodeInto(&resp)
	check := func(b []byte) error {
		if err := dec(b); err != nil {
			return err
		}
		if len(resp.Choices) != 1 || resp.Choices[0].Logprobs == nil {
			return &malformedError{fmt.Sprintf("%d choices, want one with log-probs (asked for %d alternatives)", len(resp.Choices), k)}
		}
		lp := resp.Choices[0].Logprobs
		if len(lp.TopLogprobs) == 0 || len(lp.Tokens) == 0 || len(lp.TokenLogprobs) == 0 {
			return &malformedError{"no log-probs for the first position"}
		}
		top := lp.TopLogprobs[0]
		for j, cand := range cands {
			out[j] = math.Inf(-1)
			var err error
			if v, ok := top[cand]; ok {
				out[j], err = logprob(v)
			} else if lp.Tokens[0] == cand && lp.TokenLogprobs[0] != nil {
				out[j], err = logprob(*lp.TokenLogprobs[0])
			}
			if err != nil {
				return &malformedError{fmt.Sprintf("candidate %q: %v", cand, err)}
			}
		}
		return nil
	}
	if err := c.call(ctx, key, "/completions", body, check); err != nil {
		return nil, "", err
	}
	return out, resp.Model, nil
}
