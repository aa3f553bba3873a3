package server_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"sort"
	"strings"
	"sync"

	"github.com/evolm/evolm/serving/backend"
)

// fakeGenerator is the test double behind the server: a deterministic
// generator whose output is a function of the prompt, seed, sample index and
// position, so a test can compare what a client received with what the
// generator produced. Token j of sample i is " x<seed+100i+j>"; its log-prob
// is -0.5-0.1j; the alternatives are the sampled token, " yes" and " no"
// (log-probs depending on the prompt) and " alt<k>".
type fakeGenerator struct {
	mu    sync.Mutex
	calls int
	fail  *backend.RowFailure // when set, every row fails with it
}

func fakeYesNo(prompt string) (yes, no float64) {
	h := fnv.New32a()
	h.Write([]byte(prompt))
	v := float64(h.Sum32()%50) / 10 // 0..4.9
	return -1 - v/2, -3 + v/2
}

func (g *fakeGenerator) Generate(ctx context.Context, reqs []backend.GenerateRequest) ([]backend.GenerateResponse, error) {
	g.mu.Lock()
	g.calls++
	g.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make([]backend.GenerateResponse, len(reqs))
	for i, r := range reqs {
		prompt := r.Prompt
		for _, m := range r.Messages {
			prompt += m.Role + ": " + m.Content + "\n"
		}
		out[i] = backend.GenerateResponse{ID: r.ID, Model: "fake", PromptTokens: len(strings.Fields(prompt))}
		if g.fail != nil {
			out[i].Failure = g.fail
			continue
		}
		seed := int64(0)
		if r.Seed != nil {
			seed = *r.Seed
		}
		yes, no := fakeYesNo(prompt)
		for s := range r.Samples() {
			c := backend.Completion{Index: s, FinishReason: backend.FinishLength}
			for j := range r.MaxTokens {
				tok := fmt.Sprintf(" x%d", seed+int64(100*s+j))
				if stopped(c.Text+tok, r.Stop) {
					c.FinishReason = backend.FinishStop
					break
				}
				c.Text += tok
				c.TokenIDs = append(c.TokenIDs, 1000+j)
				if r.LogProbs || r.TopLogProbs > 0 {
					lp := -0.5 - 0.1*float64(j)
					t := backend.TokenLogProb{Token: tok, TokenID: 1000 + j, LogProb: lp}
					alts := []backend.TopLogProb{{Token: tok, LogProb: lp}, {Token: " yes", LogProb: yes - 1}, {Token: " no", LogProb: no - 1},
						{Token: " alt3", LogProb: -7}, {Token: " alt4", LogProb: -8}}
					if j == 0 {
						alts[1].LogProb, alts[2].LogProb = yes, no
					}
					sort.Slice(alts, func(a, b int) bool { return alts[a].LogProb > alts[b].LogProb })
					t.Top = alts[:min(r.TopLogProbs, len(alts))]
					if len(t.Top) == 0 {
						t.Top = nil
					}
					c.LogProbs = append(c.LogProbs, t)
				}
			}
			c.Tokens = len(c.TokenIDs)
			out[i].Completions = append(out[i].Completions, c)
		}
	}
	return out, nil
}

func stopped(text string, stop []string) bool {
	for _, s := range stop {
		if strings.Contains(text, s) {
			return true
		}
	}
	return false
}
