package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

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
	var nproc int
	cmd.Flags().StringVar(&resume, "resume", "", "continue the run in this directory from its last checkpoint, with its saved config.yaml")
	cmd.Flags().IntVar(&nproc, "nproc", 1, "data-parallel learner: run this many ranks on this machine (as torchrun --nproc-per-node does; under torchrun or srun, RANK and WORLD_SIZE make each process a rank instead)")
	cmd.RunE = func(c *cobra.Command, _ []string) error {
		rank, follower := isRank()
		if nproc > 1 && !rank {
			grace := 10*time.Minute + 30*time.Second
			switch v := a.cfg.Get("stages.run.dist_timeout").(type) {
			case time.Duration:
				grace = v + 30*time.Second
			case string:
				if d, err := time.ParseDuration(v); err == nil {
					grace = d + 30*time.Second
				}
			}
			return launch(c.Context(), nproc, grace)
		}
		if nproc < 1 {
			return fmt.Errorf("--nproc %d, want ≥ 1", nproc)
		}
		return pipeline.RunStage(c.Context(), spec.Name, a.cfg, pipeline.RunOptions{Log: a.log, Follower: follower})
	}
	cmd.Example = `  evolm --config stages/presets/demo.yaml run --run demo
  evolm run --resume runs/demo
  evolm --config stages/presets/demo.yaml run --run demo --nproc 2`
	cmd.PersistentPreRunE = func(c *cobra.Command, _ []string) error {
		if resume != "" {
			saved := filepath.Join(resume, "config.yaml")
			if staged := pipeline.StagedRun(resume, spec.Name); staged != "" {
				// An interrupted --fresh: it continues beside the old run,
				// with its own settings.
				if _, err := os.Stat(filepath.Join(staged, "config.yaml")); err == nil {
					saved = filepath.Join(staged, "config.yaml")
				}
			}
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
