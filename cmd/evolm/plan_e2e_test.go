//go:build e2e

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/plan"
)

// TestPlanCommand: `evolm plan` on a config whose policy is a tiny
// checkpoint (shape from its config.json) and whose judge is a preset name
// prints every line of the plan, the estimate model/plan makes of the same
// input, whether it fits and the largest micro_batch; LoRA drops the
// reference, a served judge costs nothing on the device.
func TestPlanCommand(t *testing.T) {
	dir := t.TempDir()
	ckpt := filepath.Join(dir, "tiny")
	cfg, err := model.Init(model.InitOptions{Arch: "qwen3", Preset: "tiny", OutDir: ckpt})
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "run.yaml")
	yaml := "roles:\n  policy:\n    model: " + ckpt + "\n    max_tokens: 64\n  rubric_generator:\n    max_tokens: 32\n" +
		"  judge:\n    model: " + filepath.Join(dir, "qwen3-0.6b") + "\n    max_tokens: 16\n    max_batch: 4\n" +
		"stages:\n  run:\n    micro_batch: 2\n"
	if err := os.WriteFile(conf, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "--config", conf, "plan", "--gpu-mem", "80GiB", "--prompt-tokens", "100")
	if err != nil {
		t.Fatalf("evolm plan: %v\n%s", err, out)
	}
	for _, want := range []string{
		"policy: " + filepath.Join(ckpt, "config.json") + " on cpu", "judge: preset qwen3-0.6b",
		"full fine-tuning, fp32", "policy weights", "policy gradients", "policy optimizer state", "policy master weights",
		"policy reference model", "judge  ", "KV cache (generation)", "training micro-batch", "activations per micro-batch",
		"logits chunk", "layer backward", "optimizer step", "activations with checkpointing", "runtime", "total (peak)",
		"device memory 80.00 GiB: fits; largest micro_batch that fits: ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("plan output lacks %q:\n%s", want, out)
		}
	}
	// The same estimate as the package's, for the input the config implies:
	// trained sequences of max(100 + 64, 100 + 32) tokens, generated ones up
	// to 100 + 2·64 (back-translation reads an answer), 64 generation rows,
	// judge rows 4 reading question, answer and rubric and writing 16.
	judge, _ := model.PresetConfig("qwen3", "qwen3-0.6b", model.QwenVocabSize)
	js := plan.ShapeOf(judge)
	in := plan.Input{Policy: plan.ShapeOf(cfg), ParamBytes: 4, Beta: 0.001, Judge: &js, JudgeBytes: 4,
		GenRows: 64, GenTokens: 100 + 2*64, JudgeRows: 4, JudgeTok: 100 + 64 + 32 + 16, MicroBatch: 2, SeqLen: 100 + 64}
	p := plan.Estimate(in).Check(80 << 30)
	if want := fmt.Sprintf("  %-34s %12s\n", "total (peak)", plan.GiB(p.Total)); !strings.Contains(out, want) {
		t.Errorf("plan output lacks %q (model/plan's estimate):\n%s", want, out)
	}
	if m := regexp.MustCompile(`largest micro_batch that fits: (\d+)`).FindStringSubmatch(out); m == nil || m[1] == "0" {
		t.Errorf("no positive largest micro_batch:\n%s", out)
	}

	out, err = run(t, "--config", conf, "plan", "--gpu-mem", "1MiB", "--lora-rank", "8", "--judge-backend", "openai", "--judge-endpoints", "http://127.0.0.1:1/v1")
	if err != nil {
		t.Fatalf("evolm plan --lora-rank 8: %v\n%s", err, out)
	}
	for _, want := range []string{"LoRA rank 8", "policy LoRA adapters", "the base with adapters off", "judge: served (openai)",
		"not on this device", "does NOT fit; largest micro_batch that fits: 0"} {
		if !strings.Contains(out, want) {
			t.Errorf("LoRA plan output lacks %q:\n%s", want, out)
		}
	}
	if m := regexp.MustCompile(`policy reference model\s+(\S+ GiB)`).FindStringSubmatch(out); m == nil || m[1] != "0.00 GiB" {
		t.Errorf("LoRA plan keeps a reference model:\n%s", out)
	}
}
