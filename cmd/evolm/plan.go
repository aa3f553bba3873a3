package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/evolm/evolm/model/plan"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/serving/runplan"
	runstage "github.com/evolm/evolm/stages/run"
)

func newPlanCmd(a *app) *cobra.Command {
	var gpuMem string
	var promptTokens, nproc int
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Estimate the device memory of `evolm run` for a config, and whether it fits",
		Long: `Prints, per device, the memory that 'evolm run' with this configuration needs
(an estimate, model/plan): the weights, gradients, optimizer state, master
weights, the KL reference and an in-process judge, held for the run; then the
KV cache of the generation batch, the activations of one micro-batch (with and
without activation checkpointing), the logits chunk and the optimizer step,
of which the largest counts; then the total, whether it fits the device and
the largest micro_batch that fits.

Model shapes come from each role's config.json (roles.<role>.model), or from
a preset when that directory has none and its name is one (models/Qwen3-8B:
qwen3-8b). The learner's keys are stages.run's (micro_batch, beta, lora_rank,
grad_checkpointing …). Without --gpu-mem the plan is checked against the free
memory of roles.policy.device (the CUDA driver's free memory, MemAvailable on CPU).
'evolm run' makes the same estimate at start and refuses a configuration that
does not fit.`,
		Example: `  evolm --config stages/presets/paper.yaml plan --gpu-mem 80GiB
  evolm --config stages/presets/paper.yaml plan --gpu-mem 141GB --lora-rank 64 --grad-checkpointing`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o := runplan.Options{PromptTokens: promptTokens, WorldSize: nproc}
			if gpuMem != "" {
				n, err := plan.ParseBytes(gpuMem)
				if err != nil {
					return fmt.Errorf("--gpu-mem: %w", err)
				}
				o.Capacity = n
			}
			spec, _ := pipeline.Lookup(runstage.Name)
			rc, err := runstage.FromConfig(pipeline.StageView(a.cfg, spec))
			if err != nil {
				return err
			}
			o.FrozenInferrer = rc.PlanOptions().FrozenInferrer
			p, src, err := runplan.ForRun(a.cfg, rc.Learner, o)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "policy: %s on %s; rubric generator: %s; judge: %s\n", src.Policy, src.Device, src.RubricGenerator, orText(src.Judge, "none"))
			p.Fprint(out)
			if p.Capacity <= 0 {
				fmt.Fprintf(out, "device memory of %s unknown: not checked (pass --gpu-mem)\n", src.Device)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&gpuMem, "gpu-mem", "", "device memory to check against (80GiB, 141GB); default: the free memory of roles.policy.device")
	cmd.Flags().IntVar(&promptTokens, "prompt-tokens", runplan.DefaultPromptTokens, "tokens of one prompt")
	cmd.Flags().IntVar(&nproc, "nproc", 0, "data-parallel learner ranks (evolm run --nproc); 0: WORLD_SIZE, else 1. With stages.run.zero_stage 1 a rank holds 1/nproc of the optimizer state, with 2 of the gradients too")
	if spec, ok := pipeline.Lookup("run"); ok {
		if err := pipeline.AddStageFlags(cmd.Flags(), spec); err != nil {
			panic(err) // Register validated the spec; a programming error
		}
	}
	return cmd
}

func orText(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
