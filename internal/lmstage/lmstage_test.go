package lmstage

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/serving/roles"
)

// fakeGenerator is a test double: it answers every request with N
// completions "<id>#<j>", except ids in fail, which fail their row.
type fakeGenerator struct {
	fail  map[string]bool
	calls [][]backend.GenerateRequest
}

func (f *fakeGenerator) Generate(_ context.Context, reqs []backend.GenerateRequest) ([]backend.GenerateResponse, error) {
	f.calls = append(f.calls, reqs)
	out := make([]backend.GenerateResponse, len(reqs))
	for i, r := range reqs {
		out[i] = backend.GenerateResponse{ID: r.ID, Model: "fake", PromptTokens: 5}
		if f.fail[r.ID] {
			out[i].Failure = &backend.RowFailure{Reason: backend.FailureRejected, Message: "HTTP 400: too long"}
			continue
		}
		for j := 0; j < r.Samples(); j++ {
			out[i].Completions = append(out[i].Completions, backend.Completion{Index: j, Text: fmt.Sprintf("%s#%d", r.ID, j),
				FinishReason: backend.FinishLength, Tokens: 2, TokenIDs: []int{7, 8},
				LogProbs: []backend.TokenLogProb{{LogProb: -1}, {LogProb: -2}}})
		}
	}
	return out, nil
}

func TestSampleRowsAndFailures(t *testing.T) {
	fg := &fakeGenerator{fail: map[string]bool{"p2": true}}
	b := roles.NewBackend("fake", "fake", fg, nil, nil, nil)
	sp := SampleSpec{Role: schemas.RolePolicy, Phase: schemas.PhasePolicy, Step: 3, N: 2, BaseSeed: 9,
		Sampling: backend.Sampling{MaxTokens: 4, Temperature: 1, TopP: 1}}
	items := []Item{{ID: "p1"}, {ID: "p2"}, {ID: "p3"}}
	rows, err := Sample(context.Background(), b, 4, sp, items)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		ID, Prompt, Text, Finish string
		Idx                      int32
		Seed                     int64
		Err                      bool
	}
	var got []row
	for _, r := range rows {
		got = append(got, row{r.RolloutID, r.PromptID, r.Text, r.FinishReason, r.SampleIdx, r.Seed, r.Error != nil})
	}
	s1, s2, s3 := sp.ItemSeed("p1"), sp.ItemSeed("p2"), sp.ItemSeed("p3")
	want := []row{
		{"p1/policy/000003/policy/0", "p1", "p1#0", "length", 0, s1, false},
		{"p1/policy/000003/policy/1", "p1", "p1#1", "length", 1, s1 + 1, false},
		{"p2/policy/000003/policy/0", "p2", "", "error", 0, s2, true},
		{"p2/policy/000003/policy/1", "p2", "", "error", 1, s2 + 1, true},
		{"p3/policy/000003/policy/0", "p3", "p3#0", "length", 0, s3, false},
		{"p3/policy/000003/policy/1", "p3", "p3#1", "length", 1, s3 + 1, false},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("rows (-want +got):\n%s", d)
	}
	if len(fg.calls) != 2 || len(fg.calls[0]) != 2 {
		t.Errorf("backend calls %d (first of %d requests), want 2 calls of ≤ 4/n = 2 requests", len(fg.calls), len(fg.calls[0]))
	}
	if d := cmp.Diff([]float32{-1, -2}, rows[0].TokenLogprobs, cmpopts.EquateEmpty()); d != "" {
		t.Errorf("token log-probs (-want +got):\n%s", d)
	}
	if rows[0].Checkpoint != "fake" || rows[0].Model != "fake" || rows[0].CompletionTokens != 2 || rows[0].PromptTokens != 5 {
		t.Errorf("row 0 = %+v", rows[0])
	}
}
