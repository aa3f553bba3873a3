package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/evolm/evolm/model/plan"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/serving/runplan"
)

// planFallbacks are stages.run keys the plan reads that this build may not
// register yet; when the run spec has no flag of that name, `evolm plan`
// defines one of its own.
var planFallbacks = []struct {
	key, usage string
	typ        pipeline.FieldType
}{
	{runplan.KeyLoRARank, "LoRA rank; 0: full fine-tuning", pipeline.TypeInt},
	{runplan.KeyLoRAAlpha, "LoRA alpha", pipeline.TypeFloat},
	{runplan.KeyLoRADropout, "LoRA dropout", pipeline.TypeFloat},
	{runplan.KeyLoRATargets, "LoRA target projections", pipeline.TypeStrings},
	{runplan.KeyGradCheckpointing, "recompute each decoder layer in backward", pipeline.TypeBool},
}

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
memory of roles.policy.device (nvidia-smi on CUDA, MemAvailable on CPU).
'evolm run' makes the same estimate at start and refuses a configuration that
does not fit.`,
		Example: `  evolm --config stages/presets/paper.yaml plan --gpu-mem 80GiB
  evolm --config stages/presets/paper.yaml plan --gpu-mem 141GB --lora-rank 64 --grad-checkpointing`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o := runplan.Options{PromptTokens: promptTokens, Set: map[string]any{}, WorldSize: nproc}
			if gpuMem != "" {
				n, err := plan.ParseBytes(gpuMem)
				if err != nil {
					return fmt.Errorf("--gpu-mem: %w", err)
				}
				o.Capacity = n
			}
			fs := cmd.Flags()
			for _, f := range planFallbacks {
				name := strings.ReplaceAll(f.key, "_", "-")
				fl := fs.Lookup(name)
				if fl == nil || !fl.Changed || len(fl.Annotations[pipeline.FlagKeyAnnotation]) > 0 {
					continue // unset, or the run spec's own flag (already in a.cfg)
				}
				var v any
				var err error
				switch f.typ {
				case pipeline.TypeInt:
					v, err = fs.GetInt(name)
				case pipeline.TypeFloat:
					v, err = fs.GetFloat64(name)
				case pipeline.TypeBool:
					v, err = fs.GetBool(name)
				case pipeline.TypeStrings:
					v, err = fs.GetStringSlice(name)
				}
				if err != nil {
					return err
				}
				o.Set[f.key] = v
			}
			p, src, err := runplan.ForRun(a.cfg, o)
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
	for _, f := range planFallbacks {
		name := strings.ReplaceAll(f.key, "_", "-")
		if cmd.Flags().Lookup(name) != nil {
			continue
		}
		switch f.typ {
		case pipeline.TypeInt:
			cmd.Flags().Int(name, runplan.Defaults[f.key].(int), f.usage+" (stages.run."+f.key+")")
		case pipeline.TypeFloat:
			cmd.Flags().Float64(name, runplan.Defaults[f.key].(float64), f.usage+" (stages.run."+f.key+")")
		case pipeline.TypeBool:
			cmd.Flags().Bool(name, runplan.Defaults[f.key].(bool), f.usage+" (stages.run."+f.key+")")
		case pipeline.TypeStrings:
			cmd.Flags().StringSlice(name, runplan.Defaults[f.key].([]string), f.usage+" (stages.run."+f.key+")")
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
