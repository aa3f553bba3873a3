// Command evolm runs the EVOLM pipeline. Every registered stage
// (pipeline.Specs) gets a subcommand generated from its spec; a few specs
// have theirs adjusted (customCommands: `run` and `sft` add --nproc, `run`
// --resume, the two analyze stages are grouped under `evolm analyze`). The other commands are written
// here: stages, config and inspect call package pipeline; model (init, merge)
// calls the model packages; serve calls model/serve. Commands parse flags and
// call into those packages; they hold no pipeline logic.
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
