package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/model/chat"
	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/serving/openai"
	"github.com/evolm/evolm/serving/server"
	"github.com/evolm/evolm/serving/server/servertest"
)

const modelID = "evolm-test-model"

// renderTestChat is the injected chat renderer of these tests: a ChatML-like
// rendering, so that chat requests reach the generator as rendered prompts.
func renderTestChat(msgs []chat.Message, _ chat.Options) (string, error) {
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString("<|im_start|>" + m.Role + "\n" + m.Content + "<|im_end|>\n")
	}
	b.WriteString("<|im_start|>assistant\n")
	return b.String(), nil
}

func toChat(msgs []backend.Message) []chat.Message {
	out := make([]chat.Message, len(msgs))
	for i, m := range msgs {
		out[i] = chat.Message{Role: m.Role, Content: m.Content}
	}
	return out
}

// startServer serves a handler over gen on 127.0.0.1 and returns its base
// URL; the server shuts down gracefully when the test ends.
func startServer(t *testing.T, gen backend.Generator) string {
	t.Helper()
	h, err := server.NewHandler(server.Config{Generator: gen, Model: modelID, RenderChat: renderTestChat,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return startHandler(t, h)
}

// startHandler serves h with server.Serve on 127.0.0.1.
func startHandler(t *testing.T, h http.Handler) string {
	t.Helper()
	return "http://" + servertest.Start(t, h, server.ServerOptions{Grace: 5 * time.Second}) + "/v1"
}

func newClient(t *testing.T, url string) *openai.Client { return newClientModel(t, url, modelID) }

func newClientModel(t *testing.T, url, model string) *openai.Client {
	t.Helper()
	c, err := openai.New(openai.Config{Endpoints: []string{url}, Model: model, MaxAttempts: 1,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	// Runs before the server's cleanup: a connection the transport dialled
	// but never used would otherwise hold up graceful shutdown for 5s.
	t.Cleanup(c.Close)
	return c
}

// wireView is what survives the OpenAI wire: token ids are not sent, and
// the model id is the served one.
func wireView(rs []backend.GenerateResponse) []backend.GenerateResponse {
	out := make([]backend.GenerateResponse, len(rs))
	for i, r := range rs {
		r.Model = modelID
		r.PromptTokenIDs, r.PromptText = nil, "" // the wire carries neither
		comps := make([]backend.Completion, len(r.Completions))
		for j, c := range r.Completions {
			c.TokenIDs, c.TokenSource = nil, "" // the wire carries neither without return_tokens_as_token_ids
			lps := make([]backend.TokenLogProb, len(c.LogProbs))
			for k, t := range c.LogProbs {
				t.TokenID = -1
				lps[k] = t
			}
			if c.LogProbs == nil {
				lps = nil
			}
			c.LogProbs = lps
			comps[j] = c
		}
		r.Completions = comps
		out[i] = r
	}
	return out
}

func seed(v int64) *int64 { return &v }

func TestClientRoundTrip(t *testing.T) {
	gen := &fakeGenerator{}
	client := newClient(t, startServer(t, gen))
	sp := backend.Sampling{MaxTokens: 5, Temperature: 0.7, TopP: 0.9, TopK: 20, Seed: seed(11), Stop: []string{" x103"}}
	msgs := []backend.Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "hello?"}}
	rendered, _ := renderTestChat(toChat(msgs), chat.Options{})
	tests := []struct {
		name string
		req  backend.GenerateRequest
		// direct is what the generator sees for req.
		direct backend.GenerateRequest
	}{
		{name: "completion n=3 top-2 with stop",
			req: backend.GenerateRequest{ID: "a", Prompt: "What is 2+2?", N: 3, Sampling: sp, LogProbs: true, TopLogProbs: 2}},
		{name: "completion no logprobs",
			req: backend.GenerateRequest{ID: "b", Prompt: "Say hi", Sampling: sp}},
		{name: "completion sampled logprobs only",
			req: backend.GenerateRequest{ID: "c", Prompt: "Say hi", Sampling: sp, LogProbs: true}},
		{name: "chat top-3",
			req:    backend.GenerateRequest{ID: "d", Messages: msgs, N: 2, Sampling: sp, LogProbs: true, TopLogProbs: 3},
			direct: backend.GenerateRequest{ID: "d", Prompt: rendered, N: 2, Sampling: sp, LogProbs: true, TopLogProbs: 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := client.Generate(context.Background(), []backend.GenerateRequest{tt.req})
			if err != nil {
				t.Fatal(err)
			}
			direct := tt.direct
			if direct.ID == "" {
				direct = tt.req
			}
			want, err := (&fakeGenerator{}).Generate(context.Background(), []backend.GenerateRequest{direct})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(wireView(want), got); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
		})
	}
}

// checkScore scores a judge row of two criteria through client and checks it
// gets the fake's yes/no log-probs and -Inf for a third candidate; it returns
// the row.
func checkScore(t *testing.T, client *openai.Client) backend.ScoreRequest {
	t.Helper()
	req := backend.ScoreRequest{ID: "j1", Prefix: "Q: hi\nA: hello\n", Suffixes: []string{"Criterion: polite?\nAnswer:", "Criterion: short?\nAnswer:"},
		Candidates: []string{" yes", " no", " maybe"}}
	got, err := client.Score(context.Background(), []backend.ScoreRequest{req})
	if err != nil {
		t.Fatal(err)
	}
	var want [][]float64
	for _, s := range req.Suffixes {
		y, n := fakeYesNo(req.Prefix + s)
		want = append(want, []float64{y, n, math.Inf(-1)})
	}
	if diff := cmp.Diff([]backend.ScoreResponse{{ID: "j1", Model: modelID, LogProbs: want}}, got); diff != "" {
		t.Errorf("score (-want +got):\n%s", diff)
	}
	// Among the candidates: the same rows renormalized over them.
	among := req
	among.AmongCandidates = true
	got, err = client.Score(context.Background(), []backend.ScoreRequest{among})
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range want {
		backend.AmongCandidates(req.Candidates, row)
	}
	if diff := cmp.Diff([]backend.ScoreResponse{{ID: "j1", Model: modelID, LogProbs: want}}, got, cmpopts.EquateApprox(0, 1e-12)); diff != "" {
		t.Errorf("score among the candidates (-want +got):\n%s", diff)
	}
	return req
}

func TestClientScoreThroughServer(t *testing.T) {
	client := newClient(t, startServer(t, &fakeGenerator{}))
	checkScore(t, client)
}

// scoringGenerator is the test double of an engine that is also a
// backend.Scorer: its log-probs for " yes" and " no" are the ones
// fakeGenerator reports among its top alternatives, others are -Inf.
type scoringGenerator struct {
	fakeGenerator
	scored, among int // requests scored, and of them those among the candidates
}

func (g *scoringGenerator) Score(ctx context.Context, reqs []backend.ScoreRequest) ([]backend.ScoreResponse, error) {
	out := make([]backend.ScoreResponse, len(reqs))
	for i, r := range reqs {
		g.scored++
		out[i] = backend.ScoreResponse{ID: r.ID, Model: "fake"}
		if r.Candidates[0] == "reject me" {
			out[i].Failure = &backend.RowFailure{Reason: backend.FailureRejected, Message: `candidate "reject me" is 2 tokens`}
			continue
		}
		for _, suf := range r.Suffixes {
			y, n := fakeYesNo(r.Prefix + suf)
			row := make([]float64, len(r.Candidates))
			for j, c := range r.Candidates {
				row[j] = map[string]float64{" yes": y, " no": n}[c]
				if c != " yes" && c != " no" {
					row[j] = math.Inf(-1)
				}
			}
			if r.AmongCandidates {
				backend.AmongCandidates(r.Candidates, row)
			}
			out[i].LogProbs = append(out[i].LogProbs, row)
		}
		if r.AmongCandidates {
			g.among++
		}
	}
	return out, nil
}

func TestClientScoreThroughExtension(t *testing.T) {
	gen := &scoringGenerator{}
	url := startServer(t, gen)
	client := newClient(t, url)
	req := checkScore(t, client)
	if gen.scored != 2 || gen.among != 1 || gen.calls != 0 {
		t.Errorf("scorer called %d times (%d among the candidates) and generator %d; want one Score call per request, one among the candidates", gen.scored, gen.among, gen.calls)
	}
	rej := req
	rej.Candidates = []string{"reject me"}
	got, err := client.Score(context.Background(), []backend.ScoreRequest{rej})
	if err != nil {
		t.Fatal(err)
	}
	if f := got[0].Failure; f == nil || f.Reason != backend.FailureRejected || !strings.Contains(f.Message, "is 2 tokens") {
		t.Errorf("rejected candidate: failure %+v", f)
	}
	for _, body := range []string{`{"prefix":"a","suffixes":[],"candidates":["x"]}`, `{"prefix":"a","suffixes":["b"],"candidates":[]}`, `{"prefix":"a","suffixes":["b"],"candidates":[""]}`} {
		resp, err := http.Post(url+"/evolm/score", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: status %d, want 400", body, resp.StatusCode)
		}
	}
}

func TestRowFailures(t *testing.T) {
	tests := []struct {
		name       string
		fail       *backend.RowFailure
		wantReason backend.FailureReason
		wantErr    bool
	}{
		{"rejected row is a per-row failure", &backend.RowFailure{Reason: backend.FailureRejected, Message: "prompt too long"}, backend.FailureRejected, false},
		{"engine failure fails the call after retries", &backend.RowFailure{Reason: backend.FailureEngine, Message: "out of memory"}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := newClient(t, startServer(t, &fakeGenerator{fail: tt.fail}))
			got, err := client.Generate(context.Background(), []backend.GenerateRequest{{ID: "r", Prompt: "p", Sampling: backend.Sampling{MaxTokens: 2}}})
			if tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), "out of memory") || !strings.Contains(err.Error(), "HTTP 500") {
					t.Fatalf("err = %v, want HTTP 500 naming the engine failure", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got[0].Failure == nil || got[0].Failure.Reason != tt.wantReason || !strings.Contains(got[0].Failure.Message, "prompt too long") {
				t.Fatalf("failure = %+v, want reason %s naming the cause", got[0].Failure, tt.wantReason)
			}
		})
	}
}

func TestBadRequests(t *testing.T) {
	url := startServer(t, &fakeGenerator{})
	tests := []struct {
		name, path, body string
		wantStatus       int
		wantParam        string
		wantMsg          string
	}{
		{"not json", "/completions", `{"model":`, 400, "", "invalid JSON body"},
		{"trailing", "/completions", `{"prompt":"a"} x`, 400, "", "trailing data"},
		{"no prompt", "/completions", `{"model":"` + modelID + `"}`, 400, "prompt", "prompt is required"},
		{"prompt wrong type", "/completions", `{"prompt":3}`, 400, "prompt", "want a string, an array of strings, an array of token ids"},
		{"mixed prompt", "/completions", `{"prompt":[1,"a"]}`, 400, "prompt", "must be an array of integers"},
		{"empty prompt", "/completions", `{"prompt":["a",""]}`, 400, "prompt", "prompt[1] is empty"},
		{"unknown model", "/completions", `{"model":"gpt-9","prompt":"a"}`, 404, "model", `the model "gpt-9" does not exist`},
		{"max tokens", "/completions", `{"prompt":"a","max_tokens":0}`, 400, "max_tokens", "max_tokens = 0"},
		{"temperature", "/completions", `{"prompt":"a","temperature":3}`, 400, "temperature", "temperature = 3"},
		{"top p", "/completions", `{"prompt":"a","top_p":0}`, 400, "top_p", "top_p = 0"},
		{"n", "/completions", `{"prompt":"a","n":0}`, 400, "n", "n = 0"},
		{"logprobs", "/completions", `{"prompt":"a","logprobs":50}`, 400, "logprobs", "logprobs = 50"},
		{"stream options without stream", "/completions", `{"prompt":"a","stream_options":{"include_usage":true}}`, 400, "stream_options", "only be defined when stream=true"},
		{"max tokens 0 without echo", "/completions", `{"prompt":"a","max_tokens":0,"echo":false}`, 400, "max_tokens", "max_tokens = 0"},
		{"unknown field", "/completions", `{"prompt":"a","prompt_cache_key":"k"}`, 400, "prompt_cache_key", "not a field of this endpoint"},
		{"rejected field", "/completions", `{"prompt":"a","use_beam_search":true}`, 400, "use_beam_search", "does not implement beam search"},
		{"nested unknown field", "/chat/completions", `{"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"foo":1}}`, 400, "chat_template_kwargs.foo", "not supported"},
		{"empty stop", "/completions", `{"prompt":"a","stop":[""]}`, 400, "stop", "stop[0] is empty"},
		{"no messages", "/chat/completions", `{"messages":[]}`, 400, "messages", "messages is required"},
		{"bad role", "/chat/completions", `{"messages":[{"role":"robot","content":"x"}]}`, 400, "messages[0].role", `role "robot"`},
		{"image part", "/chat/completions", `{"messages":[{"role":"user","content":[{"type":"image_url"}]}]}`, 400, "messages", `only "text" is supported`},
		{"top logprobs without logprobs", "/chat/completions", `{"messages":[{"role":"user","content":"x"}],"top_logprobs":2}`, 400, "top_logprobs", "needs logprobs: true"},
		{"unknown route", "/embeddings", `{}`, 404, "", "no route POST /v1/embeddings"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := http.Post(url+tt.path, "application/json", strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			data, _ := io.ReadAll(resp.Body)
			var eb openai.ErrorBody
			if err := json.Unmarshal(data, &eb); err != nil {
				t.Fatalf("error body %q is not OpenAI error JSON: %v", data, err)
			}
			param := ""
			if eb.Error.Param != nil {
				param = *eb.Error.Param
			}
			if resp.StatusCode != tt.wantStatus || param != tt.wantParam || eb.Error.Type != "invalid_request_error" || !strings.Contains(eb.Error.Message, tt.wantMsg) {
				t.Errorf("got %d %s, want %d param %q message containing %q", resp.StatusCode, data, tt.wantStatus, tt.wantParam, tt.wantMsg)
			}
		})
	}
}

func TestChatContentParts(t *testing.T) {
	url := startServer(t, &fakeGenerator{})
	body := `{"messages":[{"role":"user","content":[{"type":"text","text":"he"},{"type":"text","text":"llo"}]}],"max_tokens":2,"seed":5}`
	resp, err := http.Post(url+"/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got openai.ChatResponse
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	// Text parts are joined with newlines, as vLLM joins them.
	rendered, _ := renderTestChat([]chat.Message{{Role: "user", Content: "he\nllo"}}, chat.Options{})
	want := openai.ChatResponse{Object: "chat.completion", Model: modelID,
		Choices: []openai.ChatChoice{{Message: openai.ChatMessage{Role: "assistant", Content: " x5 x6"}, FinishReason: "length"}},
		Usage:   &openai.Usage{PromptTokens: len(strings.Fields(rendered)), CompletionTokens: 2, TotalTokens: len(strings.Fields(rendered)) + 2}}
	got.ID, got.Created = "", 0
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("chat (-want +got):\n%s", diff)
	}
}

// blockingGenerator is a test double that holds each call until released,
// to observe graceful shutdown with a request in flight.
type blockingGenerator struct {
	fakeGenerator
	entered, release chan struct{}
}

func (g *blockingGenerator) Generate(ctx context.Context, reqs []backend.GenerateRequest) ([]backend.GenerateResponse, error) {
	g.entered <- struct{}{}
	<-g.release
	return g.fakeGenerator.Generate(ctx, reqs)
}

func TestGracefulShutdownFinishesInFlight(t *testing.T) {
	gen := &blockingGenerator{entered: make(chan struct{}), release: make(chan struct{})}
	h, err := server.NewHandler(server.Config{Generator: gen, Model: modelID, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- server.Serve(ctx, ln, h, time.Minute) }()
	type result struct {
		status int
		err    error
	}
	res := make(chan result, 1)
	go func() {
		resp, err := http.Post("http://"+ln.Addr().String()+"/v1/completions", "application/json",
			bytes.NewReader([]byte(`{"prompt":"a","max_tokens":1}`)))
		if err != nil {
			res <- result{err: err}
			return
		}
		resp.Body.Close()
		res <- result{status: resp.StatusCode}
	}()
	<-gen.entered // the request is in flight
	cancel()      // begin shutdown
	close(gen.release)
	if r := <-res; r.err != nil || r.status != http.StatusOK {
		t.Errorf("in-flight request during shutdown: status %d, err %v; want 200", r.status, r.err)
	}
	if err := <-done; err != nil {
		t.Errorf("Serve: %v", err)
	}
	if _, err := http.Get("http://" + ln.Addr().String() + "/health"); err == nil {
		t.Errorf("server still accepts connections after shutdown")
	}
}

func TestOfficialPythonClient(t *testing.T) {
	url := startServer(t, &fakeGenerator{})
	out := testutil.RunPython(t, "openai_client_check.py", url, modelID)
	var got struct {
		CompletionTexts []string  `json:"completion_texts"`
		CompletionTop   []string  `json:"completion_top_tokens"`
		ChatText        string    `json:"chat_text"`
		ChatTokens      []string  `json:"chat_tokens"`
		ChatLogprobs    []float64 `json:"chat_logprobs"`
		Errors          []string  `json:"errors"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("script output %q: %v", out, err)
	}
	// Expected values follow from the fakeGenerator's rule; see the script
	// for the requests.
	want := got
	want.CompletionTexts = []string{" x7 x8", " x107 x108 x109 x110 x111"}
	want.CompletionTop = []string{" no", " x7", " yes"}
	want.ChatText = " x3 x4 x5 x6"
	want.ChatTokens = []string{" x3", " x4", " x5", " x6"}
	want.ChatLogprobs = nil
	for j := range 4 {
		want.ChatLogprobs = append(want.ChatLogprobs, -0.5-0.1*float64(j))
	}
	want.Errors = []string{"BadRequestError:400:max_tokens", "NotFoundError:404:model"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("python client saw (-want +got):\n%s", diff)
	}
}

// countingGenerator is a test double that records the size of each call
// and holds the first one until released.
type countingGenerator struct {
	fakeGenerator
	mu      sync.Mutex
	sizes   []int
	entered chan struct{}
	release chan struct{}
}

func (g *countingGenerator) Generate(ctx context.Context, reqs []backend.GenerateRequest) ([]backend.GenerateResponse, error) {
	g.mu.Lock()
	g.sizes = append(g.sizes, len(reqs))
	first := len(g.sizes) == 1
	g.mu.Unlock()
	if first {
		g.entered <- struct{}{}
		<-g.release
	}
	return g.fakeGenerator.Generate(ctx, reqs)
}

func TestConcurrentRequestsShareGeneratorCalls(t *testing.T) {
	gen := &countingGenerator{entered: make(chan struct{}), release: make(chan struct{})}
	batcher := backend.NewBatcher(gen, 32, 1)
	h, err := server.NewHandler(server.Config{Generator: batcher, Model: modelID, MaxBatch: 1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	client := newClient(t, srv.URL)
	ctx := context.Background()
	errc := make(chan error, 1)
	go func() {
		_, err := client.Generate(ctx, []backend.GenerateRequest{{ID: "first", Prompt: "p", Sampling: backend.Sampling{MaxTokens: 2}}})
		errc <- err
	}()
	<-gen.entered // the generator is busy with the first request
	var reqs []backend.GenerateRequest
	for i := range 8 {
		reqs = append(reqs, backend.GenerateRequest{ID: fmt.Sprint("r", i), Prompt: fmt.Sprint("prompt ", i),
			Sampling: backend.Sampling{MaxTokens: 2, Seed: seed(int64(i))}})
	}
	go func() {
		// Release the generator once all eight HTTP requests wait for it.
		for batcher.Queued() < 8 {
			runtime.Gosched()
		}
		close(gen.release)
	}()
	got, err := client.Generate(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	want, _ := (&fakeGenerator{}).Generate(ctx, reqs)
	if diff := cmp.Diff(wireView(want), got); diff != "" {
		t.Errorf("batched responses (-want +got):\n%s", diff)
	}
	gen.mu.Lock()
	defer gen.mu.Unlock()
	if diff := cmp.Diff([]int{1, 8}, gen.sizes); diff != "" {
		t.Errorf("generator call sizes (-want +got):\n%s", diff)
	}
}
