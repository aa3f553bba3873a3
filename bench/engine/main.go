// Command engine-bench times evolm's engine on one checkpoint; compare.py in
// this directory runs it side by side with HF transformers on the same
// checkpoint, inputs and thread count.
//
//	go run ./bench/engine -model DIR -workload workload.json -threads 1
//	go run ./bench/engine -model DIR -init small   # create the checkpoint
//
// It prints one JSON object with the best seconds over -passes timed passes
// (after one untimed warm-up) of each measurement: prefill (one forward pass
// of the prefill prompt), greedy_b1 (batch-1 greedy generation), sampled
// (every prompt × samples, temperature 1, one shared prefill per prompt) and
// fwd_bwd (one forward+backward of a log-prob loss), plus the token counts
// the rates are computed from. With -check FILE it also writes what
// compare.py checks against HF before it prints a ratio: the prefill's
// last-position logits, the greedy ids and the fwd+bwd loss.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/evolm/evolm/model"
	_ "github.com/evolm/evolm/model/llama"
	"github.com/evolm/evolm/model/torch"
)

func main() {
	dir := flag.String("model", "", "HF checkpoint directory")
	wl := flag.String("workload", "", "workload JSON written by compare.py")
	threads := flag.Int("threads", 1, "libtorch intra-op threads")
	passes := flag.Int("passes", 2, "timed passes (the best is reported)")
	check := flag.String("check", "", "also write the outputs compare.py checks against HF (JSON) to this file")
	preset := flag.String("init", "", "only create a random Qwen3 checkpoint of this preset (tiny, small) at -model, then exit")
	only := flag.String("only", "", "run only this measurement (prefill, greedy, sampled, fwd_bwd), e.g. under perf or pprof")
	flag.Parse()
	if *preset != "" {
		if _, err := model.Init(model.InitOptions{Arch: "qwen3", Preset: *preset, Seed: 1, OutDir: *dir}); err != nil {
			fmt.Fprintln(os.Stderr, "engine-bench:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*dir, *wl, *threads, *passes, *check, *only); err != nil {
		fmt.Fprintln(os.Stderr, "engine-bench:", err)
		os.Exit(1)
	}
}

// best runs f once untimed, then passes times, and returns the fastest.
func best(passes int, f func() error) (float64, error) {
	if err := f(); err != nil {
		return 0, err
	}
	b := 0.0
	for i := 0; i < passes; i++ {
		t0 := time.Now()
		if err := f(); err != nil {
			return 0, err
		}
		if d := time.Since(t0).Seconds(); i == 0 || d < b {
			b = d
		}
	}
	return b, nil
}

func run(dir, wlPath string, threads, passes int, checkPath, only string) error {
	raw, err := os.ReadFile(wlPath)
	if err != nil {
		return err
	}
	var w Workload
	if err := json.Unmarshal(raw, &w); err != nil {
		return fmt.Errorf("%s: %w", wlPath, err)
	}
	torch.SetNumThreads(threads)
	m, err := model.Load(dir, model.LoadOptions{})
	if err != nil {
		return err
	}
	defer m.Close()
	res := map[string]any{"threads": torch.NumThreads()}
	want := func(name string) bool { return only == "" || only == name }
	switch only {
	case "", "prefill", "greedy", "sampled", "fwd_bwd":
	default:
		return fmt.Errorf("-only %q: want prefill, greedy, sampled or fwd_bwd", only)
	}
	if want("prefill") {
		if res["prefill_s"], err = best(passes, func() error { return prefill(m, &w) }); err != nil {
			return fmt.Errorf("prefill: %w", err)
		}
		res["prefill_tokens"] = len(w.Prefill)
	}
	var n int
	if want("greedy") {
		if res["greedy_b1_s"], err = best(passes, func() (e error) { n, e = greedyB1(m, &w); return e }); err != nil {
			return fmt.Errorf("greedy: %w", err)
		}
		res["greedy_b1_tokens"] = n
	}
	if want("sampled") {
		if res["sampled_s"], err = best(passes, func() (e error) { n, e = sampled(m, &w); return e }); err != nil {
			return fmt.Errorf("sampled: %w", err)
		}
		res["sampled_tokens"] = n
	}
	if want("fwd_bwd") {
		if err := model.SetRequiresGrad(m, true); err != nil {
			return err
		}
		if res["fwd_bwd_s"], err = best(passes, func() error { return fwdBwd(m, &w) }); err != nil {
			return fmt.Errorf("fwd+bwd: %w", err)
		}
	}
	if checkPath != "" {
		if err := writeCheck(m, &w, checkPath); err != nil {
			return fmt.Errorf("check: %w", err)
		}
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

// writeCheck writes the outputs both sides must agree on.
func writeCheck(m model.CausalLM, w *Workload, path string) error {
	var c struct {
		PrefillLogits []float32 `json:"prefill_logits"`
		GreedyIDs     []int     `json:"greedy_ids"`
		Loss          float64   `json:"loss"`
	}
	var err error
	if c.PrefillLogits, err = prefillLogits(m, w, true); err != nil {
		return err
	}
	if c.GreedyIDs, err = greedyIDs(m, w); err != nil {
		return err
	}
	if c.Loss, err = fwdBwdLoss(m, w); err != nil {
		return err
	}
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
