// Command evolm runs the EVOLM pipeline: one subcommand per registered stage,
// plus inspect, stages and config. It holds no logic: every command calls
// into package pipeline (or the stage packages, through the registry).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// The first Ctrl-C cancels the context (stages stop at the next batch and
	// keep what they committed); a second one kills the process.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop()
	}()
	if err := newRootCmd().ExecuteContext(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "evolm: %v\n", err)
		os.Exit(1)
	}
}
