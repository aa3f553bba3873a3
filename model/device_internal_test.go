package model

import (
	"fmt"
	"strings"
	"testing"

	"github.com/evolm/evolm/model/torch"
)

// TestDeviceDefaults: what a model on CUDA gets without options, decided
// without a GPU: bfloat16 parameters (float32 on the CPU) and SDPA
// attention (eager on the CPU); an explicit choice stays. The CUDA
// defaults' numerics run on the CPU in llama's tests (TestBFloat16Forward,
// TestHFParitySDPA) and on a GPU in scripts/gpu-check.sh.
func TestDeviceDefaults(t *testing.T) {
	for _, c := range []struct {
		opts LoadOptions
		dev  torch.Device
		dt   torch.DType
		attn string
	}{
		{LoadOptions{}, torch.CPU, torch.Float32, AttnEager},
		{LoadOptions{Device: torch.CUDA(0)}, torch.CUDA(0), torch.BFloat16, AttnSDPA},
		{LoadOptions{Device: torch.CUDA(1), DType: torch.Float32, Attention: AttnEager}, torch.CUDA(1), torch.Float32, AttnEager},
		{LoadOptions{Device: torch.CPU, DType: torch.BFloat16, Attention: AttnSDPA}, torch.CPU, torch.BFloat16, AttnSDPA},
	} {
		dev, dt := c.opts.resolve()
		attn, err := attention(dev, c.opts.Attention)
		if dev != c.dev || dt != c.dt || attn != c.attn || err != nil {
			t.Errorf("%+v: %s %s %s (%v), want %s %s %s", c.opts, torch.DeviceName(dev), torch.DTypeName(dt), attn, err,
				torch.DeviceName(c.dev), torch.DTypeName(c.dt), c.attn)
		}
	}
	if _, err := attention(torch.CPU, "flash"); err == nil {
		t.Error("attention flash: no error")
	}
}

// TestBuildRefusesAMissingDevice: Build fails on a CUDA device this process
// cannot use, in one line naming it, before allocating anything there.
func TestBuildRefusesAMissingDevice(t *testing.T) {
	cfg, err := PresetConfig("qwen3", "tiny", QwenVocabSize)
	if err != nil {
		t.Fatal(err)
	}
	devs, _ := torch.CUDADevices()
	name := fmt.Sprintf("cuda:%d", len(devs))
	m, err := Build(cfg, LoadOptions{Device: torch.CUDA(len(devs))})
	if err == nil {
		m.Close()
		t.Fatalf("Build on %s with %d device(s) visible: no error", name, len(devs))
	}
	if !strings.HasPrefix(err.Error(), "device "+name+": ") || strings.Contains(err.Error(), "\n") {
		t.Errorf("Build on %s: %q, want one line naming the device", name, err)
	}
}
