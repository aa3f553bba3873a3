package openai

import (
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func negInf() float64 { return math.Inf(-1) }

func TestParseRetryAfter(t *testing.T) {
	future := time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)
	tests := []struct {
		in      string
		want    time.Duration
		atLeast bool
	}{
		{"", 0, false},
		{"3", 3 * time.Second, false},
		{"0.5", 500 * time.Millisecond, false},
		{"-1", 0, false},
		{"soon", 0, false},
		{future, 58 * time.Minute, true},
	}
	for _, tt := range tests {
		got := parseRetryAfter(tt.in)
		if (tt.atLeast && got < tt.want) || (!tt.atLeast && got != tt.want) {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestBackoffFullJitter(t *testing.T) {
	j := 1.0
	c, err := New(Config{Endpoints: []string{"http://x"}, Model: "m", BaseBackoff: 100 * time.Millisecond,
		MaxBackoff: time.Second, MaxRetryAfter: 5 * time.Second, Jitter: func() float64 { return j }})
	if err != nil {
		t.Fatal(err)
	}
	var got []time.Duration
	for a := 1; a <= 6; a++ {
		got = append(got, c.backoff(a, 0))
	}
	j = 0.25
	got = append(got, c.backoff(2, 0), c.backoff(1, 3*time.Second), c.backoff(1, time.Minute))
	ms := time.Millisecond
	want := []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, time.Second, time.Second, 50 * ms, 3 * time.Second, 5 * time.Second}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("backoffs (-want +got):\n%s", diff)
	}
}

func TestPickBalances(t *testing.T) {
	for _, bal := range []Balance{RoundRobin, LeastInFlight} {
		c, err := New(Config{Endpoints: []string{"http://a", "http://b/v1", "http://c/"}, Model: "m", Balance: bal})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for range 4 {
			got = append(got, c.pick(nil).base)
		}
		if diff := cmp.Diff([]string{"http://a/v1", "http://b/v1", "http://c/v1", "http://a/v1"}, got); diff != "" {
			t.Errorf("%s idle picks (-want +got):\n%s", bal, diff)
		}
		// A retry avoids the endpoint that just failed.
		for range 3 {
			if ep := c.pick(c.eps[0]); ep == c.eps[0] {
				t.Errorf("%s: retry picked the failed endpoint", bal)
			}
		}
	}
	c, _ := New(Config{Endpoints: []string{"http://a", "http://b"}, Model: "m"})
	c.eps[0].inFlight.Store(3)
	for range 4 {
		if ep := c.pick(nil); ep != c.eps[1] {
			t.Errorf("least in flight picked %s with 3 in flight over an idle endpoint", ep.base)
		}
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no endpoints", Config{Model: "m"}, "openai: no endpoints"},
		{"no model", Config{Endpoints: []string{"http://a"}}, "openai: no model name"},
		{"bad url", Config{Endpoints: []string{"a:8000"}, Model: "m"}, `openai: endpoint "a:8000": want an http:// or https:// URL`},
		{"bad balance", Config{Endpoints: []string{"http://a"}, Model: "m", Balance: "random"}, `openai: balance "random": want "least_in_flight" or "round_robin"`},
		{"bad score api", Config{Endpoints: []string{"http://a"}, Model: "m", ScoreAPI: "magic"}, `openai: score api "magic": want "auto", "completions" or "evolm"`},
	}
	for _, tt := range tests {
		_, err := New(tt.cfg)
		if err == nil || err.Error() != tt.want {
			t.Errorf("%s: err = %v, want %q", tt.name, err, tt.want)
		}
	}
}
