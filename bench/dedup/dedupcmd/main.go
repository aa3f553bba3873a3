// Command dedupcmd runs the registered dedup stage exactly as `evolm dedup`
// does (pipeline.LoadConfig, then pipeline.RunStage) in a binary that does
// not link libtorch, so that its peak RSS is the stage's own: the evolm
// binary carries the resident pages of libtorch for its model commands.
//
// usage: dedupcmd -run-dir DIR KEY=VALUE... (keys of stages.dedup, e.g.
// input=corpus verify=false)
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/evolm/evolm/pipeline"
	_ "github.com/evolm/evolm/stages/dedup"
)

func main() {
	runDir := flag.String("run-dir", "", "run directory")
	flag.Parse()
	env := []string{"EVOLM_RUN_DIR=" + *runDir, "EVOLM_PIPELINE_PROGRESS=off"}
	for _, kv := range flag.Args() {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			fmt.Fprintf(os.Stderr, "dedupcmd: %q: want key=value\n", kv)
			os.Exit(2)
		}
		env = append(env, pipeline.EnvName("stages.dedup."+k)+"="+v)
	}
	cfg, err := pipeline.LoadConfig(pipeline.LoadOptions{Env: env})
	if err == nil {
		err = pipeline.RunStage(context.Background(), "dedup", cfg, pipeline.RunOptions{})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "dedupcmd:", err)
		os.Exit(1)
	}
}
