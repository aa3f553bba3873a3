package generate

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/evolm/evolm/model/modeltest"
	"github.com/evolm/evolm/model/sample"
)

// TestStreamJoinsToText: the deltas of a streamed request, joined, are a
// prefix of each sample's final Text that never holds a stop string, their
// tokens are the sample's tokens in order, and the request's samples equal
// the same request unstreamed.
func TestStreamJoinsToText(t *testing.T) {
	m := modeltest.Load(t, checkpoint(t, archs[0]))
	for _, stops := range [][]string{nil, {"c.d", "q."}, {"x.y.z"}} {
		var deltas []Delta
		req := Request{Prompt: prompts[0], N: 3, Sampling: hot, MaxNewTokens: 20, Seed: 9, StopStrings: stops, StopTokens: []int{5}}
		plain := gen(t, m, Options{}, req)[0]
		req.Stream = func(d Delta) { deltas = append(deltas, d) }
		got := gen(t, m, Options{}, req)[0]
		for j := range got {
			got[j].Top, plain[j].Top = nil, nil
			if !slices.Equal(got[j].Tokens, plain[j].Tokens) || got[j].Text != plain[j].Text {
				t.Fatalf("stops %q sample %d: streamed %v %q, plain %v %q", stops, j, got[j].Tokens, got[j].Text, plain[j].Tokens, plain[j].Text)
			}
			var text strings.Builder
			var toks []int
			for _, d := range deltas {
				if d.Sample == j {
					text.WriteString(d.Text)
					toks = append(toks, d.Tokens...)
					if len(d.LogProbs) != len(d.Tokens) {
						t.Errorf("delta of %d tokens with %d log-probs", len(d.Tokens), len(d.LogProbs))
					}
				}
			}
			if !strings.HasPrefix(got[j].Text, text.String()) {
				t.Errorf("stops %q sample %d: streamed %q is not a prefix of %q", stops, j, text.String(), got[j].Text)
			}
			for _, s := range stops {
				if strings.Contains(text.String(), s) {
					t.Errorf("stops %q sample %d: streamed %q holds stop %q", stops, j, text.String(), s)
				}
			}
			if !slices.Equal(toks, got[j].Tokens[:len(toks)]) || len(toks) >= len(got[j].Tokens)+1 {
				t.Errorf("stops %q sample %d: streamed tokens %v, sample %v", stops, j, toks, got[j].Tokens)
			}
		}
	}
}

// TestPromptLogProbsMatchHF: the prompt log-probs of a padded batch, with
// and without generation, equal transformers' log-softmax at each prompt
// token within 1e-4; the rank is 1 when the token is the most likely, and
// the alternatives are in descending order.
func TestPromptLogProbsMatchHF(t *testing.T) {
	dir := checkpoint(t, archs[0])
	ps := [][]int{{5, 6, 7, 8, 9, 10, 11}, {3, 4}, {100, 101, 102, 103}}
	rows := make([]map[string][]int, len(ps))
	for i, p := range ps {
		rows[i] = map[string][]int{"prompt": p[:1], "completion": p[1:]}
	}
	var want struct{ LogProbs [][]float64 }
	pyJSON(t, "hf_generate.py", "logprobs", dir, map[string]any{"rows": rows}, &want)
	m := modeltest.Load(t, dir)
	for _, maxNew := range []int{0, 3} {
		reqs := make([]Request, len(ps))
		for i, p := range ps {
			reqs[i] = Request{Prompt: p, MaxNewTokens: maxNew, PromptLogProbs: true, PromptTop: 3}
		}
		reqs[1].PromptTop = 0
		out := gen(t, m, Options{PrefillChunk: 3}, reqs...)
		for i, p := range ps {
			pp := out[i][0].Prompt
			if len(pp) != len(p)-1 || len(out[i][0].Tokens) != maxNew {
				t.Fatalf("max new %d prompt %d: %d prompt positions, %d tokens", maxNew, i, len(pp), len(out[i][0].Tokens))
			}
			for j, pos := range pp {
				if d := math.Abs(float64(pos.LogProb) - want.LogProbs[i][j]); d > 1e-4 {
					t.Errorf("prompt %d token %d: log-prob %v, hf %v", i, j+1, pos.LogProb, want.LogProbs[i][j])
				}
				if len(pos.Top) != reqs[i].PromptTop {
					t.Fatalf("prompt %d token %d: %d alternatives, want %d", i, j+1, len(pos.Top), reqs[i].PromptTop)
				}
				for k := 1; k < len(pos.Top); k++ {
					if pos.Top[k].LogProb > pos.Top[k-1].LogProb {
						t.Errorf("prompt %d token %d: alternatives out of order %v", i, j+1, pos.Top)
					}
				}
				if len(pos.Top) > 0 && (pos.Top[0].ID == p[j+1]) != (pos.Rank == 1) {
					t.Errorf("prompt %d token %d: rank %d, top %v, token %d", i, j+1, pos.Rank, pos.Top, p[j+1])
				}
			}
		}
	}
}

// TestTopAlternativesInLoop: greedy tokens are their position's first
// alternative, with the same log-prob.
func TestTopAlternativesInLoop(t *testing.T) {
	m := modeltest.Load(t, checkpoint(t, archs[0]))
	out := gen(t, m, Options{}, Request{Prompt: prompts[2], MaxNewTokens: 6, TopLogProbs: 4}, Request{Prompt: prompts[1], MaxNewTokens: 4})[0][0]
	if len(out.Top) != len(out.Tokens) {
		t.Fatalf("%d alternative lists for %d tokens", len(out.Top), len(out.Tokens))
	}
	for i, alts := range out.Top {
		if len(alts) != 4 || alts[0].ID != out.Tokens[i] || math.Abs(float64(alts[0].LogProb-out.LogProbs[i])) > 1e-5 {
			t.Errorf("position %d: token %d (%v), alternatives %v", i, out.Tokens[i], out.LogProbs[i], alts)
		}
	}
}

// TestDoneAborts: a request whose Done is closed ends after one step with
// FinishAbort, and the others in its chunk go on.
func TestDoneAborts(t *testing.T) {
	m := modeltest.Load(t, checkpoint(t, archs[0]))
	done := make(chan struct{})
	close(done)
	out := gen(t, m, Options{}, Request{Prompt: prompts[0], MaxNewTokens: 30, Done: done}, Request{Prompt: prompts[1], MaxNewTokens: 5})
	if got := out[0][0]; got.FinishReason != FinishAbort || len(got.Tokens) != 1 {
		t.Errorf("aborted request: %q after %d tokens", got.FinishReason, len(got.Tokens))
	}
	if got := out[1][0]; got.FinishReason != FinishLength || len(got.Tokens) != 5 {
		t.Errorf("other request: %q after %d tokens", got.FinishReason, len(got.Tokens))
	}
}

// evenConstraint is a test double: it allows even ids below 64, and the
// output is complete after three tokens, when only the stop tokens remain.
type evenConstraint struct{ n int }

func (c *evenConstraint) Allow(allow []bool, remaining int) bool {
	if c.n < 3 {
		for id := 0; id < 64; id += 2 {
			allow[id] = true
		}
	}
	return c.n >= 3
}

func (c *evenConstraint) Accept(id int) error {
	if id%2 != 0 || id >= 64 || c.n >= 3 {
		return errors.New("not allowed")
	}
	c.n++
	return nil
}

// TestConstraintRestrictsTokens: sampled tokens follow the constraint, and
// a sample ends on a stop token once it is complete.
func TestConstraintRestrictsTokens(t *testing.T) {
	m := modeltest.Load(t, checkpoint(t, archs[0]))
	out := gen(t, m, Options{}, Request{Prompt: prompts[0], N: 4, Sampling: sample.Params{Temperature: 1}, MaxNewTokens: 10, Seed: 3,
		StopTokens: []int{99}, Constrain: func() Constraint { return &evenConstraint{} }})[0]
	for j, s := range out {
		if len(s.Tokens) != 4 || s.Tokens[3] != 99 || s.FinishReason != FinishStop || s.StopToken != 99 {
			t.Errorf("sample %d: %v %q", j, s.Tokens, s.FinishReason)
		}
		for _, id := range s.Tokens[:3] {
			if id%2 != 0 || id >= 64 {
				t.Errorf("sample %d: token %d outside the constraint", j, id)
			}
		}
	}
}
