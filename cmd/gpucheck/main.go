// Command gpucheck is the evolm half of scripts/gpu-check.sh: each
// subcommand runs one check's engine side on a device and prints one JSON
// object (large arrays go to files), which scripts/gpu_check.py compares
// with transformers and PyTorch on the same device.
//
//	gpucheck logits      -model DIR -device cuda -dtype bfloat16 -in rows.json -out DIR
//	gpucheck generate    -model DIR -device cuda -in rows.json -new 32
//	gpucheck decode      -model DIR -device cuda -dtype bfloat16 -batch 8 -prompt 128 -new 128
//	gpucheck batch       -model DIR -device cuda -out batch.json
//	gpucheck grpo        -model DIR -device cuda -dtype bfloat16 -batch batch.json
//	gpucheck memory      -preset qwen3-0.6b -device cuda -lora-rank 16 -seq 1024 -micro 2
//	gpucheck collectives -device cuda -world 2
//
// A device it cannot use fails at once, in one line (torch.CheckDevice).
// The script builds it as bin/evolm is built (TORCH_CUDA=1: -tags
// evolm_cuda and build/overlay-cuda.json).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"

	"github.com/evolm/evolm/model"
	_ "github.com/evolm/evolm/model/llama"
	"github.com/evolm/evolm/model/torch"
)

// common are the flags every subcommand takes.
type common struct {
	model   string
	device  string
	dtype   string
	threads int
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.model, "model", "", "HF checkpoint directory")
	fs.StringVar(&c.device, "device", "cpu", "cpu, cuda or cuda:N")
	fs.StringVar(&c.dtype, "dtype", "float32", "parameter dtype: float32 or bfloat16")
	fs.IntVar(&c.threads, "threads", 0, "libtorch intra-op threads (0: libtorch's default)")
}

// dev parses -device and checks this process can use it.
func (c *common) dev() (torch.Device, error) {
	d, err := torch.ParseDevice(c.device)
	if err != nil {
		return d, err
	}
	return d, torch.CheckDevice(d)
}

// load loads -model on -device in -dtype.
func (c *common) load() (model.CausalLM, torch.Device, error) {
	d, err := c.dev()
	if err != nil {
		return nil, d, err
	}
	dt, err := torch.ParseDType(c.dtype)
	if err != nil {
		return nil, d, err
	}
	if c.threads > 0 {
		torch.SetNumThreads(c.threads)
	}
	m, err := model.Load(c.model, model.LoadOptions{Device: d, DType: dt})
	return m, d, err
}

// commands maps a subcommand to its flags' registration, which returns
// the function that runs it.
var commands = map[string]func(fs *flag.FlagSet, c *common) func() (any, error){
	"logits":      logitsCmd,
	"generate":    generateCmd,
	"decode":      decodeCmd,
	"batch":       batchCmd,
	"grpo":        grpoCmd,
	"memory":      memoryCmd,
	"collectives": collectivesCmd,
}

func main() {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(os.Args) < 2 || commands[os.Args[1]] == nil {
		fmt.Fprintf(os.Stderr, "usage: gpucheck %s [flags]\n", strings.Join(names, "|"))
		os.Exit(2)
	}
	fs := flag.NewFlagSet("gpucheck "+os.Args[1], flag.ExitOnError)
	var c common
	c.register(fs)
	run := commands[os.Args[1]](fs, &c)
	if err := fs.Parse(os.Args[2:]); err != nil {
		os.Exit(2)
	}
	out, err := run()
	if err != nil {
		fmt.Fprintf(os.Stderr, "gpucheck %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintf(os.Stderr, "gpucheck %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

// readRows reads {"rows": [[id, …], …]}.
func readRows(path string) ([][]int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var in struct{ Rows [][]int }
	if err := json.Unmarshal(b, &in); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(in.Rows) == 0 {
		return nil, fmt.Errorf("%s: no rows", path)
	}
	for i, r := range in.Rows {
		if len(r) < 2 {
			return nil, fmt.Errorf("%s: row %d has %d tokens, want at least 2", path, i, len(r))
		}
	}
	return in.Rows, nil
}

// writeF32 writes v as little-endian float32 (numpy.fromfile's "<f4").
func writeF32(path string, v []float32) error {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		u := math.Float32bits(x)
		b[4*i], b[4*i+1], b[4*i+2], b[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
	}
	return os.WriteFile(path, b, 0o644)
}
