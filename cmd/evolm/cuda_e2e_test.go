//go:build e2e

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/model/dist"
	"github.com/evolm/evolm/model/torch"
)

// TestCUDABinaryOnCPU runs the binary as `make build` or, in make test's
// CUDA subset (-tags evolm_cuda), `make build-cuda` builds it, on whatever
// devices this machine has: `evolm version` reports the build (CUDA and
// NCCL compiled in or not, the devices seen); its CPU paths (a checkpoint
// made, a rollout on the CPU) touch CUDA no more than loading libtorch does
// (the dynamic loader's lookups of the driver, libcuda.so.1, counted with
// LD_DEBUG=libs: libtorch's own libraries look once or twice as they load,
// the CUDA runtime again when evolm asks it for devices); and asking for a
// CUDA device this machine lacks fails in one line naming it.
func TestCUDABinaryOnCPU(t *testing.T) {
	bin := evolmBin(t)
	dir := t.TempDir()
	run := func(ldDebug bool, args ...string) (out string, lookups int, err error) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Dir = testutil.Root(t)
		cmd.Env = os.Environ()
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if ldDebug {
			cmd.Env = append(cmd.Env, "LD_DEBUG=libs")
		}
		b, err := cmd.Output()
		var lines []string
		for _, l := range strings.Split(stderr.String(), "\n") {
			if strings.Contains(l, "find library=libcuda.so.1") {
				lookups++
			}
			if l != "" && !ldLine(l) {
				lines = append(lines, l)
			}
		}
		return string(b) + strings.Join(lines, "\n"), lookups, err
	}

	out, _, err := run(false, "version", "--json")
	if err != nil {
		t.Fatalf("evolm version --json: %v\n%s", err, out)
	}
	var rep versionReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("evolm version --json: %v\n%s", err, out)
	}
	t.Logf("evolm version: build %s, CUDA %q, NCCL %q, devices %v (%s), libtorch %s", rep.Build, rep.CUDA, rep.NCCL, rep.Devices, rep.NoDevice, rep.Libtorch)
	cudaBuild := torch.CUDABuilt() // this test binary is built as the evolm binary is
	if want := map[bool]string{true: "cuda", false: "cpu"}[cudaBuild]; rep.Build != want {
		t.Errorf("version: build %q, want %q", rep.Build, want)
	}
	if cudaBuild != (rep.CUDA != "") || dist.NCCLBuilt() != (rep.NCCL != "") {
		t.Errorf("version: CUDA %q, NCCL %q in a build with CUDA %v, NCCL %v", rep.CUDA, rep.NCCL, cudaBuild, dist.NCCLBuilt())
	}
	if cudaBuild && len(rep.Devices) == 0 && rep.NoDevice == "" {
		t.Errorf("version: no CUDA device and no reason")
	}
	if !strings.HasPrefix(rep.Libtorch, torch.WantVersion) || len(rep.Overlay) != 4 {
		t.Errorf("version: libtorch %q, overlay %v", rep.Libtorch, rep.Overlay)
	}
	text, _, err := run(false, "--version")
	if err != nil || !strings.Contains(text, "gotch overlay (scripts/gotch-overlay.sh):") || !strings.Contains(text, "build: "+rep.Build) {
		t.Errorf("evolm --version: %v\n%s", err, text)
	}

	_, atLoad, err := run(true, "--help")
	if err != nil {
		t.Fatalf("evolm --help: %v", err)
	}
	ckpt := filepath.Join(dir, "policy")
	runDir := filepath.Join(dir, "run")
	steps := [][]string{
		{"model", "init", "--arch", "qwen3", "--preset", "tiny", "--seed", "1", "--out", ckpt},
		{"--run-dir", runDir, "--progress", "off", "dedup", "--input", "datasets/sample/tulu3_sample.parquet", "--dataset", "sample"},
		{"--run-dir", runDir, "--progress", "off", "--policy-backend", "torch", "--policy-model", ckpt, "--policy-device", "cpu",
			"--policy-max-tokens", "4", "rollout", "--n", "1"},
	}
	for _, args := range steps {
		out, n, err := run(true, args...)
		if err != nil {
			t.Fatalf("evolm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		if n != atLoad {
			t.Errorf("evolm %s looked the CUDA driver up %d times, loading alone %d: a CPU path touched CUDA", strings.Join(args, " "), n, atLoad)
		}
	}

	missing := fmt.Sprintf("cuda:%d", len(rep.Devices))
	out, n, err := run(true, "--run-dir", runDir, "--fresh", "--progress", "off", "--policy-backend", "torch", "--policy-model", ckpt,
		"--policy-device", missing, "--policy-max-tokens", "4", "rollout", "--n", "1")
	if err == nil {
		t.Fatalf("rollout on %s with %d device(s) visible succeeded", missing, len(rep.Devices))
	}
	var last string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasPrefix(l, "evolm: ") {
			last = l
		}
	}
	if !strings.Contains(last, "device "+missing+": ") || strings.Contains(out, "Exception raised from") || strings.Contains(out, "frame #") {
		t.Errorf("rollout on %s: want one line naming the device, got:\n%s", missing, out)
	}
	t.Logf("rollout on %s: %s", missing, last)
	if cudaBuild && len(rep.Devices) == 0 && n <= atLoad {
		t.Errorf("rollout on %s did not ask the CUDA runtime (%d driver lookups, %d at load): the lookup count shows nothing", missing, n, atLoad)
	}
}

// ldLine reports whether l is the dynamic loader's (LD_DEBUG) output:
// "   12345:\t…".
func ldLine(l string) bool {
	s := strings.TrimLeft(l, " ")
	i := strings.IndexByte(s, ':')
	if i <= 0 {
		return false
	}
	for _, c := range s[:i] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
