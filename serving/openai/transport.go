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
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/sync/errgroup"

	"github.com/evolm/evolm/serving/backend"
)

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

// malformedError is a usable-looking 200 answer that does not fit the
// request. Found while decoding, it fails the attempt (retried); after the
// last attempt the call fails with an *ExhaustedError naming it.
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

// pick chooses the endpoint for an attempt: never one taken out of
// rotation (nil when every endpoint is), `avoid` only when no other is
// left, and among the rest those not resting after a failure (see
// endpoint.failed: a dead server stops drawing requests), then the next in
// turn (RoundRobin) or the one with the fewest requests in flight; when all
// rest, the one whose rest ends first.
func (c *Client) pick(avoid *endpoint) *endpoint {
	n := len(c.eps)
	start := int(c.next.Add(1)-1) % n
	now := time.Now().UnixNano()
	var best *endpoint
	better := func(ep *endpoint) bool {
		if best == nil {
			return true
		}
		up, bestUp := ep.restUntil.Load() <= now, best.restUntil.Load() <= now
		switch {
		case up != bestUp:
			return up
		case !up:
			return ep.restUntil.Load() < best.restUntil.Load()
		}
		return c.cfg.Balance != RoundRobin && ep.inFlight.Load() < best.inFlight.Load()
	}
	for k := range n {
		ep := c.eps[(start+k)%n]
		if ep.out.Load() || ep == avoid {
			continue
		}
		if better(ep) {
			best = ep
		}
	}
	if best == nil && avoid != nil && !avoid.out.Load() {
		best = avoid
	}
	return best
}

// failed records a failed attempt at ep: it rests (draws no new requests
// while another endpoint is up) for 250ms, doubling with each failure in a
// row up to 30s. ok records a success, which ends the rest.
func (ep *endpoint) failed() {
	n := min(ep.fails.Add(1), 8)
	ep.restUntil.Store(time.Now().Add(250 * time.Millisecond << (n - 1)).UnixNano())
}

func (ep *endpoint) ok() {
	ep.fails.Store(0)
	ep.restUntil.Store(0)
}

// ErrNoEndpoint is returned when every endpoint was taken out of rotation
// (Config.CheckModel).
var ErrNoEndpoint = errors.New("no endpoint left in rotation")

// versionError is an answer that came from other weights than the client's
// model (Config.CheckModel).
type versionError struct{ msg string }

func (e *versionError) Error() string { return e.msg }

// checkVersion checks an answer's model and weight version against the
// client's (Config.CheckModel, Config.WeightVersion).
func (c *Client) checkVersion(model string, meta *ResponseMetadata) error {
	if !c.cfg.CheckModel {
		return nil
	}
	if model != c.cfg.Model {
		return &versionError{fmt.Sprintf("answered by model %q, want %q", model, c.cfg.Model)}
	}
	if c.cfg.WeightVersion != "" && meta != nil && meta.WeightVersion != "" && meta.WeightVersion != c.cfg.WeightVersion {
		return &versionError{fmt.Sprintf("answered with weight_version %q, want %q", meta.WeightVersion, c.cfg.WeightVersion)}
	}
	return nil
}

// takeOut removes ep from rotation for the client's life.
func (c *Client) takeOut(ctx context.Context, ep *endpoint, why string) {
	if ep.out.CompareAndSwap(false, true) {
		c.log.LogAttrs(ctx, slog.LevelWarn, "openai: endpoint taken out of rotation", slog.String("endpoint", ep.base),
			slog.String("model", c.cfg.Model), slog.String("reason", why))
	}
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
		if ep == nil {
			return fmt.Errorf("request %s for model %s: %w (tried %s)", id, c.cfg.Model, aerr, strings.Join(tried, ", "))
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
	if ep == nil {
		return nil, ErrNoEndpoint
	}
	ep.inFlight.Add(1)
	defer ep.inFlight.Add(-1)
	ep, err := c.attemptAt(ctx, ep, id, path, payload, decode)
	var rej *rejectedError
	switch {
	case err == nil || errors.As(err, &rej): // a rejected row is no fault of the server
		ep.ok()
	case ctx.Err() == nil:
		ep.failed()
	}
	return ep, err
}

func (c *Client) attemptAt(ctx context.Context, ep *endpoint, id, path string, payload []byte, decode func([]byte) error) (*endpoint, error) {

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
		if resp.StatusCode == http.StatusNotFound && c.cfg.CheckModel {
			// The server does not hold the model (a server that failed to
			// load this version, or restarted without it).
			c.takeOut(ctx, ep, fmt.Sprintf("HTTP 404: %s", msg))
			return ep, &attemptError{status: resp.StatusCode, err: fmt.Errorf("HTTP %d: %s", resp.StatusCode, msg)}
		}
		if retryableStatus(resp.StatusCode) {
			return ep, &attemptError{status: resp.StatusCode, retryAfter: parseRetryAfter(resp.Header.Get("Retry-After")),
				err: fmt.Errorf("HTTP %d: %s", resp.StatusCode, msg)}
		}
		return ep, &rejectedError{endpoint: ep.base, status: resp.StatusCode, message: msg}
	}
	if err := decode(data); err != nil {
		var ve *versionError
		if errors.As(err, &ve) {
			c.takeOut(ctx, ep, ve.msg)
			return ep, &attemptError{status: resp.StatusCode, err: fmt.Errorf("%s: %w", ep.base, ve)}
		}
		var mal *malformedError
		if errors.As(err, &mal) {
			// Valid JSON that does not answer the request (log-probs asked
			// for but missing, impossible log-probs, wrong choices): a
			// broken answer, retried like a 5xx, never stored as a score.
			return ep, &attemptError{status: resp.StatusCode, err: fmt.Errorf("unusable answer: %w", mal)}
		}
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
	// Only the message is read: vLLM sends code as a number, OpenAI as a
	// string.
	var eb struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(data, &eb) == nil && eb.Error.Message != "" {
		return eb.Error.Message
	}
	// vLLM before 0.10.1: {"object": "error", "message": ..., "type": ...}.
	var flat struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(data, &flat) == nil && flat.Message != "" {
		return flat.Message
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
	var ex *ExhaustedError
	if errors.As(err, &ex) {
		return nil, err // attempts ran out, whatever the last one's error
	}
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
