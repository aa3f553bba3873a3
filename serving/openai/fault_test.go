package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/serving/backend"
)

// fault is what the fault-injecting test server does on one attempt.
type fault int

const (
	ok              fault = iota // a valid answer
	status429                    // 429 with Retry-After: 1
	status500                    // 500 with an OpenAI error body
	status503                    // 503 without a body
	status400                    // a permanent rejection
	hang                         // no answer until the client gives up
	stallBody                    // headers, half the body, then nothing until the client gives up
	dropConn                     // close the connection without an answer
	truncatedJSON                // 200 with the first half of the JSON
	shortBody                    // 200 whose Content-Length promises more than is sent
	servedThenDrop               // compute a full answer, count it as served, then drop the connection
	noLogprobs                   // 200 with a valid answer whose log-probs were left out
	positiveLogprob              // 200 with a valid answer whose every log-prob is +5
)

// faultServer is the test double of an OpenAI-compatible server that
// follows a per-request script of faults (keyed by the X-Request-Id
// header) and then answers. It counts attempts, answers served and the peak
// of requests in flight.
type faultServer struct {
	script   map[string][]fault
	mu       sync.Mutex
	attempts map[string]int
	served   map[string]int
	inFlight atomic.Int64
	peak     atomic.Int64
}

func newFaultServer(script map[string][]fault) *faultServer {
	return &faultServer{script: script, attempts: map[string]int{}, served: map[string]int{}}
}

func (s *faultServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	for {
		p := s.peak.Load()
		if n <= p || s.peak.CompareAndSwap(p, n) {
			break
		}
	}
	id := r.Header.Get("X-Request-Id")
	s.mu.Lock()
	s.attempts[id]++
	attempt := s.attempts[id]
	s.mu.Unlock()
	f := ok
	if sc := s.script[id]; attempt <= len(sc) {
		f = sc[attempt-1]
	}
	body, err := answer(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	switch f {
	case ok:
		s.mu.Lock()
		s.served[id]++
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
	case status429:
		w.Header().Set("Retry-After", "1")
		http.Error(w, `{"error":{"message":"slow down","type":"rate_limit"}}`, http.StatusTooManyRequests)
	case status500:
		http.Error(w, `{"error":{"message":"engine exploded","type":"server_error"}}`, http.StatusInternalServerError)
	case status503:
		w.WriteHeader(http.StatusServiceUnavailable)
	case status400:
		http.Error(w, `{"error":{"message":"prompt is too long","type":"invalid_request_error"}}`, http.StatusBadRequest)
	case hang:
		<-r.Context().Done()
	case stallBody:
		w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		w.Write(body[:len(body)/2])
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	case dropConn:
		hijackClose(w)
	case truncatedJSON:
		w.Write(body[:len(body)/2])
	case shortBody:
		w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		w.Write(body[:len(body)/2])
		w.(http.Flusher).Flush()
		hijackClose(w)
	case servedThenDrop:
		s.mu.Lock()
		s.served[id]++
		s.mu.Unlock()
		hijackClose(w)
	case noLogprobs, positiveLogprob:
		w.Header().Set("Content-Type", "application/json")
		w.Write(mangleLogprobs(body, f == noLogprobs))
	}
}

// mangleLogprobs rewrites an answer's log-probs: drops every "logprobs"
// block (drop), or sets every log-prob number to +5.
func mangleLogprobs(body []byte, drop bool) []byte {
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		panic(err)
	}
	var walk func(v any, inLP bool) any
	walk = func(v any, inLP bool) any {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if k == "logprobs" && drop {
					delete(x, k)
					continue
				}
				x[k] = walk(e, inLP || strings.Contains(k, "logprob"))
			}
		case []any:
			for i, e := range x {
				x[i] = walk(e, inLP)
			}
		case float64:
			if inLP && !drop {
				return 5.0
			}
		}
		return v
	}
	b, _ := json.Marshal(walk(v, false))
	return b
}

func hijackClose(w http.ResponseWriter) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err == nil {
		conn.Close()
	}
}

// answer builds the deterministic reply to a completion or chat request:
// sample i of prompt p is "answer <i> to <p>", and the first position's
// alternatives are " yes" (-0.25) and " no" (-1.5).
func answer(r *http.Request) ([]byte, error) {
	var raw map[string]json.RawMessage
	if err := json.NewDecoder(r.Body).Decode(&raw); err != nil {
		return nil, err
	}
	n := 1
	if v, ok := raw["n"]; ok {
		json.Unmarshal(v, &n)
	}
	top := map[string]float64{" yes": -0.25, " no": -1.5}
	if strings.HasSuffix(r.URL.Path, "/evolm/score") {
		var req ScoreBody
		if err := json.Unmarshal(mustJSON(raw), &req); err != nil {
			return nil, err
		}
		resp := ScoreAnswer{Object: "evolm.score", Model: req.Model}
		for range req.Suffixes {
			row := make([]float64, len(req.Candidates))
			for j, c := range req.Candidates {
				row[j] = MinLogprob
				if v, ok := top[c]; ok {
					row[j] = v
				}
			}
			resp.Logprobs = append(resp.Logprobs, row)
		}
		return json.Marshal(resp)
	}
	if strings.HasSuffix(r.URL.Path, "/chat/completions") {
		var req ChatRequest
		if err := json.Unmarshal(mustJSON(raw), &req); err != nil {
			return nil, err
		}
		resp := ChatResponse{ID: "c", Object: "chat.completion", Model: req.Model, Usage: &Usage{PromptTokens: 3, CompletionTokens: n, TotalTokens: 3 + n}}
		for i := range n {
			resp.Choices = append(resp.Choices, ChatChoice{Index: i, FinishReason: "stop",
				Message: ChatMessage{Role: "assistant", Content: fmt.Sprintf("answer %d to %s", i, req.Messages[len(req.Messages)-1].Content)}})
		}
		return json.Marshal(resp)
	}
	var req CompletionRequest
	if err := json.Unmarshal(mustJSON(raw), &req); err != nil {
		return nil, err
	}
	resp := CompletionResponse{ID: "c", Object: "text_completion", Model: req.Model, Usage: &Usage{PromptTokens: 3, CompletionTokens: n, TotalTokens: 3 + n}}
	for i := range n {
		text := fmt.Sprintf("answer %d to %s", i, req.Prompt.Texts[0])
		ch := CompletionChoice{Index: n - 1 - i, Text: text, FinishReason: "length"}
		if req.Logprobs != nil {
			lp := -0.25
			ch.Logprobs = &CompletionLogprobs{Tokens: []string{" yes"}, TokenLogprobs: []*float64{&lp}, TopLogprobs: []map[string]float64{top}, TextOffset: []int{0}}
			ch.Text = " yes"
		}
		resp.Choices = append(resp.Choices, ch)
	}
	slices.Reverse(resp.Choices) // indices arrive out of order on purpose
	return json.Marshal(resp)
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// logRecorder is a slog.Handler that keeps every record for assertions.
type logRecorder struct {
	mu   sync.Mutex
	recs []map[string]any
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logRecorder) WithGroup(string) slog.Handler            { return h }
func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	m := map[string]any{"msg": r.Message, "level": r.Level.String()}
	r.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.Any(); return true })
	h.mu.Lock()
	h.recs = append(h.recs, m)
	h.mu.Unlock()
	return nil
}

// retries returns, per request id, the (status, attempt) of each retry record.
func (h *logRecorder) retries() map[string][][2]int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string][][2]int64{}
	for _, m := range h.recs {
		if m["msg"] != "openai: retrying request" {
			continue
		}
		id := m["id"].(string)
		out[id] = append(out[id], [2]int64{m["status"].(int64), m["attempt"].(int64)})
	}
	for _, v := range out {
		slices.SortFunc(v, func(a, b [2]int64) int { return int(a[1] - b[1]) })
	}
	return out
}

// testClient has tiny backoffs and a per-attempt timeout that only the
// hang faults reach: a healthy local answer takes milliseconds, so even a
// loaded machine stays far below it.
func testClient(t *testing.T, urls []string, log *logRecorder, edit func(*Config)) *Client {
	t.Helper()
	cfg := Config{Endpoints: urls, Model: "m", MaxInFlight: 4, MaxAttempts: 6,
		BaseBackoff: time.Millisecond, MaxBackoff: 4 * time.Millisecond, MaxRetryAfter: 2 * time.Millisecond,
		RequestTimeout: 3 * time.Second, Logger: slog.New(log), Jitter: func() float64 { return 0.5 }}
	if edit != nil {
		edit(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestFaultsExactlyOncePerRow(t *testing.T) {
	script := map[string][]fault{
		"rate-limited":        {status429, status500},
		"server-errors":       {status500, status503, status500},
		"hang":                {hang},
		"stall-body":          {stallBody},
		"drop":                {dropConn, dropConn},
		"truncated":           {truncatedJSON},
		"short-body":          {shortBody},
		"served-then-dropped": {servedThenDrop},
		"rejected":            {status400},
		"chat-faults":         {status429, truncatedJSON},
		"mixed":               {dropConn, status429, hang, truncatedJSON, status500},
	}
	srv := newFaultServer(script)
	a, b := httptest.NewServer(srv), httptest.NewServer(srv)
	defer a.Close()
	defer b.Close()
	log := &logRecorder{}
	client := testClient(t, []string{a.URL, b.URL + "/v1/"}, log, nil)

	var reqs []backend.GenerateRequest
	for id := range script {
		r := backend.GenerateRequest{ID: id, Prompt: "q-" + id, N: 2, Sampling: backend.Sampling{MaxTokens: 8}}
		if id == "chat-faults" {
			r.Prompt, r.Messages = "", []backend.Message{{Role: "user", Content: "q-" + id}}
		}
		reqs = append(reqs, r)
	}
	for i := range 40 {
		reqs = append(reqs, backend.GenerateRequest{ID: fmt.Sprintf("clean-%02d", i), Prompt: fmt.Sprint("p", i), Sampling: backend.Sampling{MaxTokens: 8}})
	}
	slices.SortFunc(reqs, func(x, y backend.GenerateRequest) int { return strings.Compare(x.ID, y.ID) })

	got, err := client.Generate(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}

	// Exactly one response per request, in order, with the server's answer.
	var want []backend.GenerateResponse
	for _, r := range reqs {
		w := backend.GenerateResponse{ID: r.ID, Model: "m", PromptTokens: 3}
		q := r.Prompt
		if q == "" {
			q = r.Messages[0].Content
		}
		if r.ID == "rejected" {
			w.PromptTokens = -1
			w.Failure = &backend.RowFailure{Reason: backend.FailureRejected, Message: a.URL + "/v1: HTTP 400: prompt is too long"}
		} else {
			for i := range r.Samples() {
				fr := backend.FinishLength
				if r.Messages != nil {
					fr = backend.FinishStop
				}
				// With n > 1 the client asks for log-probs to count tokens,
				// and this server then answers the one token " yes".
				c := backend.Completion{Index: i, Text: fmt.Sprintf("answer %d to %s", i, q), FinishReason: fr, Tokens: 1}
				if r.N > 1 && r.Messages == nil {
					c.Text = " yes"
				}
				if r.N > 1 && r.Messages != nil {
					c.Tokens = -1 // this server gives no chat log-probs
				}
				w.Completions = append(w.Completions, c)
			}
		}
		want = append(want, w)
	}
	// The rejected row may have been sent to either endpoint.
	for i := range got {
		if f := got[i].Failure; f != nil && strings.HasPrefix(f.Message, b.URL) {
			f.Message = strings.Replace(f.Message, b.URL, a.URL, 1)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("responses (-want +got):\n%s", diff)
	}

	// The server saw exactly the scripted attempts; a row the server served
	// twice (once into a dropped connection) still gave one response.
	srv.mu.Lock()
	for _, r := range reqs {
		wantAttempts := len(script[r.ID]) + 1
		if r.ID == "rejected" {
			wantAttempts = 1
		}
		if srv.attempts[r.ID] != wantAttempts {
			t.Errorf("%s: server saw %d attempts, want %d", r.ID, srv.attempts[r.ID], wantAttempts)
		}
	}
	if srv.served["served-then-dropped"] != 2 {
		t.Errorf("served-then-dropped: served %d times, want 2", srv.served["served-then-dropped"])
	}
	srv.mu.Unlock()
	if p := srv.peak.Load(); p > 4 {
		t.Errorf("peak requests in flight %d > MaxInFlight 4", p)
	}

	// Every retry was logged with its status and attempt number.
	statusOf := map[fault]int64{status429: 429, status500: 500, status503: 503, truncatedJSON: 200, stallBody: 200, shortBody: 200}
	wantLogs := map[string][][2]int64{}
	for id, sc := range script {
		if id == "rejected" {
			continue
		}
		for k, f := range sc {
			wantLogs[id] = append(wantLogs[id], [2]int64{statusOf[f], int64(k + 1)})
		}
	}
	if diff := cmp.Diff(wantLogs, log.retries()); diff != "" {
		t.Errorf("retry log records [status attempt] (-want +got):\n%s", diff)
	}
	// Each record names an endpoint and the backoff; Retry-After: 1 is
	// honoured up to MaxRetryAfter, other backoffs are jittered.
	log.mu.Lock()
	defer log.mu.Unlock()
	for _, m := range log.recs {
		ep, _ := m["endpoint"].(string)
		if ep != a.URL+"/v1" && ep != b.URL+"/v1" {
			t.Errorf("retry record endpoint %q is neither server", ep)
		}
		bo := m["backoff"].(time.Duration)
		attempt := m["attempt"].(int64)
		wantBo := time.Duration(0.5 * float64(min(time.Millisecond<<(attempt-1), 4*time.Millisecond)))
		if m["status"].(int64) == 429 {
			wantBo = 2 * time.Millisecond
		}
		if bo != wantBo {
			t.Errorf("record %v: backoff %v, want %v", m, bo, wantBo)
		}
	}
}

func TestEndpointDownNamesEndpointAndLastError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String()
	ln.Close()
	log := &logRecorder{}
	client := testClient(t, []string{down}, log, func(c *Config) { c.MaxAttempts = 3 })
	_, err = client.Generate(context.Background(), []backend.GenerateRequest{{ID: "r1", Prompt: "p", Sampling: backend.Sampling{MaxTokens: 1}}})
	var ex *ExhaustedError
	if !errors.As(err, &ex) {
		t.Fatalf("err = %v, want *ExhaustedError", err)
	}
	if ex.ID != "r1" || ex.Attempts != 3 || ex.Endpoint != down+"/v1" || !strings.Contains(err.Error(), "connection refused") || !strings.Contains(err.Error(), down) {
		t.Errorf("err = %v; want request r1, 3 attempts, endpoint %s and the connection error", err, down)
	}
	if diff := cmp.Diff(map[string][][2]int64{"r1": {{0, 1}, {0, 2}}}, log.retries()); diff != "" {
		t.Errorf("retry logs (-want +got):\n%s", diff)
	}
}

func TestAllEndpointsDown(t *testing.T) {
	var downs []string
	for range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		downs = append(downs, "http://"+ln.Addr().String())
		ln.Close()
	}
	client := testClient(t, downs, &logRecorder{}, func(c *Config) { c.MaxAttempts = 4; c.Balance = RoundRobin })
	_, err := client.Generate(context.Background(), []backend.GenerateRequest{{ID: "r1", Prompt: "p", Sampling: backend.Sampling{MaxTokens: 1}}})
	var ex *ExhaustedError
	if !errors.As(err, &ex) {
		t.Fatalf("err = %v, want *ExhaustedError", err)
	}
	if diff := cmp.Diff([]string{downs[0] + "/v1", downs[1] + "/v1"}, ex.Tried); diff != "" {
		t.Errorf("endpoints tried (-want +got):\n%s", diff)
	}
	for _, d := range downs {
		if !strings.Contains(err.Error(), d) {
			t.Errorf("error %q does not name %s", err, d)
		}
	}
}

func TestCancelStopsRetrying(t *testing.T) {
	srv := newFaultServer(map[string][]fault{"r": {hang, hang, hang, hang, hang}})
	ts := httptest.NewServer(srv)
	defer ts.Close()
	client := testClient(t, []string{ts.URL}, &logRecorder{}, func(c *Config) { c.RequestTimeout = time.Hour })
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := client.Generate(ctx, []backend.GenerateRequest{{ID: "r", Prompt: "p", Sampling: backend.Sampling{MaxTokens: 1}}})
		errc <- err
	}()
	for srv.inFlight.Load() == 0 { // wait until the attempt reaches the server
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if srv.attempts["r"] != 1 {
		t.Errorf("attempts after cancel = %d, want 1", srv.attempts["r"])
	}
}

func TestScoreRetries(t *testing.T) {
	inf := negInf()
	row := []float64{-0.25, -1.5, inf}
	req := backend.ScoreRequest{ID: "j", Prefix: "Q A ", Suffixes: []string{"c1?", "c2?", "c3?"}, Candidates: []string{" yes", " no", " Yes"}}
	want := []backend.ScoreResponse{{ID: "j", Model: "m", LogProbs: [][]float64{row, row, row}}}
	tests := []struct {
		name     string
		api      ScoreAPI
		script   map[string][]fault
		wantLogs map[string][][2]int64
	}{
		{"completions, one call per suffix", ScoreCompletions,
			map[string][]fault{"j#1": {status429, dropConn}, "j#0": {truncatedJSON}},
			map[string][][2]int64{"j#0": {{200, 1}}, "j#1": {{429, 1}, {0, 2}}}},
		{"extension, one call per row", ScoreAuto,
			map[string][]fault{"j": {status500, shortBody, status429}},
			map[string][][2]int64{"j": {{500, 1}, {200, 2}, {429, 3}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newFaultServer(tt.script)
			ts := httptest.NewServer(srv)
			defer ts.Close()
			log := &logRecorder{}
			client := testClient(t, []string{ts.URL}, log, func(c *Config) { c.ScoreAPI = tt.api })
			got, err := client.Score(context.Background(), []backend.ScoreRequest{req})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("score (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantLogs, log.retries()); diff != "" {
				t.Errorf("retry logs (-want +got):\n%s", diff)
			}
		})
	}
}

func TestScoreFallsBackWithoutExtension(t *testing.T) {
	srv := newFaultServer(nil)
	var extCalls atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/evolm/score", func(w http.ResponseWriter, r *http.Request) {
		extCalls.Add(1)
		http.Error(w, `{"detail":"Not Found"}`, http.StatusNotFound) // as vLLM answers
	})
	mux.Handle("/", srv)
	ts := httptest.NewServer(mux)
	defer ts.Close()
	client := testClient(t, []string{ts.URL}, &logRecorder{}, nil)
	req := backend.ScoreRequest{ID: "j", Prefix: "p", Suffixes: []string{"a", "b"}, Candidates: []string{" no"}}
	for range 2 {
		got, err := client.Score(context.Background(), []backend.ScoreRequest{req})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]backend.ScoreResponse{{ID: "j", Model: "m", LogProbs: [][]float64{{-1.5}, {-1.5}}}}, got); diff != "" {
			t.Errorf("score (-want +got):\n%s", diff)
		}
	}
	if n := extCalls.Load(); n != 1 {
		t.Errorf("extension tried %d times, want once: the client must remember the server lacks it", n)
	}

	strict := testClient(t, []string{ts.URL}, &logRecorder{}, func(c *Config) { c.ScoreAPI = ScoreExtension })
	got, err := strict.Score(context.Background(), []backend.ScoreRequest{req})
	if err != nil {
		t.Fatal(err)
	}
	if f := got[0].Failure; f == nil || f.Reason != backend.FailureRejected || !strings.Contains(f.Message, "HTTP 404") {
		t.Errorf("ScoreExtension against a server without it: failure %+v, want a 404 rejection", f)
	}
}

// TestFailedEndpointRests: an endpoint that fails rests — new requests go
// to the healthy one — and is used again once its rest ends, so that one
// transient error does not starve a server for good.
func TestFailedEndpointRests(t *testing.T) {
	var sickHits, fine atomic.Int64
	var sick atomic.Bool
	sick.Store(true)
	a := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sickHits.Add(1)
		if sick.Load() {
			http.Error(w, "overloaded", http.StatusServiceUnavailable)
			return
		}
		b, err := answer(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Write(b)
	}))
	defer a.Close()
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fine.Add(1)
		out, _ := answer(r)
		w.Write(out)
	}))
	defer b.Close()
	c := testClient(t, []string{a.URL, b.URL}, &logRecorder{}, func(c *Config) { c.Balance = RoundRobin })
	gen := func(n int) {
		t.Helper()
		for i := range n {
			if _, err := c.Generate(context.Background(), []backend.GenerateRequest{{ID: fmt.Sprint(i), Prompt: "p", Sampling: backend.Sampling{MaxTokens: 1}}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	gen(20)
	// Its rests double (250ms, 500ms, …), so however slow this machine,
	// it draws a handful of the 20 requests at most (1 when they take less
	// than 250ms together).
	if got := sickHits.Load(); got < 1 || got > 3 {
		t.Errorf("the failing endpoint drew %d of 20 requests, want 1 to 3 (then it rests)", got)
	}
	sick.Store(false)
	time.Sleep(300 * time.Millisecond) // the first rest is 250ms
	before := sickHits.Load()
	gen(20)
	if got := sickHits.Load() - before; got < 8 {
		t.Errorf("after its rest the recovered endpoint drew %d of 20 round-robin requests, want about half", got)
	}
}
