package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/evolm/evolm/pipeline"
)

// customCommands replace the generated command of some stages.
var customCommands = map[string]func(a *app, spec pipeline.Spec) *cobra.Command{
	"run": newRunCmd,
}

// newRunCmd is the generated `evolm run` plus --resume RUN_DIR, which reruns
// a run directory with the config it was started with (its config.yaml).
func newRunCmd(a *app, spec pipeline.Spec) *cobra.Command {
	cmd := newStageCmd(a, spec)
	var resume string
	cmd.Flags().StringVar(&resume, "resume", "", "continue the run in this directory from its last checkpoint, with its saved config.yaml")
	cmd.Example = `  evolm --config stages/presets/demo.yaml run --run demo
  evolm run --resume runs/demo`
	cmd.PersistentPreRunE = func(c *cobra.Command, _ []string) error {
		if resume != "" {
			saved := filepath.Join(resume, "config.yaml")
			if _, err := os.Stat(saved); err != nil {
				return fmt.Errorf("--resume %s: no config.yaml there: not a directory `evolm run` started", resume)
			}
			if a.configFile == "" {
				a.configFile = saved
			}
			if err := c.Flags().Set("run-dir", resume); err != nil {
				return err
			}
		}
		return a.load(c)
	}
	return cmd
}
