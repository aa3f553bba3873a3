package torchbe

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/model/torch"
	"github.com/evolm/evolm/serving/backend"
)

// TestPlanPrefixes: the plan of Score's shared cache over orders the judge
// stage sends (responses to one question, the rubrics of one response, a
// pair's two answers), a request in between that shares little, a failed
// request and prefixes too short to share.
func TestPlanPrefixes(t *testing.T) {
	seq := func(from, n int) []int { // n distinct tokens from from on
		out := make([]int, n)
		for i := range out {
			out[i] = from + i
		}
		return out
	}
	pre := seq(1000, 10)                                  // the judge prompt's preamble
	q1, q2 := seq(2000, 10), seq(3000, 10)                // two questions
	resp := func(k int) []int { return seq(10000*k, 30) } // a response
	p := func(q []int, k int) []int { return slices.Concat(pre, q, resp(k)) }
	a, b, c, d, e := p(q1, 1), p(q1, 2), p(q1, 3), p(q2, 4), p(q2, 5)
	for _, tc := range []struct {
		name     string
		prefixes [][]int
		want     []PrefixStep
	}{
		{
			// Responses to one question take the preamble and the question
			// from the cache; the next question keeps the preamble.
			"responses to one question, then another", [][]int{a, b, c, d, e},
			[]PrefixStep{
				{Cached: 0, Shared: true, Keep: 20},
				{Cached: 20, Shared: true, Keep: 20},
				{Cached: 20, Shared: true, Keep: 20},
				{Cached: 10, Shared: true, Keep: 20},
				{Cached: 20, Shared: true, Keep: 20},
			},
		},
		{
			// The rubrics of a+ then of a−: each Prefix prefilled once, a−'s
			// after the question a+ left in the cache.
			"the rubrics of a pair's two answers", [][]int{a, a, a, b, b},
			[]PrefixStep{
				{Cached: 0, Whole: true, Shared: true, Keep: 50},
				{Cached: 50, Whole: true, Shared: true, Keep: 50},
				{Cached: 50, Whole: true, Shared: true, Keep: 50},
				{Cached: 20, Whole: true, Shared: true, Keep: 50},
				{Cached: 50, Whole: true, Shared: true, Keep: 50},
			},
		},
		{
			// A request that shares under MinPrefixReuse tokens runs
			// without the cache and leaves it to the next.
			"a request in between", [][]int{a, a, seq(1000, 5), a},
			[]PrefixStep{
				{Cached: 0, Whole: true, Shared: true, Keep: 50},
				{Cached: 50, Whole: true, Shared: true, Keep: 50},
				{},
				{Cached: 50, Whole: true, Shared: true, Keep: 50},
			},
		},
		{
			// A failed request shares with no neighbour.
			"a failed request", [][]int{seq(1, 12), nil, seq(1, 12)},
			[]PrefixStep{{}, {}, {}},
		},
		{
			// An empty Prefix the next request shares is cached (empty).
			"empty prefixes", [][]int{{}, {}},
			[]PrefixStep{
				{Cached: 0, Whole: true, Shared: true, Keep: 0},
				{Cached: 0, Whole: true, Shared: true, Keep: 0},
			},
		},
	} {
		if got := PlanPrefixes(tc.prefixes); !slices.Equal(got, tc.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, got, tc.want)
		}
	}
}

// TestScoreReusesCommonPrefix: requests whose Prefixes begin alike (one
// judge prompt, two questions, three responses each) take that beginning
// from the call's cache, as PlanPrefixes plans, in one packed pass per
// request and with the criteria over several passes (MaxBatch 1, each
// request in a cache of its own), and give every request's log-probs
// within 1e-6 of scoring it alone and within 1e-4 of the naive passes.
func TestScoreReusesCommonPrefix(t *testing.T) {
	m := tiny(t)
	ctx := context.Background()
	preamble := "You are a strict and impartial judge. Read the question and the response, then decide whether the response meets one criterion.\n\n"
	var reqs []backend.ScoreRequest
	for q, question := range []string{"What is 17 times 23?", "Name the largest prime below 50."} {
		for r, response := range []string{"391.", "It is 391, since 17 × 20 = 340 and 17 × 3 = 51.", "Forty-seven."} {
			reqs = append(reqs, backend.ScoreRequest{
				ID:         fmt.Sprintf("q%d/r%d", q, r),
				Prefix:     preamble + "<question>\n" + question + "\n</question>\n\n<response>\n" + response + "\n</response>\n\n",
				Suffixes:   []string{"Criterion: The answer is correct.\nAnswer:", "Criterion: The answer shows its steps.\nAnswer:"},
				Candidates: []string{" yes", " no"},
			})
		}
	}
	var prefixes [][]int
	for i := range reqs {
		row, err := m.tokenizeScore(&reqs[i])
		if err != nil {
			t.Fatal(err)
		}
		prefixes = append(prefixes, row.prefix)
	}
	want := 0
	for _, s := range PlanPrefixes(prefixes) {
		want += s.Cached
	}
	if want < 5*MinPrefixReuse {
		t.Fatalf("the plan takes %d tokens from the cache for 6 requests, want at least %d: the test's prefixes do not share their beginning", want, 5*MinPrefixReuse)
	}
	for _, mb := range []int{64, 1} {
		m.opt.MaxBatch = mb
		m.forgetKept() // the counts below are a fresh call's
		before := prefixReused.Load()
		got, err := m.Score(ctx, reqs)
		if err != nil {
			t.Fatal(err)
		}
		if n := prefixReused.Load() - before; n != int64(want) {
			t.Errorf("max batch %d: %d prefix tokens taken from the cache, the plan says %d", mb, n, want)
		}
		what := fmt.Sprintf("max batch %d: ", mb)
		scoreVsNaive(t, ctx, m, reqs, got, what)
		scoreVsAlone(t, ctx, m, reqs, got, 1e-6, what)
	}
	m.opt.MaxBatch = 64
}

// TestScorePacksRequests checks that consecutive requests which share only
// the judge prompt's preamble run as one batch of packed rows (scorePack)
// up to PackTokens positions, and ScoreNaive's full prompts likewise, and
// that packing changes no result beyond float rounding: each request's
// log-probs are within 1e-6 of scoring it alone and of the same call
// without packing, on both sides, and within 1e-4 of the naive passes. A
// request whose Prefix the next one shares whole (a prefill of its own)
// ends a pack, and the requests after it start the next.
func TestScorePacksRequests(t *testing.T) {
	m := tiny(t)
	ctx := context.Background()
	preamble := "You are grading a response against one criterion. Read the question and the response, then answer yes or no.\n\n"
	var reqs []backend.ScoreRequest
	for i, q := range []string{"what is 17 times 23?", "name a prime.", "spell cat backwards.", "what is 17 times 23?", "what is 17 times 23?", "how many legs has a spider?", "what colour is the sky?"} {
		suffixes := []string{"Criterion: The response is correct.\nAnswer:", "Criterion: The response is short and uses no emoji at all.\nAnswer:", "Criterion: Shows steps.\nAnswer:"}[:1+i%3]
		reqs = append(reqs, backend.ScoreRequest{
			ID:         fmt.Sprintf("q%d", i),
			Prefix:     fmt.Sprintf("%sQuestion: %s\n\nResponse: answer number %d, worked through step by step.\n\n", preamble, q, i),
			Suffixes:   suffixes,
			Candidates: []string{" yes", " no"},
		})
	}
	reqs[4].Prefix = reqs[3].Prefix // q3 and q4 share one prefill: neither packs
	unpacked := func(f func(context.Context, []backend.ScoreRequest) ([]backend.ScoreResponse, error)) []backend.ScoreResponse {
		t.Helper()
		m.opt.PackTokens = -1
		defer func() { m.opt.PackTokens = DefaultPackTokens }()
		before, beforeNaive := packedPasses.Load(), naivePackedPasses.Load()
		got, err := f(ctx, reqs)
		if err != nil {
			t.Fatal(err)
		}
		if n, nn := packedPasses.Load()-before, naivePackedPasses.Load()-beforeNaive; n != 0 || nn != 0 {
			t.Errorf("PackTokens -1: %d and %d packed passes, want none", n, nn)
		}
		return got
	}
	within := cmp.Comparer(func(a, b float64) bool { return math.Abs(a-b) <= 1e-6 })
	for _, limit := range []int{DefaultPackTokens, 250} {
		m.opt.PackTokens = limit
		before, beforeNaive := packedPasses.Load(), naivePackedPasses.Load()
		got, err := m.Score(ctx, reqs)
		if err != nil {
			t.Fatal(err)
		}
		n := packedPasses.Load() - before
		naive, err := m.ScoreNaive(ctx, reqs)
		if err != nil {
			t.Fatal(err)
		}
		nn := naivePackedPasses.Load() - beforeNaive
		m.opt.PackTokens = DefaultPackTokens
		// At the default q0–q2 and q5–q6 pack, and q3 and q4 run alone;
		// on the naive side, which shares no prefill, q0–q6 fit one pass.
		// At 250 positions the naive side's full prompts take several.
		switch {
		case limit == DefaultPackTokens && (n != 2 || nn != 1):
			t.Errorf("PackTokens %d: %d packed passes and %d naive ones, want 2 and 1", limit, n, nn)
		case limit < DefaultPackTokens && (n < 1 || nn < 2):
			t.Errorf("PackTokens %d: %d packed passes and %d naive ones, want at least 1 and 2", limit, n, nn)
		}
		what := fmt.Sprintf("PackTokens %d: ", limit)
		if d := cmp.Diff(unpacked(m.Score), got, within); d != "" {
			t.Errorf("%sScore unpacked vs packed (-unpacked +packed):\n%s", what, d)
		}
		if d := cmp.Diff(unpacked(m.ScoreNaive), naive, within); d != "" {
			t.Errorf("%sScoreNaive unpacked vs packed (-unpacked +packed):\n%s", what, d)
		}
		scoreVsNaive(t, ctx, m, reqs, got, what)
		scoreVsAlone(t, ctx, m, reqs, got, 1e-6, what)
	}
}

// forgetKept drops the prefix an earlier call kept (takeKept), for tests
// that count what one call prefills.
func (m *Model) forgetKept() {
	p := m.takeKept()
	p.close()
}

// TestScoreKeepsPrefixAcrossCalls checks that a call's shared prefix is
// kept for the next call (KeptPrefix): a single request after a call that
// ended on the same judge preamble takes it from the cache instead of
// prefilling it, within 1e-6 of scoring it after a fresh start and within
// 1e-4 of the naive passes; and that a kept prefix is not used once the
// weights changed in place (their WeightsStamp), where it would hold keys
// of the old weights: the call then prefills afresh and still matches the
// naive passes under the new weights.
func TestScoreKeepsPrefixAcrossCalls(t *testing.T) {
	m := tiny(t)
	ctx := context.Background()
	preamble := "You are a strict and impartial judge. Read the question and the response, then decide whether the response meets one criterion.\n\n"
	req := func(id, question string) backend.ScoreRequest {
		return backend.ScoreRequest{
			ID:         id,
			Prefix:     preamble + "Question: " + question + "\n\nResponse: It is 391.\n\n",
			Suffixes:   []string{"Criterion: The answer is correct.\nAnswer:", "Criterion: The answer is short.\nAnswer:"},
			Candidates: []string{" yes", " no"},
		}
	}
	first := []backend.ScoreRequest{req("a", "What is 17 times 23?"), req("b", "Name a prime.")}
	next := []backend.ScoreRequest{req("c", "What is 391 divided by 17?")}
	row, err := m.tokenizeScore(&next[0])
	if err != nil {
		t.Fatal(err)
	}
	within := cmp.Comparer(func(a, b float64) bool { return math.Abs(a-b) <= 1e-6 })

	m.forgetKept()
	fresh, err := m.Score(ctx, next)
	if err != nil {
		t.Fatal(err)
	}
	for _, changed := range []bool{false, true} {
		if _, err := m.Score(ctx, first); err != nil {
			t.Fatal(err)
		}
		if len(m.kept.ids) < MinPrefixReuse {
			t.Fatalf("the call kept %d prefix tokens, want the preamble's", len(m.kept.ids))
		}
		shared := commonPrefix(m.kept.ids, row.prefix)
		if changed {
			var v *torch.Tensor
			for _, p := range m.lm.Parameters() {
				if p.Name == "model.layers.0.self_attn.v_proj.weight" {
					v = p.Tensor
				}
			}
			if v == nil {
				t.Fatal("no model.layers.0.self_attn.v_proj.weight")
			}
			s := torch.NewScope()
			s.MulScalar_(v, 1.5) // the first layer's values, which the cache holds
			if err := s.Err(); err != nil {
				t.Fatal(err)
			}
			s.Close()
		}
		before := prefixReused.Load()
		got, err := m.Score(ctx, next)
		if err != nil {
			t.Fatal(err)
		}
		reused := prefixReused.Load() - before
		switch {
		case !changed && reused != int64(shared):
			t.Errorf("%d prefix tokens taken from the kept cache, want the %d the request shares with it", reused, shared)
		case changed && reused != 0:
			t.Errorf("weights changed: %d prefix tokens taken from a cache of the old weights, want 0", reused)
		}
		scoreVsNaive(t, ctx, m, next, got, fmt.Sprintf("weights changed %v: ", changed))
		if !changed {
			if d := cmp.Diff(fresh, got, within); d != "" {
				t.Errorf("after a fresh start vs after a kept prefix (-fresh +kept):\n%s", d)
			}
		}
	}
}
