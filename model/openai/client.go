// Package openai is the `openai` backend: a client for any OpenAI-compatible
// inference server (vLLM, SGLang, llama.cpp, `evolm serve`). It implements
// backend.Generator over /v1/completions (requests with a rendered Prompt) and
// /v1/chat/completions (requests with Messages), and backend.Scorer over
// `evolm serve`'s /v1/evolm/score extension (exact, prefix computed once) or,
// on any other server, /v1/completions with max_tokens=1 and top log-probs.
//
// Delivery contract:
//
//   - Work spreads over several endpoints (least requests in flight, or round
//     robin). A retry prefers an endpoint other than the one that just failed.
//   - At most Config.MaxInFlight HTTP requests are in flight across all
//     endpoints (a semaphore held only during an attempt, never during a
//     backoff).
//   - Each attempt has its own timeout. HTTP 408, 425, 429 and 5xx,
//     timeouts, connection errors and truncated or invalid JSON are retried
//     with exponential backoff and full jitter, honouring Retry-After. Every
//     retry is logged at Warn with the endpoint, status, attempt and backoff.
//   - Any other 4xx is a permanent failure of that row alone: its response
//     carries a backend.RowFailure. When a row exhausts its attempts the whole
//     call fails with an *ExhaustedError naming the endpoints and the last
//     error; cancelling the context stops the call.
//   - Exactly once: results are keyed by request ID. A request stops at its
//     first usable answer, and a ledger refuses a second result for an ID, so
//     a retried request whose earlier attempt succeeded on the server never
//     yields two rows. The ID travels in the X-Request-Id header (not
//     Idempotency-Key, which would let net/http replay a request on its own,
//     outside the retry policy, the in-flight cap and the log).
package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/semaphore"

	"github.com/evolm/evolm/model/backend"
)

// APIKeyEnv names the environment variable that supplies Config.APIKey
// when it is empty; `evolm serve` reads the same one.
const APIKeyEnv = "EVOLM_API_KEY"

// Balance names an endpoint selection policy.
type Balance string

const (
	LeastInFlight Balance = "least_in_flight" // the endpoint with the fewest requests in flight
	RoundRobin    Balance = "round_robin"     // endpoints in turn
)

// ScoreAPI names how Score talks to the server; see Config.ScoreAPI.
type ScoreAPI string

const (
	ScoreAuto        ScoreAPI = "auto"
	ScoreCompletions ScoreAPI = "completions"
	ScoreExtension   ScoreAPI = "evolm"
)

// Config configures a Client. Zero fields take the defaults shown.
type Config struct {
	// Endpoints are base URLs such as http://host:8000/v1. A URL whose path
	// does not end in /v1 gets /v1 appended.
	Endpoints []string
	Model     string // model name sent with every request; required
	// APIKey is sent as "Authorization: Bearer <key>" (vLLM's --api-key,
	// `evolm serve --api-key`); default $EVOLM_API_KEY, none when both are
	// empty.
	APIKey string

	Balance          Balance       // default LeastInFlight
	MaxInFlight      int           // requests in flight over all endpoints; default 16
	MaxAttempts      int           // attempts per request, first included; default 6
	BaseBackoff      time.Duration // backoff before retry k is uniform in [0, min(MaxBackoff, BaseBackoff·2^(k−1))]; default 500ms
	MaxBackoff       time.Duration // default 30s
	MaxRetryAfter    time.Duration // cap on an honoured Retry-After; default 60s
	RequestTimeout   time.Duration // per attempt, body included; default 10m
	ScoreTopLogprobs int           // alternatives requested per Score call; default 20 (vLLM's cap)
	// ScoreAPI chooses how Score reaches the server. ScoreAuto (default)
	// uses the /v1/evolm/score extension of `evolm serve` (exact log-probs
	// of any candidate, the prefix computed once) and falls back to
	// ScoreCompletions for good when a server answers 404 or 405.
	// ScoreCompletions asks /v1/completions for ScoreTopLogprobs
	// alternatives (any OpenAI-compatible server; a candidate outside them
	// reads -Inf). ScoreExtension requires the extension.
	ScoreAPI ScoreAPI

	HTTPClient *http.Client // default: a client with keep-alive pools sized to MaxInFlight
	Logger     *slog.Logger // default slog.Default()
	// Jitter draws a uniform number in [0, 1) for the backoff; default
	// math/rand/v2. Tests set it to make backoffs deterministic.
	Jitter func() float64
}

// Client is the `openai` backend. It is safe for concurrent use.
type Client struct {
	cfg  Config
	eps  []*endpoint
	sem  *semaphore.Weighted
	next atomic.Uint64
	http *http.Client
	log  *slog.Logger
	// noScoreExt is set once a server showed it lacks /v1/evolm/score.
	noScoreExt atomic.Bool
}

type endpoint struct {
	base     string // normalized, ends in /v1
	inFlight atomic.Int64
}

// New checks cfg, fills its defaults and returns a Client.
func New(cfg Config) (*Client, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("openai: no endpoints")
	}
	if cfg.Model == "" {
		return nil, errors.New("openai: no model name")
	}
	switch cfg.Balance {
	case "":
		cfg.Balance = LeastInFlight
	case LeastInFlight, RoundRobin:
	default:
		return nil, fmt.Errorf("openai: balance %q: want %q or %q", cfg.Balance, LeastInFlight, RoundRobin)
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	switch cfg.ScoreAPI {
	case "":
		cfg.ScoreAPI = ScoreAuto
	case ScoreAuto, ScoreCompletions, ScoreExtension:
	default:
		return nil, fmt.Errorf("openai: score api %q: want %q, %q or %q", cfg.ScoreAPI, ScoreAuto, ScoreCompletions, ScoreExtension)
	}
	def(&cfg.MaxInFlight, 16)
	def(&cfg.MaxAttempts, 6)
	def(&cfg.ScoreTopLogprobs, 20)
	defDur(&cfg.BaseBackoff, 500*time.Millisecond)
	defDur(&cfg.MaxBackoff, 30*time.Second)
	defDur(&cfg.MaxRetryAfter, 60*time.Second)
	defDur(&cfg.RequestTimeout, 10*time.Minute)
	if cfg.Jitter == nil {
		cfg.Jitter = rand.Float64
	}
	if cfg.APIKey == "" {
		cfg.APIKey = os.Getenv(APIKeyEnv)
	}
	c := &Client{cfg: cfg, sem: semaphore.NewWeighted(int64(cfg.MaxInFlight)), http: cfg.HTTPClient, log: cfg.Logger}
	if c.http == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConns = 2 * cfg.MaxInFlight
		tr.MaxIdleConnsPerHost = cfg.MaxInFlight
		c.http = &http.Client{Transport: tr}
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	for _, u := range cfg.Endpoints {
		b := strings.TrimRight(u, "/")
		if !strings.HasPrefix(b, "http://") && !strings.HasPrefix(b, "https://") {
			return nil, fmt.Errorf("openai: endpoint %q: want an http:// or https:// URL", u)
		}
		if !strings.HasSuffix(b, "/v1") {
			b += "/v1"
		}
		c.eps = append(c.eps, &endpoint{base: b})
	}
	return c, nil
}

// Close releases the client's idle connections. The client stays usable.
func (c *Client) Close() { c.http.CloseIdleConnections() }

// Model returns the model name the client sends.
func (c *Client) Model() string { return c.cfg.Model }

// ExhaustedError reports a request that failed on every attempt.
type ExhaustedError struct {
	ID       string
	Attempts int
	Tried    []string // endpoints attempted, in first-use order
	Endpoint string   // endpoint of the last attempt
	Status   int      // HTTP status of the last attempt; 0 when none arrived
	Err      error    // last error
}

func (e *ExhaustedError) Error() string {
	st := ""
	if e.Status != 0 {
		st = fmt.Sprintf(" (HTTP %d)", e.Status)
	}
	tried := ""
	if len(e.Tried) > 1 {
		tried = " at " + strings.Join(e.Tried, ", ")
	}
	return fmt.Sprintf("request %s: %d attempts failed%s; last at %s%s: %v", e.ID, e.Attempts, tried, e.Endpoint, st, e.Err)
}

func (e *ExhaustedError) Unwrap() error { return e.Err }

// rejectedError is a permanent HTTP failure of one request.
type rejectedError struct {
	endpoint string
	status   int
	message  string
}

func (e *rejectedError) Error() string {
	return fmt.Sprintf("%s: HTTP %d: %s", e.endpoint, e.status, e.message)
}

// malformedError is a usable-looking 200 answer that does not fit the request.
type malformedError struct{ message string }

func (e *malformedError) Error() string { return e.message }

// attemptError is a failed attempt that another attempt may fix.
type attemptError struct {
	status     int
	retryAfter time.Duration
	err        error
}

func (e *attemptError) Error() string { return e.err.Error() }

// ledger hands out each row ID's result slot exactly once.
type ledger struct {
	mu   sync.Mutex
	done map[string]bool
}

func newLedger(n int) *ledger { return &ledger{done: make(map[string]bool, n)} }

func (l *ledger) commit(id string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done[id] {
		return fmt.Errorf("request %s: a second result arrived for a row that already has one", id)
	}
	l.done[id] = true
	return nil
}

// pick chooses the endpoint for an attempt, avoiding `avoid` when it can.
func (c *Client) pick(avoid *endpoint) *endpoint {
	n := len(c.eps)
	start := int(c.next.Add(1)-1) % n
	if c.cfg.Balance == RoundRobin {
		ep := c.eps[start]
		if ep == avoid && n > 1 {
			ep = c.eps[(start+1)%n]
		}
		return ep
	}
	var best *endpoint
	for k := range n {
		ep := c.eps[(start+k)%n]
		if ep == avoid && n > 1 {
			continue
		}
		if best == nil || ep.inFlight.Load() < best.inFlight.Load() {
			best = ep
		}
	}
	return best
}

// backoff returns the wait before retry number `attempt` (1-based).
func (c *Client) backoff(attempt int, retryAfter time.Duration) time.Duration {
	ceil := float64(c.cfg.BaseBackoff) * math.Pow(2, float64(attempt-1))
	ceil = math.Min(ceil, float64(c.cfg.MaxBackoff))
	d := time.Duration(c.cfg.Jitter() * ceil)
	if retryAfter > d {
		d = min(retryAfter, c.cfg.MaxRetryAfter)
	}
	return d
}

// call POSTs body to path and decodes a 200 answer with decode, retrying as
// the package contract says. It returns a *rejectedError for a permanent
// failure, an *ExhaustedError when attempts run out, or the context's error.
func (c *Client) call(ctx context.Context, id, path string, body any, decode func([]byte) error) error {
	payload, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("request %s: encode: %w", id, err)
	}
	var last *endpoint
	var tried []string
	for attempt := 1; ; attempt++ {
		ep, aerr := c.attempt(ctx, last, id, path, payload, decode)
		if aerr == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("request %s: %w", id, context.Cause(ctx))
		}
		last = ep
		if !slices.Contains(tried, ep.base) {
			tried = append(tried, ep.base)
		}
		var rej *rejectedError
		if errors.As(aerr, &rej) {
			return rej
		}
		var ae *attemptError
		if !errors.As(aerr, &ae) {
			return fmt.Errorf("request %s at %s: %w", id, ep.base, aerr)
		}
		if attempt >= c.cfg.MaxAttempts {
			return &ExhaustedError{ID: id, Attempts: attempt, Tried: tried, Endpoint: ep.base, Status: ae.status, Err: ae.err}
		}
		wait := c.backoff(attempt, ae.retryAfter)
		c.log.LogAttrs(ctx, slog.LevelWarn, "openai: retrying request",
			slog.String("id", id), slog.String("endpoint", ep.base), slog.String("path", path),
			slog.Int("status", ae.status), slog.Int("attempt", attempt),
			slog.Duration("backoff", wait), slog.String("error", ae.err.Error()))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("request %s: %w", id, context.Cause(ctx))
		case <-t.C:
		}
	}
}

// attempt makes one HTTP request under the in-flight cap and the per-attempt
// timeout, at an endpoint chosen once a slot is free (so that the choice sees
// current in-flight counts), avoiding `avoid` when it can. It returns the
// endpoint used.
func (c *Client) attempt(ctx context.Context, avoid *endpoint, id, path string, payload []byte, decode func([]byte) error) (*endpoint, error) {
	if err := c.sem.Acquire(ctx, 1); err != nil {
		return nil, err
	}
	defer c.sem.Release(1)
	ep := c.pick(avoid)
	ep.inFlight.Add(1)
	defer ep.inFlight.Add(-1)

	actx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, ep.base+path, bytes.NewReader(payload))
	if err != nil {
		return ep, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", id)
	if c.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.cfg.APIKey)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() == nil && actx.Err() != nil {
			return ep, &attemptError{err: fmt.Errorf("timeout after %v: %w", c.cfg.RequestTimeout, err)}
		}
		return ep, &attemptError{err: err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		if ctx.Err() == nil && actx.Err() != nil {
			err = fmt.Errorf("timeout after %v reading body: %w", c.cfg.RequestTimeout, err)
		}
		return ep, &attemptError{status: resp.StatusCode, err: fmt.Errorf("read body: %w", err)}
	}
	if resp.StatusCode != http.StatusOK {
		msg := errorMessage(data)
		if retryableStatus(resp.StatusCode) {
			return ep, &attemptError{status: resp.StatusCode, retryAfter: parseRetryAfter(resp.Header.Get("Retry-After")),
				err: fmt.Errorf("HTTP %d: %s", resp.StatusCode, msg)}
		}
		return ep, &rejectedError{endpoint: ep.base, status: resp.StatusCode, message: msg}
	}
	if err := decode(data); err != nil {
		return ep, &attemptError{status: resp.StatusCode, err: fmt.Errorf("invalid JSON answer (%d bytes): %w", len(data), err)}
	}
	return ep, nil
}

func retryableStatus(s int) bool {
	return s == http.StatusRequestTimeout || s == http.StatusTooEarly || s == http.StatusTooManyRequests || s >= 500
}

// parseRetryAfter reads delta-seconds or an HTTP date; 0 when absent or bad.
func parseRetryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 {
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

// errorMessage extracts the message of an OpenAI error body, or a prefix of
// the raw body.
func errorMessage(data []byte) string {
	var eb ErrorBody
	if json.Unmarshal(data, &eb) == nil && eb.Error.Message != "" {
		return eb.Error.Message
	}
	s := strings.TrimSpace(string(data))
	if len(s) > 200 {
		cut := 200
		for cut > 0 && !utf8.RuneStart(s[cut]) { // never split a character
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

// decodeInto returns a decoder that fills *v, rejecting trailing garbage.
func decodeInto[T any](v *T) func([]byte) error {
	return func(b []byte) error {
		var fresh T
		dec := json.NewDecoder(bytes.NewReader(b))
		if err := dec.Decode(&fresh); err != nil {
			return err
		}
		// Only whitespace may follow (dec.More would let a stray '}' through).
		if _, err := dec.Token(); err != io.EOF {
			return errors.New("trailing data after JSON value")
		}
		*v = fresh
		return nil
	}
}

// rowFailure turns a permanent error into a row failure, or returns the
// error when it must fail the whole call.
func rowFailure(err error) (*backend.RowFailure, error) {
	var rej *rejectedError
	if errors.As(err, &rej) {
		return &backend.RowFailure{Reason: backend.FailureRejected, Message: rej.Error()}, nil
	}
	var mal *malformedError
	if errors.As(err, &mal) {
		return &backend.RowFailure{Reason: backend.FailureMalformed, Message: mal.Error()}, nil
	}
	return nil, err
}

func (c *Client) group(ctx context.Context) (*errgroup.Group, context.Context) {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(4*c.cfg.MaxInFlight, 64))
	return g, gctx
}

// Generate implements backend.Generator.
func (c *Client) Generate(ctx context.Context, reqs []backend.GenerateRequest) ([]backend.GenerateResponse, error) {
	if err := backend.CheckIDs(reqs, func(r *backend.GenerateRequest) string { return r.ID }); err != nil {
		return nil, fmt.Errorf("openai generate: %w", err)
	}
	for i := range reqs {
		if err := reqs[i].Validate(); err != nil {
			return nil, fmt.Errorf("openai generate: %w", err)
		}
	}
	out := make([]backend.GenerateResponse, len(reqs))
	led := newLedger(len(reqs))
	g, gctx := c.group(ctx)
	for i := range reqs {
		g.Go(func() error {
			r, err := c.generateOne(gctx, &reqs[i])
			if err != nil {
				return err
			}
			if err := led.commit(r.ID); err != nil {
				return err
			}
			out[i] = r
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, fmt.Errorf("openai generate: %w", err)
	}
	return out, nil
}

func (c *Client) generateOne(ctx context.Context, r *backend.GenerateRequest) (backend.GenerateResponse, error) {
	n := r.Samples()
	res := backend.GenerateResponse{ID: r.ID, Model: c.cfg.Model, PromptTokens: -1}
	var err error
	if len(r.Messages) > 0 {
		err = c.chat(ctx, r, n, &res)
	} else {
		err = c.complete(ctx, r, n, &res)
	}
	if err != nil {
		f, ferr := rowFailure(err)
		if ferr != nil {
			return res, ferr
		}
		res.Failure, res.Completions = f, nil
	}
	return res, nil
}

func sampling(r *backend.GenerateRequest) (maxTok *int, temp, topP *float64, topK *int, seed *int64) {
	mt, t := r.MaxTokens, r.Temperature
	maxTok, temp = &mt, &t
	if r.TopP > 0 && r.TopP < 1 {
		p := r.TopP
		topP = &p
	}
	if r.TopK > 0 {
		k := r.TopK
		topK = &k
	}
	if r.Seed != nil {
		s := *r.Seed
		seed = &s
	}
	return
}

func (c *Client) complete(ctx context.Context, r *backend.GenerateRequest, n int, res *backend.GenerateResponse) error {
	body := CompletionRequest{Model: c.cfg.Model, Prompt: Strings{r.Prompt}, N: &n, Stop: r.Stop}
	body.MaxTokens, body.Temperature, body.TopP, body.TopK, body.Seed = sampling(r)
	wantLP := r.LogProbs || r.TopLogProbs > 0
	// With n > 1 the usage block only has the total, so ask for log-probs
	// anyway to learn each sample's token count.
	if wantLP || n > 1 {
		k := r.TopLogProbs
		body.Logprobs = &k
	}
	var resp CompletionResponse
	if err := c.call(ctx, r.ID, "/completions", body, decodeInto(&resp)); err != nil {
		return err
	}
	if resp.Model != "" {
		res.Model = resp.Model
	}
	if resp.Usage != nil {
		res.PromptTokens = resp.Usage.PromptTokens
	}
	comps, err := collect(resp.Choices, n, func(ch CompletionChoice) (int, backend.Completion, error) {
		comp := backend.Completion{Index: ch.Index, Text: ch.Text, FinishReason: backend.FinishReason(ch.FinishReason), Tokens: -1}
		if ch.Logprobs != nil {
			lps, err := fromCompletionLogprobs(ch.Logprobs)
			if err != nil {
				return 0, comp, err
			}
			comp.Tokens = len(lps)
			if wantLP {
				comp.LogProbs = lps
			}
		} else if wantLP {
			return 0, comp, errors.New("log-probs asked for but missing")
		}
		return ch.Index, comp, nil
	})
	return c.finish(res, comps, err, resp.Usage, n)
}

func (c *Client) chat(ctx context.Context, r *backend.GenerateRequest, n int, res *backend.GenerateResponse) error {
	msgs := make([]ChatMessage, len(r.Messages))
	for i, m := range r.Messages {
		msgs[i] = ChatMessage(m)
	}
	body := ChatRequest{Model: c.cfg.Model, Messages: msgs, N: &n, Stop: r.Stop}
	body.MaxTokens, body.Temperature, body.TopP, body.TopK, body.Seed = sampling(r)
	wantLP := r.LogProbs || r.TopLogProbs > 0
	if wantLP || n > 1 {
		body.Logprobs = true
		if r.TopLogProbs > 0 {
			k := r.TopLogProbs
			body.TopLogprobs = &k
		}
	}
	var resp ChatResponse
	if err := c.call(ctx, r.ID, "/chat/completions", body, decodeInto(&resp)); err != nil {
		return err
	}
	if resp.Model != "" {
		res.Model = resp.Model
	}
	if resp.Usage != nil {
		res.PromptTokens = resp.Usage.PromptTokens
	}
	comps, err := collect(resp.Choices, n, func(ch ChatChoice) (int, backend.Completion, error) {
		comp := backend.Completion{Index: ch.Index, Text: ch.Message.Content, FinishReason: backend.FinishReason(ch.FinishReason), Tokens: -1}
		if ch.Logprobs != nil {
			lps := make([]backend.TokenLogProb, len(ch.Logprobs.Content))
			for i, t := range ch.Logprobs.Content {
				lps[i] = backend.TokenLogProb{Token: t.Token, TokenID: -1, LogProb: fromWireLogprob(t.Logprob)}
				if r.TopLogProbs > 0 {
					lps[i].Top = make([]backend.TopLogProb, len(t.TopLogprobs))
					for j, a := range t.TopLogprobs {
						lps[i].Top[j] = backend.TopLogProb{Token: a.Token, LogProb: fromWireLogprob(a.Logprob)}
					}
				}
			}
			comp.Tokens = len(lps)
			if wantLP {
				comp.LogProbs = lps
			}
		} else if wantLP {
			return 0, comp, errors.New("log-probs asked for but missing")
		}
		return ch.Index, comp, nil
	})
	return c.finish(res, comps, err, resp.Usage, n)
}

// finish stores the collected completions, or a malformed-answer failure.
func (c *Client) finish(res *backend.GenerateResponse, comps []backend.Completion, err error, u *Usage, n int) error {
	if err != nil {
		res.Failure = &backend.RowFailure{Reason: backend.FailureMalformed, Message: err.Error()}
		return nil
	}
	if n == 1 && u != nil && comps[0].Tokens < 0 {
		comps[0].Tokens = u.CompletionTokens
	}
	res.Completions = comps
	return nil
}

// collect converts choices and checks that their indices are exactly 0..n-1.
func collect[C any](choices []C, n int, conv func(C) (int, backend.Completion, error)) ([]backend.Completion, error) {
	if len(choices) != n {
		return nil, fmt.Errorf("%d choices, want %d", len(choices), n)
	}
	out := make([]backend.Completion, n)
	seen := make([]bool, n)
	for _, ch := range choices {
		idx, comp, err := conv(ch)
		if err != nil {
			return nil, fmt.Errorf("choice %d: %w", idx, err)
		}
		if idx < 0 || idx >= n || seen[idx] {
			return nil, fmt.Errorf("choice index %d out of range or repeated (n = %d)", idx, n)
		}
		switch comp.FinishReason {
		case backend.FinishStop, backend.FinishLength:
		default:
			return nil, fmt.Errorf("choice %d: finish_reason %q", idx, comp.FinishReason)
		}
		seen[idx] = true
		out[idx] = comp
	}
	return out, nil
}

func fromCompletionLogprobs(lp *CompletionLogprobs) ([]backend.TokenLogProb, error) {
	if len(lp.TokenLogprobs) != len(lp.Tokens) {
		return nil, fmt.Errorf("%d tokens but %d token_logprobs", len(lp.Tokens), len(lp.TokenLogprobs))
	}
	if lp.TopLogprobs != nil && len(lp.TopLogprobs) != len(lp.Tokens) {
		return nil, fmt.Errorf("%d tokens but %d top_logprobs", len(lp.Tokens), len(lp.TopLogprobs))
	}
	out := make([]backend.TokenLogProb, len(lp.Tokens))
	for i, tok := range lp.Tokens {
		v := math.Inf(-1)
		if p := lp.TokenLogprobs[i]; p != nil {
			v = fromWireLogprob(*p)
		}
		out[i] = backend.TokenLogProb{Token: tok, TokenID: -1, LogProb: v}
		if lp.TopLogprobs != nil && len(lp.TopLogprobs[i]) > 0 {
			out[i].Top = topFromMap(lp.TopLogprobs[i])
		}
	}
	return out, nil
}

// topFromMap orders a legacy top_logprobs map, most likely first.
func topFromMap(m map[string]float64) []backend.TopLogProb {
	top := make([]backend.TopLogProb, 0, len(m))
	for tok, v := range m {
		top = append(top, backend.TopLogProb{Token: tok, LogProb: fromWireLogprob(v)})
	}
	sort.Slice(top, func(a, b int) bool {
		if top[a].LogProb != top[b].LogProb {
			return top[a].LogProb > top[b].LogProb
		}
		return top[a].Token < top[b].Token
	})
	return top
}

// Score implements backend.Scorer. Through the /v1/evolm/score extension
// (see Config.ScoreAPI) one call answers a whole request. Otherwise each
// suffix is one /v1/completions call with prompt Prefix+Suffix, max_tokens
// 1, temperature 1 and ScoreTopLogprobs alternatives, read for each
// candidate; a candidate outside them gets -Inf, and the server's prefix
// cache is what saves the shared prefix. A suffix the server rejects fails
// its row.
func (c *Client) Score(ctx context.Context, reqs []backend.ScoreRequest) ([]backend.ScoreResponse, error) {
	if err := backend.CheckIDs(reqs, func(r *backend.ScoreRequest) string { return r.ID }); err != nil {
		return nil, fmt.Errorf("openai score: %w", err)
	}
	for i := range reqs {
		if err := reqs[i].Validate(); err != nil {
			return nil, fmt.Errorf("openai score: %w", err)
		}
	}
	out := make([]backend.ScoreResponse, len(reqs))
	led := newLedger(len(reqs))
	g, gctx := c.group(ctx)
	for i := range reqs {
		g.Go(func() error {
			res, err := c.scoreRow(gctx, &reqs[i], led)
			if err != nil {
				return err
			}
			out[i] = res
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, fmt.Errorf("openai score: %w", err)
	}
	return out, nil
}

// scoreRow answers one request, through the extension when it can.
func (c *Client) scoreRow(ctx context.Context, r *backend.ScoreRequest, led *ledger) (backend.ScoreResponse, error) {
	res := backend.ScoreResponse{ID: r.ID, Model: c.cfg.Model}
	if c.cfg.ScoreAPI == ScoreExtension || (c.cfg.ScoreAPI == ScoreAuto && !c.noScoreExt.Load()) {
		lps, model, err := c.scoreExt(ctx, r)
		var rej *rejectedError
		switch {
		case err == nil:
			if err := led.commit(r.ID); err != nil {
				return res, err
			}
			if model != "" {
				res.Model = model
			}
			res.LogProbs = lps
			return res, nil
		case c.cfg.ScoreAPI == ScoreAuto && errors.As(err, &rej) &&
			(rej.status == http.StatusNotFound || rej.status == http.StatusMethodNotAllowed):
			c.noScoreExt.Store(true) // fall through to top log-probs
		default:
			f, ferr := rowFailure(err)
			if ferr != nil {
				return res, ferr
			}
			if err := led.commit(r.ID); err != nil {
				return res, err
			}
			res.Failure = f
			return res, nil
		}
	}

	type slot struct {
		lps     []float64
		failure *backend.RowFailure
		model   string
	}
	slots := make([]slot, len(r.Suffixes))
	g, gctx := errgroup.WithContext(ctx)
	for k := range r.Suffixes {
		g.Go(func() error {
			key := fmt.Sprintf("%s#%d", r.ID, k)
			lps, model, err := c.scoreOne(gctx, key, r.Prefix+r.Suffixes[k], r.Candidates)
			if err != nil {
				f, ferr := rowFailure(err)
				if ferr != nil {
					return ferr
				}
				slots[k].failure = f
			}
			if err := led.commit(key); err != nil {
				return err
			}
			slots[k].lps, slots[k].model = lps, model
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return res, err
	}
	for k, s := range slots {
		if s.failure != nil {
			return backend.ScoreResponse{ID: r.ID, Model: res.Model,
				Failure: &backend.RowFailure{Reason: s.failure.Reason, Message: fmt.Sprintf("suffix %d: %s", k, s.failure.Message)}}, nil
		}
		if s.model != "" {
			res.Model = s.model
		}
		res.LogProbs = append(res.LogProbs, s.lps)
	}
	return res, nil
}

// scoreExt answers one request through POST /v1/evolm/score.
func (c *Client) scoreExt(ctx context.Context, r *backend.ScoreRequest) ([][]float64, string, error) {
	body := ScoreBody{Model: c.cfg.Model, Prefix: r.Prefix, Suffixes: r.Suffixes, Candidates: r.Candidates}
	var resp ScoreAnswer
	if err := c.call(ctx, r.ID, "/evolm/score", body, decodeInto(&resp)); err != nil {
		return nil, "", err
	}
	if len(resp.Logprobs) != len(r.Suffixes) {
		return nil, "", &malformedError{fmt.Sprintf("%d log-prob rows for %d suffixes", len(resp.Logprobs), len(r.Suffixes))}
	}
	for k, row := range resp.Logprobs {
		if len(row) != len(r.Candidates) {
			return nil, "", &malformedError{fmt.Sprintf("suffix %d: %d log-probs for %d candidates", k, len(row), len(r.Candidates))}
		}
		for j := range row {
			row[j] = fromWireLogprob(row[j])
		}
	}
	return resp.Logprobs, resp.Model, nil
}

// scoreOne returns the candidates' next-token log-probs after prompt.
func (c *Client) scoreOne(ctx context.Context, key, prompt string, cands []string) ([]float64, string, error) {
	// Temperature 1 and no top-p/top-k: the one sampled token is not used,
	// and a server that reports log-probs after its logits processors (vLLM's
	// processed_logprobs mode) then still reports the model's distribution.
	one, t1, k := 1, 1.0, c.cfg.ScoreTopLogprobs
	body := CompletionRequest{Model: c.cfg.Model, Prompt: Strings{prompt}, MaxTokens: &one, Temperature: &t1, N: &one, Logprobs: &k}
	var resp CompletionResponse
	if err := c.call(ctx, key, "/completions", body, decodeInto(&resp)); err != nil {
		return nil, "", err
	}
	if len(resp.Choices) != 1 || resp.Choices[0].Logprobs == nil {
		return nil, "", &malformedError{fmt.Sprintf("%d choices, want one with log-probs", len(resp.Choices))}
	}
	lp := resp.Choices[0].Logprobs
	if len(lp.TopLogprobs) == 0 || len(lp.Tokens) == 0 || len(lp.TokenLogprobs) == 0 {
		return nil, "", &malformedError{"no log-probs for the first position"}
	}
	top := lp.TopLogprobs[0]
	out := make([]float64, len(cands))
	for j, cand := range cands {
		out[j] = math.Inf(-1)
		if v, ok := top[cand]; ok {
			out[j] = fromWireLogprob(v)
		} else if lp.Tokens[0] == cand && lp.TokenLogprobs[0] != nil {
			out[j] = fromWireLogprob(*lp.TokenLogprobs[0])
		}
	}
	return out, resp.Model, nil
}

// Models lists the models the first endpoint serves (GET /v1/models).
func (c *Client) Models(ctx context.Context) ([]string, error) {
	ep := c.eps[0]
	actx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodGet, ep.base+"/models", nil)
	if err != nil {
		return nil, fmt.Errorf("openai models at %s: %w", ep.base, err)
	}
	if c.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.cfg.APIKey)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("openai models at %s: %w", ep.base, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("openai models at %s: %w", ep.base, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("openai models at %s: HTTP %d: %s", ep.base, resp.StatusCode, errorMessage(data))
	}
	var list ModelList
	if err := json.Unmarshal(data, &list); err != nil {
		return nil, fmt.Errorf("openai models at %s: %w", ep.base, err)
	}
	ids := make([]string, len(list.Data))
	for i, m := range list.Data {
		ids[i] = m.ID
	}
	return ids, nil
}

var (
	_ backend.Generator = (*Client)(nil)
	_ backend.Scorer    = (*Client)(nil)
)
