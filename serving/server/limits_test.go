package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/serving/openai"
	"github.com/evolm/evolm/serving/server"
	"github.com/evolm/evolm/serving/server/servertest"
)

// startWith serves a handler made from cfg (the fake generator and test
// defaults filled in) with opt, on 127.0.0.1, and returns host:port.
func startWith(t *testing.T, cfg server.Config, opt server.ServerOptions) string {
	t.Helper()
	if cfg.Generator == nil {
		cfg.Generator = &fakeGenerator{}
	}
	cfg.Model, cfg.RenderChat, cfg.Logger = modelID, renderTestChat, slog.New(slog.DiscardHandler)
	h, err := server.NewHandler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if opt.Grace == 0 {
		opt.Grace = 5 * time.Second
	}
	return servertest.Start(t, h, opt)
}

// post sends body to path with optional headers and returns the status and
// the decoded error body (if any).
func post(t *testing.T, addr, path, body string, hdr ...string) (int, openai.ErrorBody, http.Header) {
	t.Helper()
	status, header, data, err := testutil.PostJSON(context.Background(), "http://"+addr+path, strings.NewReader(body), hdr...)
	if err != nil {
		t.Fatal(err)
	}
	var eb openai.ErrorBody
	if status != http.StatusOK {
		if err := json.Unmarshal(data, &eb); err != nil || eb.Error.Message == "" {
			t.Errorf("status %d body %q is not an OpenAI error body", status, data)
		}
	}
	return status, eb, header
}

const okBody = `{"prompt":"a","max_tokens":2}`

// TestBodyLimit413: a body over MaxBodyBytes gets 413, whether it announces
// its length or streams it chunked; the server then answers normally.
func TestBodyLimit413(t *testing.T) {
	addr := startWith(t, server.Config{MaxBodyBytes: 1 << 10}, server.ServerOptions{})
	big := `{"prompt":"` + strings.Repeat("x", 4<<10) + `"}`
	if st, eb, _ := post(t, addr, "/v1/completions", big); st != http.StatusRequestEntityTooLarge || !strings.Contains(eb.Error.Message, "1024 bytes") {
		t.Errorf("sized body: status %d %q, want 413 naming the limit", st, eb.Error.Message)
	}
	// Chunked: no Content-Length, so the limit trips while reading.
	resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json", io.MultiReader(strings.NewReader(big)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("chunked body: status %d, want 413", resp.StatusCode)
	}
	if st, _, _ := post(t, addr, "/v1/completions", okBody); st != http.StatusOK {
		t.Errorf("after: status %d", st)
	}
}

// TestSlowBody408: a client that sends its headers and then trickles the
// body is answered 408 once BodyTimeout passes, and its connection closed.
func TestSlowBody408(t *testing.T) {
	addr := startWith(t, server.Config{BodyTimeout: 300 * time.Millisecond}, server.ServerOptions{})
	c := servertest.RawConn(t, addr, time.Minute)
	if st := servertest.StalledBody(t, c); st != http.StatusRequestTimeout {
		t.Errorf("stalled body: status %d, want 408", st)
	}
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Errorf("connection after 408: read error %v, want EOF (closed)", err)
	}
}

// TestSlowHeadersAndIdleConnectionsClosed: a client that never finishes its
// headers, and a keep-alive connection left idle, are closed by the server.
func TestSlowHeadersAndIdleConnectionsClosed(t *testing.T) {
	addr := startWith(t, server.Config{}, server.ServerOptions{ReadHeaderTimeout: 300 * time.Millisecond, IdleTimeout: 300 * time.Millisecond})
	c := servertest.RawConn(t, addr, time.Minute)
	fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ")
	if _, err := io.ReadAll(c); err != nil {
		t.Errorf("slow headers: %v; want the server to close the connection", err)
	}
	idle := servertest.RawConn(t, addr, time.Minute)
	fmt.Fprintf(idle, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(okBody), okBody)
	br := bufio.NewReader(idle)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("request on the keep-alive connection: %v %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if _, err := io.ReadAll(br); err != nil {
		t.Errorf("idle keep-alive connection: %v; want the server to close it", err)
	}
}

// TestAPIKey: with an API key every /v1 route needs the bearer token (401
// otherwise, before the body is read) and /health stays open, as vLLM's
// --api-key; the openai client sends the key it is given.
func TestAPIKey(t *testing.T) {
	const key = "sk-test-123"
	addr := startWith(t, server.Config{APIKey: key}, server.ServerOptions{})
	for _, tc := range []struct {
		name, auth string
		want       int
	}{
		{"no header", "", http.StatusUnauthorized},
		{"wrong key", "Bearer nope", http.StatusUnauthorized},
		{"no Bearer prefix", key, http.StatusUnauthorized},
		{"right key", "Bearer " + key, http.StatusOK},
	} {
		var hdr []string
		if tc.auth != "" {
			hdr = []string{"Authorization", tc.auth}
		}
		st, eb, h := post(t, addr, "/v1/completions", okBody, hdr...)
		if st != tc.want {
			t.Errorf("%s: status %d, want %d", tc.name, st, tc.want)
		}
		if st == http.StatusUnauthorized && (h.Get("WWW-Authenticate") == "" || eb.Error.Code == nil || *eb.Error.Code != "invalid_api_key") {
			t.Errorf("%s: 401 without WWW-Authenticate or code invalid_api_key: %v %+v", tc.name, h, eb)
		}
	}
	for path, want := range map[string]int{"/v1/models": http.StatusUnauthorized, "/health": http.StatusOK} {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s without a key: %d, want %d", path, resp.StatusCode, want)
		}
	}
	// Unauthenticated bodies are not read: a huge one is refused at once.
	if st, _, _ := post(t, addr, "/v1/completions", strings.Repeat(" ", 40<<20)); st != http.StatusUnauthorized {
		t.Errorf("unauthenticated 40 MB body: %d, want 401", st)
	}
	for _, k := range []string{"", "wrong"} {
		c, err := openai.New(openai.Config{Endpoints: []string{"http://" + addr + "/v1"}, Model: modelID, APIKey: k, MaxAttempts: 1,
			Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.Generate(context.Background(), []backend.GenerateRequest{{ID: "r", Prompt: "a", Sampling: backend.Sampling{MaxTokens: 1}}})
		if err != nil || res[0].Failure == nil || !strings.Contains(res[0].Failure.Message, "401") {
			t.Errorf("client with key %q: %+v %v, want a 401 row failure", k, res, err)
		}
	}
	c, err := openai.New(openai.Config{Endpoints: []string{"http://" + addr + "/v1"}, Model: modelID, APIKey: key, MaxAttempts: 1,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Generate(context.Background(), []backend.GenerateRequest{{ID: "r", Prompt: "a", Sampling: backend.Sampling{MaxTokens: 1}}})
	if err != nil || res[0].Failure != nil || len(res[0].Completions) != 1 {
		t.Errorf("client with the key: %+v %v", res, err)
	}
}

// flakyGenerator is a test double: its first call fails the way the engine
// does when libtorch cannot allocate, or panics; later calls succeed.
type flakyGenerator struct {
	fakeGenerator
	panics bool
	calls  atomic.Int64
}

func (g *flakyGenerator) Generate(ctx context.Context, reqs []backend.GenerateRequest) ([]backend.GenerateResponse, error) {
	if g.calls.Add(1) == 1 {
		if g.panics {
			var m map[string]int
			m["boom"]++
		}
		return nil, fmt.Errorf("torch generate: DefaultCPUAllocator: can't allocate memory: %w", backend.ErrUnavailable)
	}
	return g.fakeGenerator.Generate(ctx, reqs)
}

// TestEngineFailureFailsOnlyThatRequest: an engine out of memory answers 503
// with Retry-After, a panicking generator 500 (with and without the
// coalescing Batcher), and in each case the next request is served.
func TestEngineFailureFailsOnlyThatRequest(t *testing.T) {
	for _, tc := range []struct {
		name     string
		panics   bool
		maxBatch int
		want     int
	}{
		{"out of memory", false, 0, http.StatusServiceUnavailable},
		{"panic in a batch", true, 0, http.StatusInternalServerError},
		{"panic in the handler", true, 1, http.StatusInternalServerError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := startWith(t, server.Config{Generator: &flakyGenerator{panics: tc.panics}, MaxBatch: tc.maxBatch}, server.ServerOptions{})
			st, eb, h := post(t, addr, "/v1/completions", okBody)
			if st != tc.want {
				t.Errorf("failing request: %d %q, want %d", st, eb.Error.Message, tc.want)
			}
			if st == http.StatusServiceUnavailable && h.Get("Retry-After") == "" {
				t.Error("503 without Retry-After")
			}
			if st, _, _ := post(t, addr, "/v1/completions", okBody); st != http.StatusOK {
				t.Errorf("next request: %d, want 200", st)
			}
		})
	}
}

// TestClientKeyFromEnv: a client configured without a key sends
// $EVOLM_API_KEY.
func TestClientKeyFromEnv(t *testing.T) {
	const key = "sk-env-456"
	addr := startWith(t, server.Config{APIKey: key}, server.ServerOptions{})
	t.Setenv(openai.APIKeyEnv, key)
	c, err := openai.New(openai.Config{Endpoints: []string{"http://" + addr + "/v1"}, Model: modelID, MaxAttempts: 1,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if ids, err := c.Models(context.Background()); err != nil || len(ids) != 1 {
		t.Errorf("models with the key from the env: %v %v", ids, err)
	}
}
