package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/learner"
	"github.com/evolm/evolm/model/lora"
	"github.com/evolm/evolm/model/plan"
	"github.com/evolm/evolm/model/torch"
	"github.com/evolm/evolm/serving/backend"
)

// memoryCmd runs one LoRA GRPO step (LoRA on every projection, alpha 16,
// the reference log-probs computed in the step with the adapters off,
// chunked log-probs) on a random model of -preset's shapes built on the
// device, and reports evolm plan's estimate of that configuration beside
// the measured peak: on CUDA the caching allocator's peak of bytes in
// tensors (torch.cuda.max_memory_allocated, read through the shim), which
// the plan's total less its runtime line (the CUDA context and
// workspaces, outside the allocator) estimates; on the CPU the growth of
// peak resident memory (VmHWM) from before the model was built.
func memoryCmd(fs *flag.FlagSet, c *common) func() (any, error) {
	preset := fs.String("preset", "tiny", "model.Presets shape (qwen3)")
	layers := fs.Int("layers", 0, "decoder layers (0: the preset's)")
	seq := fs.Int("seq", 1024, "tokens per sequence")
	prompt := fs.Int("prompt", 128, "prompt tokens of each sequence")
	micro := fs.Int("micro", 2, "sequences in the step (one micro-batch)")
	rank := fs.Int("lora-rank", 16, "LoRA rank")
	beta := fs.Float64("beta", 0.001, "KL coefficient")
	ckpt := fs.Bool("grad-checkpointing", true, "activation checkpointing")
	return func() (any, error) {
		dev, err := c.dev()
		if err != nil {
			return nil, err
		}
		dt, err := torch.ParseDType(c.dtype)
		if err != nil {
			return nil, err
		}
		if c.threads > 0 {
			torch.SetNumThreads(c.threads)
		}
		cfg, err := model.PresetConfig("qwen3", *preset, model.QwenVocabSize)
		if err != nil {
			return nil, err
		}
		if *layers > 0 {
			cfg.NumHiddenLayers = *layers
			if err := model.NewConfig(cfg); err != nil {
				return nil, err
			}
		}
		est := plan.Estimate(plan.Input{
			Policy: plan.ShapeOf(cfg), ParamBytes: torch.ElemSize(dt), Beta: *beta, MicroBatch: *micro, SeqLen: *seq,
			GradCheckpointing: *ckpt, LoRA: plan.LoRA{Rank: *rank}, CUDA: torch.IsCUDA(dev),
		})
		base, err := vmKB("VmRSS")
		if err != nil {
			return nil, err
		}
		if torch.IsCUDA(dev) {
			if _, err := torch.CUDAMemory(dev, true); err != nil {
				return nil, err
			}
		}
		m, err := model.Build(cfg, model.LoadOptions{Device: dev, DType: dt})
		if err != nil {
			return nil, err
		}
		defer m.Close()
		if err := model.Randomize(m, 1); err != nil {
			return nil, err
		}
		tc := learner.DefaultTrainerConfig()
		tc.LoRA = lora.Config{Rank: *rank, Alpha: 16}
		tc.Loss.Beta = *beta
		tc.MicroBatch = *micro
		tc.GradCheckpointing = *ckpt
		tr, err := learner.NewTrainer(m, nil, tc, model.SaveOptions{})
		if err != nil {
			return nil, err
		}
		defer tr.Close()
		r := rand.New(rand.NewPCG(1, 2))
		batch := make([]backend.TrainSample, *micro)
		ids := func(n int) []int {
			v := make([]int, n)
			for i := range v {
				v[i] = r.IntN(cfg.VocabSize)
			}
			return v
		}
		for i := range batch {
			batch[i] = backend.TrainSample{PromptTokenIDs: ids(*prompt), CompletionTokenIDs: ids(*seq - *prompt), Advantage: r.NormFloat64()}
		}
		st, err := tr.TrainStep(context.Background(), batch)
		if err != nil {
			return nil, err
		}
		if err := torch.Synchronize(dev); err != nil {
			return nil, err
		}
		planned := est.Total - est.Runtime.Bytes
		out := map[string]any{
			"preset": *preset, "layers": cfg.NumHiddenLayers, "seq": *seq, "micro": *micro, "lora_rank": *rank,
			"device": c.device, "dtype": torch.DTypeName(dt), "loss": st.Loss,
			"plan_total": est.Total, "plan_runtime": est.Runtime.Bytes, "plan_bytes": planned,
		}
		if torch.IsCUDA(dev) {
			ms, err := torch.CUDAMemory(dev, false)
			if err != nil {
				return nil, err
			}
			out["measured"], out["measured_bytes"] = "torch.cuda.max_memory_allocated", ms.Peak
		} else {
			peak, err := vmKB("VmHWM")
			if err != nil {
				return nil, err
			}
			out["measured"], out["measured_bytes"] = "VmHWM growth", peak-base
		}
		out["ratio"] = float64(out["measured_bytes"].(int64)) / float64(planned)
		return out, nil
	}
}

// vmKB reads a kB field of /proc/self/status, in bytes.
func vmKB(field string) (int64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && k == field {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("/proc/self/status: no %s", field)
}
