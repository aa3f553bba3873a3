package server_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/evolm/evolm/serving/openai"
	"github.com/evolm/evolm/serving/server"
)

// TestRuntimeLoadsAreOptIn: without WeightUpdates and RuntimeLoRA the load
// routes do not exist, and enabling one needs a load root.
func TestRuntimeLoadsAreOptIn(t *testing.T) {
	url := strings.TrimSuffix(startServer(t, &fakeGenerator{}), "/v1")
	for _, path := range []string{"/update_weights_from_disk", "/v1/load_lora_adapter", "/v1/unload_lora_adapter"} {
		if r := postJSON(t, url+path, map[string]string{"model_path": "/x", "lora_name": "a", "lora_path": "/x"}); r.status != http.StatusNotFound {
			t.Errorf("POST %s on a default server: %+v, want 404", path, r)
		}
	}
	_, err := server.NewHandler(server.Config{Generator: &fakeGenerator{}, Model: "m", Loader: &fakeLoader{}, WeightUpdates: true})
	if err == nil || !strings.Contains(err.Error(), "load root") {
		t.Errorf("weight updates without a load root: %v", err)
	}
}

// TestPostsNeedJSON: every POST route refuses a body not declared
// application/json, before reading it (a page in a browser can send
// text/plain cross-origin without a preflight).
func TestPostsNeedJSON(t *testing.T) {
	l := &fakeLoader{}
	root := startUpdatable(t, l, true, "ckpt")
	for _, path := range []string{"/v1/completions", "/v1/chat/completions", "/v1/evolm/score", "/tokenize", "/detokenize",
		"/update_weights_from_disk", "/v1/load_lora_adapter", "/v1/unload_lora_adapter"} {
		for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", ""} {
			req, _ := http.NewRequest(http.MethodPost, root+path, strings.NewReader(`{"model_path": "ckpt", "prompt": "x"}`))
			if ct != "" {
				req.Header.Set("Content-Type", ct)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnsupportedMediaType {
				t.Errorf("POST %s as %q: %d, want 415", path, ct, resp.StatusCode)
			}
		}
	}
	if got := l.closedList(); got != "" {
		t.Errorf("a refused update loaded something: %q", got)
	}
}

// TestLoadsStayUnderTheRoot: a path outside the load root, directly or
// through a symlink, is refused with the same answer whether it exists or
// not, and no answer shows a file's bytes; files that would block a read
// or never end (a FIFO, /dev/zero) and oversized metadata are refused
// before anything is opened, and a valid load still works after them.
func TestLoadsStayUnderTheRoot(t *testing.T) {
	l := &fakeLoader{}
	root := startUpdatable(t, l, true, "ok", "fifo", "zero", "big", "secret")
	lr := l.root
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "config.json"), []byte("root:$6$secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(lr, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(lr, "fifo", "config.json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", filepath.Join(lr, "zero", "config.json")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(lr, "big", "config.json"), make([]byte, 2<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "config.json"), filepath.Join(lr, "secret", "config.json")); err != nil {
		t.Fatal(err)
	}
	update := func(path string) (int, string) {
		r := postJSON(t, root+"/update_weights_from_disk", openai.UpdateWeightsFromDiskRequest{ModelPath: path})
		return r.status, r.body
	}
	normalize := func(body, path string) string { return strings.ReplaceAll(body, path, "PATH") }
	_, exists := update(outside)
	_, missing := update(filepath.Join(outside, "no-such-dir"))
	if normalize(exists, outside) != normalize(missing, filepath.Join(outside, "no-such-dir")) || !strings.Contains(exists, "not under the load root") {
		t.Errorf("answers reveal whether a path outside the root exists:\n%s\n%s", exists, missing)
	}
	for _, tc := range []struct{ path, want string }{
		{"../" + filepath.Base(outside), "not under the load root"},
		{"escape", "not under the load root"},
		{"fifo", "not a regular file"},
		{"zero", "links outside the load root"},
		{"big", "over the 1048576-byte limit"},
		{"secret", "links outside the load root"},
		{"/etc", "not under the load root"},
	} {
		status, body := update(tc.path) // a FIFO opened would never return
		if status != http.StatusBadRequest || !strings.Contains(body, tc.want) || strings.Contains(body, "secret") && tc.path != "secret" {
			t.Errorf("update from %s: %d %s, want 400 saying %q", tc.path, status, body, tc.want)
		}
		if strings.Contains(body, "root:$6$") {
			t.Errorf("update from %s shows the file's bytes: %s", tc.path, body)
		}
	}
	if status, body := update("ok"); status != http.StatusOK {
		t.Errorf("a valid update after the refused ones: %d %s", status, body)
	}
}

// TestLoadErrorsShowNoFileBytes: a loader error that quotes a file's bytes
// (Go's JSON errors do) reaches the client without them.
func TestLoadErrorsShowNoFileBytes(t *testing.T) {
	l := &fakeLoader{fail: map[string]error{"adapter:bad": errors.New("config.json: invalid character 'r' looking for beginning of value")}}
	root := startUpdatable(t, l, true, "bad")
	r := postJSON(t, root+"/v1/load_lora_adapter", openai.LoadLoRAAdapterRequest{LoraName: "a", LoraPath: "bad"})
	if r.status != http.StatusBadRequest || strings.Contains(r.body, "'r'") || !strings.Contains(r.body, "invalid character") {
		t.Errorf("load error: %+v", r)
	}
}

// TestAbandonedLoadIsNotApplied: a load whose client goes away while it
// runs is freed, not applied; the next load is not held up by it.
func TestAbandonedLoadIsNotApplied(t *testing.T) {
	l := &fakeLoader{hold: make(chan struct{}), loading: make(chan struct{}, 1)}
	root := startUpdatable(t, l, true, "slow", "next")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, root+"/v1/load_lora_adapter",
			strings.NewReader(`{"lora_name": "slow", "lora_path": "slow"}`))
		req.Header.Set("Content-Type", "application/json")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	<-l.loading
	cancel()
	<-done
	close(l.hold) // the load finishes after its client has gone
	l.loading = make(chan struct{}, 8)
	if r := postJSON(t, root+"/v1/load_lora_adapter", openai.LoadLoRAAdapterRequest{LoraName: "next", LoraPath: "next"}); r.status != http.StatusOK {
		t.Fatalf("the next load: %+v", r)
	}
	if _, r := complete(t, root, "slow"); r.status != http.StatusNotFound {
		t.Errorf("the abandoned adapter is served: %+v", r)
	}
	if got := l.closedList(); got != "adapter:slow" {
		t.Errorf("freed: %q, want the abandoned adapter", got)
	}
}

// TestMaxLoRAs: one adapter more than MaxLoRAs is refused; reloading a
// loaded name in place is not one more.
func TestMaxLoRAs(t *testing.T) {
	l := &fakeLoader{}
	root := startUpdatableWith(t, l, server.Config{RuntimeLoRA: true, MaxLoRAs: 2, Logger: slog.New(slog.DiscardHandler)}, "a", "b", "c")
	load := func(name string, inplace bool) reply {
		return postJSON(t, root+"/v1/load_lora_adapter", openai.LoadLoRAAdapterRequest{LoraName: name, LoraPath: name, LoadInplace: inplace})
	}
	for _, n := range []string{"a", "b"} {
		if r := load(n, false); r.status != http.StatusOK {
			t.Fatal(r)
		}
	}
	if r := load("c", false); r.status != http.StatusBadRequest || !strings.Contains(r.body, "--max-loras") {
		t.Errorf("a third adapter: %+v", r)
	}
	if r := load("a", true); r.status != http.StatusOK {
		t.Errorf("reloading one in place: %+v", r)
	}
}
