// Command memory-bench measures the peak resident memory and the time of one
// GRPO step of evolm's in-process learner (stages/learner.Trainer.TrainStep,
// reference log-probs included) on a random model of a preset shape, and
// prints evolm plan's estimate of the same configuration beside it. One
// configuration per process, so the peak (VmHWM) is that configuration's:
//
//	go run ./bench/memory -preset qwen3-0.6b -seq 1024 -micro-batch 2 -mode full
//	go run ./bench/memory ... -mode chunked     # + chunked selective log-softmax
//	go run ./bench/memory ... -mode checkpoint  # + activation checkpointing
//	go run ./bench/memory ... -mode lora        # LoRA (rank 16, all seven targets) + chunked + checkpointing
//
// scripts/bench_memory.sh runs every mode, one process each, and prints the
// README table. The model is built in process
// (model.Randomize), float32 on the CPU; -layers keeps the preset's widths
// with fewer decoder layers when the machine cannot hold the full depth.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/generate"
	"github.com/evolm/evolm/model/learner"
	_ "github.com/evolm/evolm/model/llama"
	"github.com/evolm/evolm/model/lora"
	"github.com/evolm/evolm/model/plan"
	"github.com/evolm/evolm/model/torch"
	"github.com/evolm/evolm/serving/backend"
)

// Result is one measured configuration.
type Result struct {
	Mode        string  `json:"mode"`
	Preset      string  `json:"preset"`
	Layers      int     `json:"layers"`
	Params      int64   `json:"params"`
	Seq         int     `json:"seq"`
	MicroBatch  int     `json:"micro_batch"`
	Beta        float64 `json:"beta"`
	Threads     int     `json:"threads"`
	StepSeconds float64 `json:"step_seconds"`
	PeakRSS     int64   `json:"peak_rss_bytes"`
	BaseRSS     int64   `json:"rss_before_model_bytes"`
	PlanBytes   int64   `json:"plan_bytes"`
	Loss        float64 `json:"loss"`
	// RSS after each phase (bytes): model built and randomized, trainer
	// made (reference copy, adapter), step done.
	RSSModel   int64 `json:"rss_model_bytes"`
	RSSTrainer int64 `json:"rss_trainer_bytes"`
	LoRARank   int   `json:"lora_rank,omitempty"`
	// MmapThreshold is glibc's M_MMAP_THRESHOLD set for the run (evolm's
	// torch.mmap_threshold default, 1 MiB); 0: glibc's adaptive default.
	MmapThreshold int `json:"mmap_threshold"`
}

func main() {
	preset := flag.String("preset", "qwen3-0.6b", "model.Presets shape")
	layers := flag.Int("layers", 0, "decoder layers (0: the preset's)")
	seq := flag.Int("seq", 1024, "tokens per sequence (prompt + completion)")
	prompt := flag.Int("prompt", 128, "prompt tokens of each sequence")
	micro := flag.Int("micro-batch", 2, "sequences per forward/backward (the step is one micro-batch)")
	mode := flag.String("mode", "chunked", "full (logits unchunked), chunked, checkpoint (chunked + activation checkpointing) or lora (LoRA + chunked + checkpointing)")
	rank := flag.Int("lora-rank", 16, "LoRA rank of -mode lora (alpha 16, all seven targets)")
	beta := flag.Float64("beta", 0.001, "KL coefficient; ≠ 0 keeps a frozen reference copy and runs it in the step")
	threads := flag.Int("threads", 2, "libtorch intra-op threads")
	planOnly := flag.Bool("plan", false, "print the plan's estimate and exit without measuring")
	mmap := flag.Int("mmap-threshold", 1<<20, "glibc M_MMAP_THRESHOLD in bytes, as evolm's torch.mmap_threshold (default 1 MiB); 0: glibc's adaptive default")
	flag.Parse()
	if *mmap > 0 {
		if err := torch.SetMmapThreshold(*mmap); err != nil {
			fmt.Fprintln(os.Stderr, "memory-bench:", err)
			os.Exit(1)
		}
	}
	r, err := run(*preset, *layers, *seq, *prompt, *micro, *mode, *beta, *threads, *rank, *planOnly)
	if err != nil {
		fmt.Fprintln(os.Stderr, "memory-bench:", err)
		os.Exit(1)
	}
	r.MmapThreshold = *mmap
	b, _ := json.Marshal(r)
	fmt.Println(string(b))
}

func run(preset string, layers, seq, promptLen, micro int, mode string, beta float64, threads, rank int, planOnly bool) (Result, error) {
	torch.SetNumThreads(threads)
	cfg, err := model.PresetConfig("qwen3", preset, model.QwenVocabSize)
	if err != nil {
		return Result{}, err
	}
	if layers > 0 {
		cfg.NumHiddenLayers = layers
		if err := model.NewConfig(cfg); err != nil {
			return Result{}, err
		}
	}
	ckpt := false
	var lc lora.Config
	switch mode {
	case "full":
		generate.FullLogits = true
	case "chunked":
	case "checkpoint":
		ckpt = true
	case "lora":
		ckpt = true
		lc = lora.Config{Rank: rank, Alpha: 16}
	default:
		return Result{}, fmt.Errorf("mode %q: want full, chunked, checkpoint or lora", mode)
	}
	res := Result{Mode: mode, Preset: preset, Layers: cfg.NumHiddenLayers, Params: cfg.NumParams(), Seq: seq, MicroBatch: micro, Beta: beta, Threads: threads}
	est := plan.Estimate(plan.Input{
		Policy: plan.ShapeOf(cfg), ParamBytes: 4, Beta: beta,
		MicroBatch: micro, SeqLen: seq, GradCheckpointing: ckpt, FullLogits: mode == "full",
		LoRA: plan.LoRA{Rank: lc.Rank},
	})
	res.LoRARank = lc.Rank
	res.PlanBytes = est.Total
	if planOnly {
		est.Fprint(os.Stderr)
		return res, nil
	}
	if res.BaseRSS, err = status("VmRSS"); err != nil {
		return Result{}, err
	}

	m, err := model.Build(cfg, model.LoadOptions{})
	if err != nil {
		return Result{}, err
	}
	defer m.Close()
	if err := model.Randomize(m, 1); err != nil {
		return Result{}, err
	}
	if res.RSSModel, err = status("VmRSS"); err != nil {
		return Result{}, err
	}
	tc := learner.DefaultTrainerConfig()
	tc.LoRA = lc
	tc.Loss.Beta = beta
	tc.MicroBatch = micro
	tc.GradCheckpointing = ckpt
	tr, err := learner.NewTrainer(m, nil, tc, model.SaveOptions{})
	if err != nil {
		return Result{}, err
	}
	defer tr.Close()
	if res.RSSTrainer, err = status("VmRSS"); err != nil {
		return Result{}, err
	}

	rng := rand.New(rand.NewSource(1))
	batch := make([]backend.TrainSample, micro)
	for i := range batch {
		ids := func(n int) []int {
			out := make([]int, n)
			for j := range out {
				out[j] = rng.Intn(cfg.VocabSize)
			}
			return out
		}
		batch[i] = backend.TrainSample{PromptTokenIDs: ids(promptLen), CompletionTokenIDs: ids(seq - promptLen), Advantage: rng.NormFloat64()}
	}
	t0 := time.Now()
	st, err := tr.TrainStep(context.Background(), batch)
	if err != nil {
		return Result{}, err
	}
	res.StepSeconds = time.Since(t0).Seconds()
	res.Loss = st.Loss
	if res.PeakRSS, err = status("VmHWM"); err != nil {
		return Result{}, err
	}
	return res, nil
}

// status reads a kB field of /proc/self/status in bytes.
func status(field string) (int64, error) {
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
