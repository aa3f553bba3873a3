//go:build e2e

package sft_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/evolm/evolm/internal/testutil"
)

// TestSFTEndToEnd runs `evolm sft` on a tiny checkpoint: a run killed
// after a step and rerun resumes from its checkpoint and equals an
// uninterrupted one (steps rows and final weights, bit for bit), the output loads in HF transformers, packing
// gives the padded loss, and LoRA writes a PEFT adapter.
func TestSFTEndToEnd(t *testing.T) {
	tmp := t.TempDir()
	bin := testutil.BuildEvolm(t, tmp)
	model := filepath.Join(tmp, "init")
	evolm(t, bin, "model", "init", "--arch", "qwen3", "--preset", "tiny", "--seed", "3", "--out", model)
	var data bytes.Buffer
	for i := range 10 {
		fmt.Fprintf(&data, `{"messages": [{"role": "user", "content": "What comes after %d?"}, {"role": "assistant", "content": "%d"}]}`+"\n", i, i+1)
	}
	for i := range 4 {
		fmt.Fprintf(&data, `{"prompt": "Count: %d,", "completion": " %d"}`+"\n", i, i+1)
	}
	input := filepath.Join(tmp, "data.jsonl")
	if err := os.WriteFile(input, data.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	sft := func(dir string, extra ...string) []float64 {
		args := append([]string{"sft", "--run-dir", dir, "--progress", "off", "--log-level", "warn", "--policy-model", model,
			"--input", input, "--batch-size", "4", "--micro-batch", "2", "--lr", "1e-3", "--checkpoint-every", "2", "--seed", "1"}, extra...)
		evolm(t, bin, args...)
		return losses(t, dir)
	}
	whole := sft(filepath.Join(tmp, "whole"), "--steps", "4")
	// Killed (SIGKILL) after its third step, past the checkpoint of step 2.
	kill := exec.Command(bin, "sft", "--run-dir", filepath.Join(tmp, "resumed"), "--progress", "off", "--log-level", "warn",
		"--policy-model", model, "--input", input, "--batch-size", "4", "--micro-batch", "2", "--lr", "1e-3",
		"--checkpoint-every", "2", "--seed", "1", "--steps", "4")
	kill.Env = append(os.Environ(), "EVOLM_FAILPOINT=sft-step@3")
	if out, err := kill.CombinedOutput(); err == nil {
		t.Fatalf("the failpoint did not kill the run:\n%s", out)
	}
	resumed := sft(filepath.Join(tmp, "resumed"), "--steps", "4")
	if len(whole) != 4 || fmt.Sprint(whole) != fmt.Sprint(resumed) {
		t.Errorf("losses: uninterrupted %v, resumed %v", whole, resumed)
	}
	if whole[3] >= whole[0] {
		t.Errorf("loss did not fall over 4 steps at lr 1e-3: %v", whole)
	}
	a, _ := os.ReadFile(filepath.Join(tmp, "whole", "model", "model.safetensors"))
	b, _ := os.ReadFile(filepath.Join(tmp, "resumed", "model", "model.safetensors"))
	if len(a) == 0 || !bytes.Equal(a, b) {
		t.Errorf("final weights: uninterrupted %d bytes, resumed %d bytes, equal %v", len(a), len(b), bytes.Equal(a, b))
	}
	testutil.RunPython(t, "hf_load_checkpoint.py", filepath.Join(tmp, "whole", "model"))

	packed := sft(filepath.Join(tmp, "packed"), "--steps", "1", "--packing", "--max-length", "64")
	if math.Abs(packed[0]-whole[0]) > 1e-5*whole[0] {
		t.Errorf("step 0 loss: packed %v, padded %v", packed[0], whole[0])
	}
	sft(filepath.Join(tmp, "lora"), "--steps", "1", "--lora-rank", "4")
	if _, err := os.Stat(filepath.Join(tmp, "lora", "model", "adapter_config.json")); err != nil {
		t.Errorf("LoRA output: %v", err)
	}
	// Bad input fails naming the file and line, and writes no model.
	bad := filepath.Join(tmp, "bad.jsonl")
	_ = os.WriteFile(bad, []byte(`{"messages": [{"role": "user", "content": "no answer"}]}`+"\n"), 0o644)
	cmd := exec.Command(bin, "sft", "--run-dir", filepath.Join(tmp, "bad"), "--progress", "off", "--policy-model", model, "--input", bad)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "no assistant turn") {
		t.Errorf("bad input: err %v, output:\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(tmp, "bad", "model")); err == nil {
		t.Error("a failed run wrote a model")
	}
}

func evolm(t *testing.T, bin string, args ...string) {
	t.Helper()
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("evolm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// losses reads the steps table's sft rows in step order (pyarrow).
func losses(t *testing.T, dir string) []float64 {
	t.Helper()
	script := filepath.Join(t.TempDir(), "losses.py")
	_ = os.WriteFile(script, []byte(`import sys, glob, json, pyarrow.parquet as pq
rows = [r for f in glob.glob(sys.argv[1] + "/steps/**/*.parquet", recursive=True) for r in pq.read_table(f).to_pylist()]
print(json.dumps([r["loss"] for r in sorted(rows, key=lambda r: r["step"])]))
`), 0o644)
	var out []float64
	if err := json.Unmarshal(testutil.RunPython(t, script, dir), &out); err != nil {
		t.Fatal(err)
	}
	return out
}
