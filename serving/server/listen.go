package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

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
