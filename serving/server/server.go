// Package serve is `evolm serve`: an OpenAI-compatible HTTP server over the
// backend interfaces, so that one frozen judge (or policy) can serve many
// workers and the `openai` backend can be tested end to end.
//
// Routes:
//
//	GET  /v1/models            the one served model
//	POST /v1/completions       prompt (string or array), n, seed, stop, logprobs (0..MaxTopLogprobs)
//	POST /v1/chat/completions  messages, n, seed, stop, logprobs + top_logprobs
//	POST /v1/evolm/score       extension: backend.Scorer (prefix, suffixes, candidates, among_candidates)
//	GET  /health               200 when serving
//
// The handler is generic over backend.Generator. Concurrent requests are
// coalesced into batched Generator calls (Config.MaxBatch), and concurrent
// score requests into batched Scorer calls, those with the same prefix
// next to each other and the first of a burst waiting briefly for the rest
// (backend.ScoreBatcher), so that the rubrics of one response share its
// prefill. Chat messages are rendered
// to a prompt by Config.RenderChat (the model's chat template); without one
// they are passed to the generator as Messages. A bad request gets HTTP 400
// (404 for an unknown model) with the OpenAI error JSON
// {"error": {"message", "type", "param", "code"}}; a row the generator
// rejects gets 400 (a prompt over the context or the memory budget), an
// engine that could not run the request (backend.ErrUnavailable: out of
// memory, a libtorch failure) 503, and any other failure of the generator
// 500; a handler panic fails its request with 500, never the process.
//
// Limits, as a network server needs them: a body over MaxBodyBytes is
// answered 413 unread, a body not received within BodyTimeout 408; headers
// and idle connections are bounded by ServerOptions. With APIKey set, every
// /v1 route needs "Authorization: Bearer <key>" (401 otherwise), as vLLM's
// --api-key; /health stays open. Log-probs that
// are -Inf go on the wire as openai.MinLogprob, as vLLM does. Streaming and
// echo are not supported and answer 400.
package server

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/evolm/evolm/internal/failpoint"
	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/serving/openai"
)

// Config configures the handler.
type Config struct {
	Generator backend.Generator // required
	// Scorer serves /v1/evolm/score; nil uses the Generator when it is also
	// a backend.Scorer (the torch engine is), else the route answers 404
	// and clients fall back to top log-probs.
	Scorer backend.Scorer
	Model  string // model id served at /v1/models; required
	// RenderChat renders a conversation to prompt text, ending with the
	// assistant turn's opening (the Qwen3 ChatML template of model/chat).
	// nil passes messages to the Generator unrendered.
	RenderChat func([]backend.Message) (string, error)
	// DefaultMaxTokens applies when a request gives no max_tokens; default 16
	// for completions (as OpenAI's legacy API) and ChatMaxTokens for chat.
	DefaultMaxTokens int
	ChatMaxTokens    int // default 1024
	MaxTopLogprobs   int // most alternatives per position; default 20
	MaxN             int // most samples per request; default 128
	// MaxBodyBytes is the largest request body; a larger one is answered
	// 413 without being read. Default 32 MiB.
	MaxBodyBytes int64
	// BodyTimeout bounds the reading of a request body (a slow-loris body
	// is answered 408 and its connection closed); default 30s. The reading
	// of headers and idle connections are bounded by ServerOptions.
	BodyTimeout time.Duration
	// APIKey, when set, is required as "Authorization: Bearer <key>" on
	// every /v1 route, as vLLM's --api-key (401 otherwise); /health stays
	// open.
	APIKey string
	// MaxBatch is the most requests per Generator or Scorer call:
	// concurrent HTTP requests are coalesced by a backend.Batcher (a
	// backend.ScoreBatcher for scores), so an engine that runs one call at
	// a time still decodes them together. Default 32; 1 turns coalescing
	// off and every HTTP request calls the engine on its own.
	MaxBatch int
	// BatchRunners is how many coalesced Generator calls may run at once;
	// default 1. Coalesced Scorer calls run one at a time.
	BatchRunners int
	Logger       *slog.Logger
	// Root is the served model's directory, reported as its root by
	// /v1/models (as vLLM does); "" leaves it out.
	Root string
	// Loader, when set, serves the runtime weight updates (models.go):
	// POST /update_weights_from_disk (SGLang's) always, and
	// POST /v1/load_lora_adapter and /v1/unload_lora_adapter (vLLM's) when
	// RuntimeLoRA is set too, as vLLM serves them only with
	// VLLM_ALLOW_RUNTIME_LORA_UPDATING.
	Loader      Loader
	RuntimeLoRA bool
}

type server struct {
	cfg Config
	reg *registry
	log *slog.Logger
}

// NewHandler checks cfg and returns the OpenAI-compatible handler.
func NewHandler(cfg Config) (http.Handler, error) {
	if cfg.Generator == nil {
		return nil, errors.New("serve: no generator")
	}
	if cfg.Model == "" {
		return nil, errors.New("serve: no model id")
	}
	if cfg.DefaultMaxTokens <= 0 {
		cfg.DefaultMaxTokens = 16
	}
	if cfg.ChatMaxTokens <= 0 {
		cfg.ChatMaxTokens = 1024
	}
	if cfg.MaxTopLogprobs <= 0 {
		cfg.MaxTopLogprobs = 20
	}
	if cfg.MaxN <= 0 {
		cfg.MaxN = 128
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 32 << 20
	}
	if cfg.BodyTimeout <= 0 {
		cfg.BodyTimeout = 30 * time.Second
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 32
	}
	s := &server{cfg: cfg, log: cfg.Logger}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.reg = &registry{adapters: map[string]*entry{}, log: s.log}
	s.reg.base = s.newEntry(cfg.Model, cfg.Root, "", Engine{Generator: cfg.Generator, Scorer: cfg.Scorer, RenderChat: cfg.RenderChat})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("POST /v1/completions", handle(s, func(q *openai.CompletionRequest) string { return q.Model }, s.doCompletions))
	mux.HandleFunc("POST /v1/chat/completions", handle(s, func(q *openai.ChatRequest) string { return q.Model }, s.doChat))
	mux.HandleFunc("POST /v1/evolm/score", handle(s, func(q *openai.ScoreBody) string { return q.Model }, s.doScore))
	if cfg.Loader != nil {
		mux.HandleFunc("POST "+openai.UpdateWeightsFromDiskPath, s.updateWeightsFromDisk)
		if cfg.RuntimeLoRA {
			mux.HandleFunc("POST /v1"+openai.LoadLoRAAdapterPath, s.loadLoRAAdapter)
			mux.HandleFunc("POST /v1"+openai.UnloadLoRAAdapterPath, s.unloadLoRAAdapter)
		}
	}
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "invalid_request_error", "", fmt.Sprintf("no route %s %s", r.Method, r.URL.Path))
	})
	var h http.Handler = mux
	if cfg.APIKey != "" {
		h = requireKey(cfg.APIKey, h)
	}
	return s.recoverPanics(h), nil
}

// requireKey answers 401 to a /v1 request (any method but OPTIONS) without
// "Authorization: Bearer <key>", before its body is read: the routes vLLM's
// --api-key protects.
func requireKey(key string, next http.Handler) http.Handler {
	want := []byte("Bearer " + key)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		guarded := r.URL.Path == "/v1" || strings.HasPrefix(r.URL.Path, "/v1/") || r.URL.Path == openai.UpdateWeightsFromDiskPath
		if r.Method != http.MethodOptions && guarded &&
			subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="evolm"`)
			writeAPIError(w, &apiError{status: http.StatusUnauthorized, typ: "invalid_request_error", code: "invalid_api_key",
				msg: "Unauthorized: this server needs an API key (Authorization: Bearer <key>)"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// recoverPanics fails a request whose handler panics with a 500, and logs
// the stack, instead of dropping the connection (net/http's default).
func (s *server) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			p := recover()
			if p == nil {
				return
			}
			if p == http.ErrAbortHandler {
				panic(p)
			}
			s.log.Error("serve: handler panic; the request fails, the server goes on", "path", r.URL.Path,
				"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			writeError(w, http.StatusInternalServerError, "server_error", "", fmt.Sprintf("internal error: %v", p))
		}()
		next.ServeHTTP(w, r)
	})
}

// ServerOptions bound the HTTP server. Zero fields take the defaults.
type ServerOptions struct {
	// Grace is how long requests in flight may finish on shutdown; 30s.
	Grace time.Duration
	// ReadHeaderTimeout bounds the reading of request headers (a
	// slow-loris client); 10s.
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes a keep-alive connection idle this long; 120s.
	IdleTimeout time.Duration
}

// Serve is ServeWith with the default timeouts and the given grace.
func Serve(ctx context.Context, ln net.Listener, h http.Handler, grace time.Duration) error {
	return ServeWith(ctx, ln, h, ServerOptions{Grace: grace})
}

// ServeWith serves h on ln until ctx is done, then shuts down gracefully: it
// stops accepting, lets requests in flight finish for up to opt.Grace, and
// then closes the remaining connections. It returns nil after a clean
// shutdown. Request bodies are bounded by the handler (Config.BodyTimeout,
// Config.MaxBodyBytes): a server-wide read timeout would also cut off
// generations that outlast it.
func ServeWith(ctx context.Context, ln net.Listener, h http.Handler, opt ServerOptions) error {
	grace := opt.Grace
	if grace <= 0 {
		grace = 30 * time.Second
	}
	if opt.ReadHeaderTimeout <= 0 {
		opt.ReadHeaderTimeout = 10 * time.Second
	}
	if opt.IdleTimeout <= 0 {
		opt.IdleTimeout = 120 * time.Second
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: opt.ReadHeaderTimeout, IdleTimeout: opt.IdleTimeout,
		MaxHeaderBytes: 1 << 20}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		cerr := srv.Close()
		return errors.Join(fmt.Errorf("serve %s: graceful shutdown: %w", ln.Addr(), err), cerr)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	}
	return nil
}

// apiError is a request error with its HTTP status and OpenAI type.
type apiError struct {
	status int
	typ    string
	param  string
	code   string
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func badRequest(param, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", param: param, msg: fmt.Sprintf(format, args...)}
}

func writeError(w http.ResponseWriter, status int, typ, param, msg string) {
	ae := &apiError{status: status, typ: typ, param: param, msg: msg}
	if status == http.StatusNotFound && param == "model" {
		ae.code = "model_not_found"
	}
	writeAPIError(w, ae)
}

func writeAPIError(w http.ResponseWriter, ae *apiError) {
	body := openai.ErrorBody{Error: openai.ErrorDetail{Message: ae.msg, Type: ae.typ}}
	if ae.param != "" {
		body.Error.Param = &ae.param
	}
	if ae.code != "" {
		body.Error.Code = &ae.code
	}
	writeJSON(w, ae.status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
	case errors.Is(err, backend.ErrUnavailable):
		// The engine failed on this request (out of memory, a libtorch
		// error); it and the server are still up, so a retry may succeed.
		ae = &apiError{status: http.StatusServiceUnavailable, typ: "server_error", msg: err.Error()}
		w.Header().Set("Retry-After", "1")
	default:
		ae = &apiError{status: http.StatusInternalServerError, typ: "server_error", msg: err.Error()}
	}
	s.log.LogAttrs(r.Context(), slog.LevelInfo, "serve: request failed", slog.String("path", r.URL.Path),
		slog.Int("status", ae.status), slog.String("error", ae.msg))
	writeAPIError(w, ae)
}

// decode reads a JSON body of at most MaxBodyBytes within BodyTimeout.
func (s *server) decode(w http.ResponseWriter, r *http.Request, v any) error {
	tooLarge := &apiError{status: http.StatusRequestEntityTooLarge, typ: "invalid_request_error",
		msg: fmt.Sprintf("request body exceeds the limit of %d bytes", s.cfg.MaxBodyBytes)}
	if r.ContentLength > s.cfg.MaxBodyBytes {
		w.Header().Set("Connection", "close") // the unread body stays behind
		return tooLarge
	}
	rc := http.NewResponseController(w)
	deadline := rc.SetReadDeadline(time.Now().Add(s.cfg.BodyTimeout)) == nil
	timedOut := false
	defer func() {
		// Lifted once the body is read: net/http's background read, which
		// notices a client going away, would otherwise hit it
		// mid-generation. After a timeout it stays, so that the server does
		// not wait for the rest of the body before closing.
		if deadline && !timedOut {
			_ = rc.SetReadDeadline(time.Time{})
		}
	}()
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	bodyErr := func(err error) error {
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			return tooLarge
		case errors.Is(err, os.ErrDeadlineExceeded):
			timedOut = true
			w.Header().Set("Connection", "close")
			return &apiError{status: http.StatusRequestTimeout, typ: "invalid_request_error",
				msg: fmt.Sprintf("request body not received within %v", s.cfg.BodyTimeout)}
		}
		return badRequest("", "invalid JSON body: %v", err)
	}
	if err := dec.Decode(v); err != nil {
		return bodyErr(err)
	}
	// Only whitespace may follow the value. (dec.More would let a stray
	// '}' or ']' through: found by FuzzDecodeRequest.)
	if _, err := dec.Token(); err != io.EOF {
		if err != nil && bodyErr(err).(*apiError).status != http.StatusBadRequest {
			return bodyErr(err) // too large, or too slow
		}
		return badRequest("", "invalid JSON body: trailing data after the JSON value")
	}
	return nil
}

// metadata is an answer's SGLang metadata block: the weight version, sent
// by a server whose weights can change (Config.Loader).
func (s *server) metadata(e *entry) *openai.ResponseMetadata {
	if s.cfg.Loader == nil {
		return nil
	}
	return &openai.ResponseMetadata{WeightVersion: e.version}
}

// models lists the base model and the loaded adapters, with vLLM's root
// (the directory) and parent (an adapter's base model).
func (s *server) models(w http.ResponseWriter, r *http.Request) {
	list := openai.ModelList{Object: "list", Data: []openai.Model{}}
	for _, e := range s.reg.list() {
		m := openai.Model{ID: e.id, Object: "model", Created: e.created, OwnedBy: "evolm", Root: e.root}
		if e.parent != "" {
			p := e.parent
			m.Parent = &p
		}
		list.Data = append(list.Data, m)
	}
	writeJSON(w, http.StatusOK, list)
}

// sampling checks the parameters common to both endpoints.
func (s *server) sampling(maxTok *int, defMax int, temp, topP *float64, topK, n *int, seed *int64, stop []string) (backend.Sampling, int, error) {
	sp := backend.Sampling{MaxTokens: defMax, Temperature: 1, TopP: 1, Seed: seed, Stop: stop}
	if maxTok != nil {
		if *maxTok <= 0 {
			return sp, 0, badRequest("max_tokens", "max_tokens = %d, want > 0", *maxTok)
		}
		sp.MaxTokens = *maxTok
	}
	if temp != nil {
		if *temp < 0 || *temp > 2 || math.IsNaN(*temp) {
			return sp, 0, badRequest("temperature", "temperature = %v, want in [0, 2]", *temp)
		}
		sp.Temperature = *temp
	}
	if topP != nil {
		if *topP <= 0 || *topP > 1 || math.IsNaN(*topP) {
			return sp, 0, badRequest("top_p", "top_p = %v, want in (0, 1]", *topP)
		}
		sp.TopP = *topP
	}
	if topK != nil {
		// vLLM uses -1 for "disabled".
		if *topK < -1 {
			return sp, 0, badRequest("top_k", "top_k = %d, want >= -1", *topK)
		}
		sp.TopK = max(*topK, 0)
	}
	samples := 1
	if n != nil {
		if *n < 1 || *n > s.cfg.MaxN {
			return sp, 0, badRequest("n", "n = %d, want in [1, %d]", *n, s.cfg.MaxN)
		}
		samples = *n
	}
	for i, st := range stop {
		if st == "" {
			return sp, 0, badRequest("stop", "stop[%d] is empty", i)
		}
	}
	return sp, samples, nil
}

// generate runs the model of e and maps its failures to API errors.
func (s *server) generate(ctx context.Context, e *entry, reqs []backend.GenerateRequest) ([]backend.GenerateResponse, error) {
	for i := range reqs {
		if err := reqs[i].Validate(); err != nil {
			return nil, badRequest("", "%v", err)
		}
	}
	resps, err := e.gen.Generate(ctx, reqs)
	if err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	if len(resps) != len(reqs) {
		return nil, fmt.Errorf("generate: %d responses for %d requests", len(resps), len(reqs))
	}
	for i, r := range resps {
		if r.Failure != nil {
			if r.Failure.Reason == backend.FailureRejected {
				return nil, badRequest("", "%s", r.Failure.Message)
			}
			return nil, fmt.Errorf("generate: %w", r.Failure)
		}
		if len(r.Completions) != reqs[i].Samples() {
			return nil, fmt.Errorf("generate: %d completions, want %d", len(r.Completions), reqs[i].Samples())
		}
	}
	return resps, nil
}

func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// handle is the handler of a POST endpoint: it decodes the body as a Q,
// finds the model it names (model; 404 when it is not served) and answers
// it with do on that model; an error from any of them is the response
// (s.fail).
func handle[Q any](s *server, model func(*Q) string, do func(w http.ResponseWriter, r *http.Request, req *Q, e *entry) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req Q
		err := s.decode(w, r, &req)
		if err == nil {
			var e *entry
			// Fault tests: EVOLM_FAILPOINT=serve-request@N kills the
			// server at its N-th request, mid-step for a learner.
			failpoint.Hit("serve-request")
			if e, err = s.reg.acquire(model(&req)); err == nil {
				err = do(w, r, &req, e)
				s.reg.release(e)
			}
		}
		if err != nil {
			s.fail(w, r, err)
		}
	}
}

func (s *server) doCompletions(w http.ResponseWriter, r *http.Request, req *openai.CompletionRequest, e *entry) error {
	switch {
	case req.Stream:
		return badRequest("stream", "streaming is not supported")
	case req.Echo:
		return badRequest("echo", "echo is not supported")
	case len(req.Prompt) == 0:
		return badRequest("prompt", "prompt is required")
	}
	for i, p := range req.Prompt {
		if p == "" {
			return badRequest("prompt", "prompt[%d] is empty", i)
		}
	}
	sp, n, err := s.sampling(req.MaxTokens, s.cfg.DefaultMaxTokens, req.Temperature, req.TopP, req.TopK, req.N, req.Seed, req.Stop)
	if err != nil {
		return err
	}
	top := 0
	if req.Logprobs != nil {
		if *req.Logprobs < 0 || *req.Logprobs > s.cfg.MaxTopLogprobs {
			return badRequest("logprobs", "logprobs = %d, want in [0, %d]", *req.Logprobs, s.cfg.MaxTopLogprobs)
		}
		top = *req.Logprobs
	}
	id := newID("cmpl-")
	reqs := make([]backend.GenerateRequest, len(req.Prompt))
	for i, p := range req.Prompt {
		reqs[i] = backend.GenerateRequest{ID: fmt.Sprintf("%s-%d", id, i), Prompt: p, N: n, Sampling: sp,
			LogProbs: req.Logprobs != nil, TopLogProbs: top}
	}
	resps, err := s.generate(r.Context(), e, reqs)
	if err != nil {
		return err
	}
	out := openai.CompletionResponse{ID: id, Object: "text_completion", Created: time.Now().Unix(), Model: e.id, Usage: &openai.Usage{},
		Metadata: s.metadata(e)}
	for i, res := range resps {
		out.Usage.PromptTokens += max(res.PromptTokens, 0)
		for _, c := range res.Completions {
			ch := openai.CompletionChoice{Index: i*n + c.Index, Text: c.Text, FinishReason: string(c.FinishReason)}
			if req.Logprobs != nil {
				ch.Logprobs = completionLogprobs(c.LogProbs, utf8.RuneCountInString(req.Prompt[i]), top, req.ReturnTokensAsTokenIDs)
			}
			out.Choices = append(out.Choices, ch)
			out.Usage.CompletionTokens += tokenCount(c)
		}
	}
	out.Usage.TotalTokens = out.Usage.PromptTokens + out.Usage.CompletionTokens
	writeJSON(w, http.StatusOK, out)
	return nil
}

func tokenCount(c backend.Completion) int {
	switch {
	case c.Tokens >= 0:
		return c.Tokens
	case c.TokenIDs != nil:
		return len(c.TokenIDs)
	default:
		return len(c.LogProbs)
	}
}

// completionLogprobs builds the legacy log-prob block; text offsets count
// characters from the start of the prompt, as OpenAI's API does.
// With asIDs (return_tokens_as_token_ids) each sampled token is written
// "token_id:<id>", as vLLM writes it.
func completionLogprobs(lps []backend.TokenLogProb, offset, top int, asIDs bool) *openai.CompletionLogprobs {
	out := &openai.CompletionLogprobs{Tokens: []string{}, TokenLogprobs: []*float64{}, TextOffset: []int{}}
	if top > 0 {
		out.TopLogprobs = []map[string]float64{}
	}
	for _, t := range lps {
		v := openai.WireLogprob(t.LogProb)
		out.Tokens = append(out.Tokens, tokenString(t, asIDs))
		out.TokenLogprobs = append(out.TokenLogprobs, &v)
		out.TextOffset = append(out.TextOffset, offset)
		offset += utf8.RuneCountInString(t.Token)
		if top > 0 {
			m := make(map[string]float64, len(t.Top))
			for _, a := range t.Top[:min(top, len(t.Top))] {
				// Two ids may decode to the same text; keep the likelier.
				if old, ok := m[a.Token]; !ok || a.LogProb > old {
					m[a.Token] = openai.WireLogprob(a.LogProb)
				}
			}
			out.TopLogprobs = append(out.TopLogprobs, m)
		}
	}
	return out
}

func (s *server) doChat(w http.ResponseWriter, r *http.Request, req *openai.ChatRequest, e *entry) error {
	if req.Stream {
		return badRequest("stream", "streaming is not supported")
	}
	if len(req.Messages) == 0 {
		return badRequest("messages", "messages is required")
	}
	msgs := make([]backend.Message, len(req.Messages))
	for i, m := range req.Messages {
		switch m.Role {
		case "system", "user", "assistant":
		default:
			return badRequest(fmt.Sprintf("messages[%d].role", i), "role %q, want system, user or assistant", m.Role)
		}
		msgs[i] = backend.Message(m)
	}
	maxTok := req.MaxCompletionTokens
	if maxTok == nil {
		maxTok = req.MaxTokens
	}
	sp, n, err := s.sampling(maxTok, s.cfg.ChatMaxTokens, req.Temperature, req.TopP, req.TopK, req.N, req.Seed, req.Stop)
	if err != nil {
		return err
	}
	top := 0
	if req.TopLogprobs != nil {
		if !req.Logprobs {
			return badRequest("top_logprobs", "top_logprobs needs logprobs: true")
		}
		if *req.TopLogprobs < 0 || *req.TopLogprobs > s.cfg.MaxTopLogprobs {
			return badRequest("top_logprobs", "top_logprobs = %d, want in [0, %d]", *req.TopLogprobs, s.cfg.MaxTopLogprobs)
		}
		top = *req.TopLogprobs
	}
	id := newID("chatcmpl-")
	greq := backend.GenerateRequest{ID: id, N: n, Sampling: sp, LogProbs: req.Logprobs, TopLogProbs: top}
	if e.eng.RenderChat != nil {
		p, err := e.eng.RenderChat(msgs)
		if err != nil {
			return badRequest("messages", "chat template: %v", err)
		}
		greq.Prompt = p
	} else {
		greq.Messages = msgs
	}
	resps, err := s.generate(r.Context(), e, []backend.GenerateRequest{greq})
	if err != nil {
		return err
	}
	res := resps[0]
	out := openai.ChatResponse{ID: id, Object: "chat.completion", Created: time.Now().Unix(), Model: e.id,
		Metadata: s.metadata(e),
		Usage:    &openai.Usage{PromptTokens: max(res.PromptTokens, 0)}}
	for _, c := range res.Completions {
		ch := openai.ChatChoice{Index: c.Index, Message: openai.ChatMessage{Role: "assistant", Content: c.Text}, FinishReason: string(c.FinishReason)}
		if req.Logprobs {
			ch.Logprobs = chatLogprobs(c.LogProbs, top, req.ReturnTokensAsTokenIDs)
		}
		out.Choices = append(out.Choices, ch)
		out.Usage.CompletionTokens += tokenCount(c)
	}
	out.Usage.TotalTokens = out.Usage.PromptTokens + out.Usage.CompletionTokens
	writeJSON(w, http.StatusOK, out)
	return nil
}

func tokenBytes(s string) []int {
	b := make([]int, len(s))
	for i := range len(s) {
		b[i] = int(s[i])
	}
	return b
}

// tokenString is a sampled token on the wire: its text, or "token_id:<id>"
// under return_tokens_as_token_ids (its text when the engine gave no id).
func tokenString(t backend.TokenLogProb, asIDs bool) string {
	if asIDs && t.TokenID >= 0 {
		return openai.TokenIDString(t.TokenID)
	}
	return t.Token
}

func chatLogprobs(lps []backend.TokenLogProb, top int, asIDs bool) *openai.ChatLogprobs {
	out := &openai.ChatLogprobs{Content: []openai.TokenLogprob{}}
	for _, t := range lps {
		tl := openai.TokenLogprob{Token: tokenString(t, asIDs), Logprob: openai.WireLogprob(t.LogProb), Bytes: tokenBytes(t.Token), TopLogprobs: []openai.TopLogprob{}}
		for _, a := range t.Top[:min(top, len(t.Top))] {
			tl.TopLogprobs = append(tl.TopLogprobs, openai.TopLogprob{Token: a.Token, Logprob: openai.WireLogprob(a.LogProb), Bytes: tokenBytes(a.Token)})
		}
		out.Content = append(out.Content, tl)
	}
	return out
}

func (s *server) doScore(w http.ResponseWriter, r *http.Request, req *openai.ScoreBody, e *entry) error {
	if e.score == nil {
		return &apiError{status: http.StatusNotFound, typ: "invalid_request_error", msg: fmt.Sprintf("model %q cannot score: no route POST /v1/evolm/score for it", e.id)}
	}
	sr := backend.ScoreRequest{ID: newID("score-"), Prefix: req.Prefix, Suffixes: req.Suffixes, Candidates: req.Candidates, AmongCandidates: req.AmongCandidates}
	if err := sr.Validate(); err != nil {
		return badRequest("", "%v", err)
	}
	resps, err := e.score.Score(r.Context(), []backend.ScoreRequest{sr})
	if err != nil {
		return fmt.Errorf("score: %w", err)
	}
	if len(resps) != 1 {
		return fmt.Errorf("score: %d responses for 1 request", len(resps))
	}
	res := resps[0]
	if f := res.Failure; f != nil {
		if f.Reason == backend.FailureRejected {
			return badRequest("", "%s", f.Message)
		}
		return fmt.Errorf("score: %w", f)
	}
	if len(res.LogProbs) != len(sr.Suffixes) {
		return fmt.Errorf("score: %d rows for %d suffixes", len(res.LogProbs), len(sr.Suffixes))
	}
	out := openai.ScoreAnswer{Object: "evolm.score", Model: e.id, Logprobs: make([][]float64, len(res.LogProbs))}
	for k, row := range res.LogProbs {
		if len(row) != len(sr.Candidates) {
			return fmt.Errorf("score: suffix %d has %d log-probs for %d candidates", k, len(row), len(sr.Candidates))
		}
		out.Logprobs[k] = make([]float64, len(row))
		for j, v := range row {
			out.Logprobs[k][j] = openai.WireLogprob(v)
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
