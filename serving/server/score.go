package server

import (
	"fmt"
	"net/http"

	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/serving/openai"
)

func (s *server) doScore(w http.ResponseWriter, r *http.Request, req *openai.ScoreBody, e *entry) error {
	if e.score == nil {
		return &apiError{status: http.StatusNotFound, typ: "invalid_request_error", msg: fmt.Sprintf("model %q cannot score: no route POST /v1/evolm/score for it", e.id)}
	}
	sr := backend.ScoreRequest{ID: newID("score-"), Prefix: req.Prefix, Suffixes: req.Suffixes, Candidates: req.Candidates, AmongCandidates: req.AmongCandidates}
	if err := sr.Validate(); err != nil {
		return badRequest("", "%v", err)
	}
	resps, err := e.score.Score(r.Context(), []backend.ScoreRequest{sr})
	if err != nil {
		return fmt.Errorf("score: %w", err)
	}
	if len(resps) != 1 {
		return fmt.Errorf("score: %d responses for 1 request", len(resps))
	}
	res := resps[0]
	if f := res.Failure; f != nil {
		if f.Reason == backend.FailureRejected {
			return badRequest("", "%s", f.Message)
		}
		return fmt.Errorf("score: %w", f)
	}
	if len(res.LogProbs) != len(sr.Suffixes) {
		return fmt.Errorf("score: %d rows for %d suffixes", len(res.LogProbs), len(sr.Suffixes))
	}
	out := openai.ScoreAnswer{Object: "evolm.score", Model: e.id, Logprobs: make([][]float64, len(res.LogProbs))}
	for k, row := range res.LogProbs {
		if len(row) != len(sr.Candidates) {
			return fmt.Errorf("score: suffix %d has %d log-probs for %d candidates", k, len(row), len(sr.Candidates))
		}
		out.Logprobs[k] = make([]float64, len(row))
		for j, v := range row {
			out.Logprobs[k][j] = openai.WireLogprob(v)
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
