package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/evolm/evolm/serving/backend"
)

// sse writes a server-sent event stream in OpenAI's shape: one "data:"
// event per chunk, and "data: [DONE]" at the end, after an error too.
type sse struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func startSSE(w http.ResponseWriter) *sse {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	return &sse{w: w, rc: http.NewResponseController(w)}
}

// send writes v as one event; an error means the client has gone.
func (e *sse) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(e.w, "data: %s\n\n", b); err != nil {
		return err
	}
	return e.rc.Flush()
}

func (e *sse) done() error {
	if _, err := fmt.Fprint(e.w, "data: [DONE]\n\n"); err != nil {
		return err
	}
	return e.rc.Flush()
}

// fail ends a stream that has begun with an error event, as vLLM does.
func (e *sse) fail(ae *apiError) {
	_ = e.send(errorBody(ae))
	_ = e.done()
}

// delta is one StreamDelta of request req of a call.
type delta struct {
	req int
	d   backend.StreamDelta
}

// streamRun runs reqs on e's generator and hands each of their deltas to
// onDelta, on this goroutine, as they come (the engine's goroutine only
// queues them: a slow client never holds the engine); it returns the
// responses once every delta has been handed over. An error of onDelta (the
// client went away) ends the call: the requests' Done, their context's,
// stops their decoding.
func (s *server) streamRun(ctx context.Context, e *entry, reqs []backend.GenerateRequest, onDelta func(delta) error) ([]backend.GenerateResponse, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu    sync.Mutex
		queue []delta
	)
	wake := make(chan struct{}, 1)
	for i := range reqs {
		reqs[i].Done = ctx.Done()
		reqs[i].Stream = func(d backend.StreamDelta) {
			mu.Lock()
			queue = append(queue, delta{i, d})
			mu.Unlock()
			select {
			case wake <- struct{}{}:
			default:
			}
		}
	}
	type result struct {
		resps []backend.GenerateResponse
		err   error
	}
	done := make(chan result, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- result{err: fmt.Errorf("generate: panic: %v", p)}
			}
		}()
		resps, err := s.generate(ctx, e, reqs)
		done <- result{resps, err}
	}()
	drain := func() error {
		mu.Lock()
		batch := queue
		queue = nil
		mu.Unlock()
		for _, d := range batch {
			if err := onDelta(d); err != nil {
				return err
			}
		}
		return nil
	}
	for {
		select {
		case <-wake:
			if err := drain(); err != nil {
				cancel()
				<-done
				return nil, err
			}
		case res := <-done:
			if res.err != nil {
				return nil, res.err
			}
			return res.resps, drain()
		}
	}
}

// streamed is what a choice has sent so far.
type streamed struct {
	text   strings.Builder
	tokens int
	runes  int // characters of the log-prob tokens sent (text offsets)
}

// rest is what the final answer c adds to what was streamed: its text and
// tokens after them. The engine's contract makes the streamed text a
// prefix of the final one; anything else is a bug, reported.
func (st *streamed) rest(c backend.Completion) (string, []backend.TokenLogProb, error) {
	sent := st.text.String()
	if !strings.HasPrefix(c.Text, sent) {
		return "", nil, fmt.Errorf("stream: the streamed text %q is not a prefix of the final text %q", sent, c.Text)
	}
	var lps []backend.TokenLogProb
	if st.tokens < len(c.LogProbs) {
		lps = c.LogProbs[st.tokens:]
	}
	return c.Text[len(sent):], lps, nil
}

func (st *streamed) add(text string, lps []backend.TokenLogProb, asIDs bool) {
	st.text.WriteString(text)
	st.tokens += len(lps)
	for _, t := range lps {
		st.runes += utf8.RuneCountInString(tokenString(t, asIDs))
	}
}
