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
	"sft": newSFTCmd,
}

// addNproc gives a training stage's command --nproc N, which runs the stage
// as N data-parallel ranks on this machine (launch); under torchrun or srun
// each process is a rank already (isRank). The stage joins the group
// itself and bounds its collectives by stages.<name>.dist_timeout.
func addNproc(a *app, cmd *cobra.Command, spec pipeline.Spec) {
	var nproc int
	cmd.Flags().IntVar(&nproc, "nproc", 1, "data-parallel learner: run this many ranks on this machine (as torchrun --nproc-per-node does; under torchrun or srun, RANK and WORLD_SIZE make each process a rank instead)")
	cmd.RunE = func(c *cobra.Command, _ []string) error {
		rank, follower := isRank()
		if nproc > 1 && !rank {
			grace := 10*time.Minute + 30*time.Second
			switch v := a.cfg.Get("stages." + spec.Name + ".dist_timeout").(type) {
			case time.Duration:
				grace = v + 30*time.Second
			case string:
				if d, err := time.ParseDuration(v); err == nil {
					grace = d + 30*time.Second
				}
			}
			return launch(c.Context(), "evolm "+spec.Name, nproc, grace)
		}
		if nproc < 1 {
			return fmt.Errorf("--nproc %d, want ≥ 1", nproc)
		}
		return pipeline.RunStage(c.Context(), spec.Name, a.cfg, pipeline.RunOptions{Log: a.log, Follower: follower})
	}
}

// newSFTCmd is the generated `evolm sft` plus --nproc.
func newSFTCmd(a *app, spec pipeline.Spec) *cobra.Command {
	cmd := newStageCmd(a, spec)
	addNproc(a, cmd, spec)
	cmd.Example = `  evolm sft --run warm --policy-model models/Qwen3-1.7B --input data/sft.jsonl --lr 2e-5 --epochs 3
  evolm sft --run warm --policy-model models/Qwen3-1.7B --input data/sft.jsonl --nproc 2 --zero-stage 1`
	return cmd
}

// newRunCmd is the generated `evolm run` plus --nproc and --resume RUN_DIR,
// which reruns a run directory with the config it was started with (its
// config.yaml).
func newRunCmd(a *app, spec pipeline.Spec) *cobra.Command {
	cmd := newStageCmd(a, spec)
	var resume string
	cmd.Flags().StringVar(&resume, "resume", "", "continue the run in this directory from its last checkpoint, with its saved config.yaml")
	addNproc(a, cmd, spec)
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
