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
//     timeouts, connection errors, truncated or invalid JSON, and a 200
//     answer that does not fit its request (log-probs asked for but
//     missing, an impossible positive log-prob, choices that are not
//     exactly 0..n-1) are retried with exponential backoff and full jitter,
//     honouring Retry-After: a broken answer is never stored as a row's
//     missing or shifted score. Every retry is logged at Warn with the
//     endpoint, status, attempt and backoff.
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
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/evolm/evolm/serving/backend"
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

	// CheckModel makes the client check that every answer came from the
	// weights it asks for: the answer's model must equal Model and, when
	// WeightVersion is set and the server reports one (SGLang's
	// metadata.weight_version), that too. An endpoint that answers with
	// other weights, or 404 for the model, is taken out of rotation for the
	// client's life and the request retried on another; with none left the
	// call fails with ErrNoEndpoint. An RL learner's fleet client sets it
	// (one client per weight version).
	CheckModel    bool
	WeightVersion string
	// TokenIDs asks the server for the sampled token ids (vLLM's
	// return_tokens_as_token_ids, which `evolm serve` implements) and
	// returns them in Completion.TokenIDs and TokenLogProb.TokenID. It
	// implies log-probs. A server that ignores the field leaves them nil.
	TokenIDs bool
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
	base      string // normalized, ends in /v1
	inFlight  atomic.Int64
	fails     atomic.Int64 // attempts failed in a row
	restUntil atomic.Int64 // unix ns until which it draws no new requests (failed)
	out       atomic.Bool  // taken out of rotation (Config.CheckModel)
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
