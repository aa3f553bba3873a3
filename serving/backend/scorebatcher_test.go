package backend

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// gateScorer is a test double of a Scorer: it records each call's
// requests as "prefix|suffix" and answers each suffix with a log-prob of
// its own, answer(prefix, suffix); the first call blocks until released,
// and a call holding the poison prefix fails.
type gateScorer struct {
	mu      sync.Mutex
	calls   [][]string
	entered chan struct{}
	release chan struct{}
	poison  string
}

func (g *gateScorer) Score(ctx context.Context, reqs []ScoreRequest) ([]ScoreResponse, error) {
	g.mu.Lock()
	first := len(g.calls) == 0
	var seen []string
	for _, r := range reqs {
		seen = append(seen, r.Prefix+"|"+strings.Join(r.Suffixes, ","))
	}
	g.calls = append(g.calls, seen)
	g.mu.Unlock()
	if first {
		g.entered <- struct{}{}
		<-g.release
	}
	out := make([]ScoreResponse, len(reqs))
	for i, r := range reqs {
		if r.Prefix == g.poison {
			return nil, fmt.Errorf("engine broke on %q", r.Prefix)
		}
		out[i] = ScoreResponse{ID: r.ID}
		for _, s := range r.Suffixes {
			out[i].LogProbs = append(out[i].LogProbs, []float64{answer(r.Prefix, s)})
		}
	}
	return out, nil
}

// answer is gateScorer's log-prob for a suffix after a prefix, different
// for every (prefix, suffix) of the tests.
func answer(prefix, suffix string) float64 { return -float64(int(prefix[0])*1000 + int(suffix[0])) }

func scoreReq(id, prefix, suffix string) ScoreRequest {
	return ScoreRequest{ID: id, Prefix: prefix, Suffixes: []string{suffix}, Candidates: []string{" yes"}}
}

// TestScoreBatcherGroupsPrefixes: score requests queued while a call runs
// are taken by the next call together, with those of one prefix next to
// each other in the order the first of each arrived; every caller gets its
// own answers under its own IDs, and a request whose prefix breaks the
// engine fails alone, its caller with it, after bisection.
func TestScoreBatcherGroupsPrefixes(t *testing.T) {
	g := &gateScorer{entered: make(chan struct{}), release: make(chan struct{}), poison: "bad"}
	b := NewScoreBatcher(g, 10, 1)
	ctx := context.Background()
	go b.Score(ctx, []ScoreRequest{scoreReq("w", "warm", "x")})
	<-g.entered

	// Callers in this order: six with one request each (the same ID: IDs
	// are per call), the rubrics of responses A and B interleaved as
	// concurrent HTTP requests arrive; one with two requests that succeed;
	// one whose first request breaks the engine.
	calls := [][]ScoreRequest{
		{scoreReq("r", "A", "1")}, {scoreReq("r", "B", "1")}, {scoreReq("r", "A", "2")},
		{scoreReq("r", "C", "1")}, {scoreReq("r", "B", "2")}, {scoreReq("r", "A", "3")},
		{scoreReq("u", "D", "1"), scoreReq("v", "A", "4")},
		{scoreReq("p", "bad", "1"), scoreReq("q", "C", "2")},
	}
	type res struct {
		resps []ScoreResponse
		err   error
	}
	results := make([]chan res, len(calls))
	queued := 0
	for i, reqs := range calls {
		results[i] = make(chan res, 1)
		go func() {
			got, err := b.Score(ctx, reqs)
			results[i] <- res{got, err}
		}()
		queued += len(reqs)
		for b.Queued() < queued { // arrive in this order
			runtime.Gosched()
		}
	}
	close(g.release)

	for i, reqs := range calls[:7] {
		got := <-results[i]
		var want []ScoreResponse
		for _, r := range reqs {
			want = append(want, ScoreResponse{ID: r.ID, LogProbs: [][]float64{{answer(r.Prefix, r.Suffixes[0])}}})
		}
		if got.err != nil || !cmp.Equal(want, got.resps) {
			t.Errorf("caller %d: %+v, %v; want %+v", i, got.resps, got.err, want)
		}
	}
	if got := <-results[7]; got.err == nil || !strings.Contains(got.err.Error(), `engine broke on "bad"`) {
		t.Errorf("caller with the poison request: %+v, %v; want its error", got.resps, got.err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	// warm; the queue of 10 grouped by prefix, which fails on bad; then the
	// bisection, depth first, over the halves of the arrival order, each
	// grouped.
	want := [][]string{
		{"warm|x"},
		{"A|1", "A|2", "A|3", "A|4", "B|1", "B|2", "C|1", "C|2", "D|1", "bad|1"},
		{"A|1", "A|2", "B|1", "B|2", "C|1"},
		{"A|3", "A|4", "D|1", "bad|1", "C|2"},
		{"A|3", "D|1"},
		{"A|4", "bad|1", "C|2"},
		{"A|4"},
		{"bad|1", "C|2"},
		{"bad|1"},
		{"C|2"},
	}
	if diff := cmp.Diff(want, g.calls); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}

// TestScoreBatcherGathersABurst: the first call of a burst waits (Gather)
// for the rest of it, up to the most requests per call, so that requests
// sent at once go to the engine in one call, grouped by prefix, instead of
// the first alone; Gather 0 runs the first at once.
func TestScoreBatcherGathersABurst(t *testing.T) {
	for _, gather := range []bool{true, false} {
		g := &gateScorer{entered: make(chan struct{}, 1), release: make(chan struct{})}
		close(g.release) // no call blocks
		b := NewScoreBatcher(g, 4, 1)
		if b.Gather != DefaultGather {
			t.Fatalf("Gather = %v, want DefaultGather", b.Gather)
		}
		if gather {
			// Long enough that the test cannot pass by timing: the call
			// starts when the fourth request is queued.
			b.Gather = time.Hour
		} else {
			b.Gather = 0
		}
		var wg sync.WaitGroup
		for i, prefix := range []string{"A", "B", "A", "B"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := b.Score(context.Background(), []ScoreRequest{scoreReq("r", prefix, fmt.Sprint(i))}); err != nil {
					t.Error(err)
				}
			}()
			if !gather {
				wg.Wait() // one after another: each its own call
			}
		}
		wg.Wait()
		g.mu.Lock()
		calls := len(g.calls)
		if gather {
			// The goroutines arrive in any order; a call groups them by
			// prefix, the group whose first request came first first.
			var prefixes string
			for _, c := range g.calls {
				for _, r := range c {
					prefixes += r[:1]
				}
			}
			if calls != 1 || (prefixes != "AABB" && prefixes != "BBAA") {
				t.Errorf("gathered: calls %v, want the 4 requests in one call, grouped by prefix", g.calls)
			}
		} else if calls != 4 {
			t.Errorf("Gather 0, requests one after another: %d calls, want 4", calls)
		}
		g.mu.Unlock()
	}
}
