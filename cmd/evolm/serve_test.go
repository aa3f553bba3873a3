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
	"github.com/evolm/evolm/model/torch"
	"github.com/evolm/evolm/serving/server"
	"github.com/evolm/evolm/serving/torchbe"
)

// TestServedCallsLeaveConnectionThreads: a model loaded as `evolm serve`
// loads it answers score and completion requests handled on a connection's
// goroutine, at --coalesce 1 (the engine calls made on that goroutine),
// without that goroutine's thread entering libtorch, where it would keep a
// libgomp pool of its own for as long as the connection lives.
func TestServedCallsLeaveConnectionThreads(t *testing.T) {
	dir := t.TempDir()
	modeltest.InitTiny(t, dir, 3)
	m, err := loadServed(torchbe.Options{Dir: dir, ModelID: "tiny", Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	h, err := server.NewHandler(server.Config{Generator: m, Model: "tiny", MaxBatch: 1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // so that ThreadClaimed asks about this goroutine's thread
		defer runtime.UnlockOSThread()
		for _, c := range []struct{ path, body, want string }{
			{"/v1/evolm/score", `{"model":"tiny","prefix":"Is the sky blue? It is.","suffixes":[" Correct?"," Polite?"],"candidates":[" yes"," no"]}`, "logprobs"},
			{"/v1/completions", `{"model":"tiny","prompt":"Once upon a time","max_tokens":5,"n":2,"seed":1}`, "text_completion"},
			{"/v1/evolm/score", `{"model":"tiny","prefix":"Is grass red? No.","suffixes":[" Correct?"],"candidates":[" yes"," no"]}`, "logprobs"},
		} {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodPost, c.path, strings.NewReader(c.body))
			req.Header.Set("Content-Type", "application/json")
			h.ServeHTTP(rec, req)
			if b, _ := io.ReadAll(rec.Body); rec.Code != http.StatusOK || !strings.Contains(string(b), c.want) {
				t.Errorf("%s: status %d, body %s", c.path, rec.Code, b)
				return
			}
		}
		if torch.ThreadClaimed() {
			t.Error("the connection's thread entered libtorch: its calls ran there, not on the engine thread")
		}
	}()
	<-done
}
