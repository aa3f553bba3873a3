package backend

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// gateScorer is a test double of a Scorer: it records each call's
// requests as "prefix|suffix" and answers each suffix with the log-prob
// -len(prefix+suffix); the first call blocks until released, and a call
// holding the poison prefix fails.
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
			out[i].LogProbs = append(out[i].LogProbs, []float64{-float64(len(r.Prefix + s))})
		}
	}
	return out, nil
}

func scoreReq(id, prefix, suffix string) ScoreRequest {
	return ScoreRequest{ID: id, Prefix: prefix, Suffixes: []string{suffix}, Candidates: []string{" yes"}}
}

// TestScoreBatcherGroupsPrefixes: score requests queued while a call runs
// are taken by the next call together, with those of one prefix next to
// each other in the order the first of each arrived; every caller gets its
// own answers under its own IDs, and a request whose prefix breaks the
// engine fails alone.
func TestScoreBatcherGroupsPrefixes(t *testing.T) {
	g := &gateScorer{entered: make(chan struct{}), release: make(chan struct{}), poison: "bad"}
	b := NewScoreBatcher(g, 8, 1)
	ctx := context.Background()
	go b.Score(ctx, []ScoreRequest{scoreReq("w", "warm", "x")})
	<-g.entered

	// Six callers, one request each (the same ID: IDs are per call), the
	// rubrics of responses A and B interleaved as concurrent HTTP requests
	// arrive, then one caller with two requests.
	type res struct {
		resps []ScoreResponse
		err   error
	}
	arrivals := []ScoreRequest{scoreReq("r", "A", "1"), scoreReq("r", "B", "1"), scoreReq("r", "A", "2"), scoreReq("r", "C", "1"), scoreReq("r", "B", "2"), scoreReq("r", "A", "3")}
	results := make([]chan res, len(arrivals)+1)
	for i, r := range arrivals {
		results[i] = make(chan res, 1)
		go func() {
			got, err := b.Score(ctx, []ScoreRequest{r})
			results[i] <- res{got, err}
		}()
		for b.Queued() < i+1 { // arrive in this order
			runtime.Gosched()
		}
	}
	last := len(arrivals)
	results[last] = make(chan res, 1)
	go func() {
		got, err := b.Score(ctx, []ScoreRequest{scoreReq("p", "bad", "1"), scoreReq("q", "C", "2")})
		results[last] <- res{got, err}
	}()
	for b.Queued() < len(arrivals)+2 {
		runtime.Gosched()
	}
	close(g.release)

	for i, r := range arrivals {
		got := <-results[i]
		want := []ScoreResponse{{ID: "r", LogProbs: [][]float64{{-float64(len(r.Prefix + r.Suffixes[0]))}}}}
		if got.err != nil || !cmp.Equal(want, got.resps) {
			t.Errorf("caller %d: %+v, %v; want %+v", i, got.resps, got.err, want)
		}
	}
	if got := <-results[last]; got.err == nil || !strings.Contains(got.err.Error(), `engine broke on "bad"`) {
		t.Errorf("caller with the poison request: %+v, %v; want its error", got.resps, got.err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	// warm; then the queue of 8 grouped by prefix, which fails on bad; the
	// bisection runs the halves of the arrival order, each grouped.
	if len(g.calls) < 2 {
		t.Fatalf("calls %v", g.calls)
	}
	want := []string{"A|1", "A|2", "A|3", "B|1", "B|2", "C|1", "C|2", "bad|1"}
	if diff := cmp.Diff(want, g.calls[1]); diff != "" {
		t.Errorf("the coalesced call's order (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"A|1", "A|2", "B|1", "C|1"}, g.calls[2]); diff != "" {
		t.Errorf("the first half's order (-want +got):\n%s", diff)
	}
}
