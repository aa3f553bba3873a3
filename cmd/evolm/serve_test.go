package main

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/evolm/evolm/model/modeltest"
	"github.com/evolm/evolm/model/serve"
	"github.com/evolm/evolm/model/torch"
	"github.com/evolm/evolm/model/torchbe"
)

// TestServedScoresLeaveConnectionThreads: a model loaded as `evolm serve`
// loads it answers a score request handled on a connection's goroutine, at
// --coalesce 1 (the engine call made on that goroutine), without that
// goroutine's thread entering libtorch, where it would keep a libgomp pool
// of its own for as long as the connection lives.
func TestServedScoresLeaveConnectionThreads(t *testing.T) {
	dir := t.TempDir()
	modeltest.InitTiny(t, dir, 3)
	m, err := loadServed(torchbe.Options{Dir: dir, ModelID: "tiny", Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	h, err := serve.NewHandler(serve.Config{Generator: m, Model: "tiny", MaxBatch: 1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // so that ThreadClaimed asks about this goroutine's thread
		defer runtime.UnlockOSThread()
		for range 3 {
			body := `{"model":"tiny","prefix":"Is the sky blue? It is.","suffixes":[" Correct?"," Polite?"],"candidates":[" yes"," no"]}`
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/evolm/score", strings.NewReader(body)))
			if b, _ := io.ReadAll(rec.Body); rec.Code != http.StatusOK || !strings.Contains(string(b), "logprobs") {
				t.Errorf("score: status %d, body %s", rec.Code, b)
				return
			}
		}
		if torch.ThreadClaimed() {
			t.Error("the connection's thread entered libtorch: its score ran there, not on the engine thread")
		}
	}()
	<-done
}
