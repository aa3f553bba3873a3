// Package servetest runs an OpenAI-compatible handler on a free local port
// for the length of a test or benchmark.
package servetest

import (
	"context"
	"net"
	"net/http"
	"testing"

	"github.com/evolm/evolm/model/serve"
)

// Start serves h with serve.ServeWith on 127.0.0.1 until tb ends, then shuts
// it down and reports an unclean shutdown; it returns the host:port.
func Start(tb testing.TB, h http.Handler, opt serve.ServerOptions) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve.ServeWith(ctx, ln, h, opt) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("shutdown: %v", err)
		}
	})
	return ln.Addr().String()
}
