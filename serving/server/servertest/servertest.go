// Package servertest runs an OpenAI-compatible handler on a free local port
// for the length of a test or benchmark, and talks raw HTTP to one.
package servertest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/evolm/evolm/serving/server"
)

// Start serves h with server.ServeWith on 127.0.0.1 until tb ends, then shuts
// it down and reports an unclean shutdown; it returns the host:port.
func Start(tb testing.TB, h http.Handler, opt server.ServerOptions) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- server.ServeWith(ctx, ln, h, opt) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("shutdown: %v", err)
		}
	})
	return ln.Addr().String()
}

// RawConn opens a TCP connection to addr, closed when tb ends, whose reads
// give up after guard (so a server that keeps a connection open fails the
// test instead of hanging it).
func RawConn(tb testing.TB, addr string, guard time.Duration) net.Conn {
	tb.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	c.SetReadDeadline(time.Now().Add(guard))
	return c
}

// StalledBody sends on c a completions request whose body stops short of
// its Content-Length, and returns the status of the answer: 408 once the
// server's body timeout has passed.
func StalledBody(tb testing.TB, c net.Conn) int {
	tb.Helper()
	fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"prompt\"")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		tb.Fatalf("no answer to a stalled body: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
