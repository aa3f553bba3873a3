// Package torch is evolm's thin layer over gotch (libtorch 2.1.0). Everything
// in model/ touches libtorch through it, never through gotch directly, because
// gotch has sharp edges this layer wraps:
//
//   - Ownership. Every tensor is created through a Scope, which records it and
//     drops it on Close unless the caller took it with Keep (or MoveTo another
//     scope). Kept tensors are owned by the caller and freed with Drop. The GC
//     and gotch's finalizers are never relied on: each gotch Tensor carries
//     about 100 KB of Go padding and a C handle.
//   - Counting. Live reports tensors created through this package minus those
//     dropped through it; tests assert it returns to its baseline.
//   - Errors. Scope ops never call gotch's Must* forms (they log.Fatal). The
//     first failing op records a sticky error on the scope (and its parents);
//     later ops on it return nil and do nothing, so math reads as straight-line
//     code with one Err check at the end.
//   - Threads. libtorch keeps the last error and the grad mode per OS thread, so
//     a Scope locks its goroutine to its OS thread until Close, and SetGrad
//     locks it until the returned restore function runs. A Scope belongs to the
//     goroutine that created it. A goroutine's first call into libtorch also
//     keeps it on that OS thread until it exits, so that libtorch's OpenMP
//     runtime keeps one worker pool per goroutine, not one per thread Go
//     happened to use (see claimThread).
//   - Missing wrappers (manual seed, thread count) are reached through a tiny
//     cgo shim over gotch's own exported C symbols.
//
// Defaults: CPU and float32. On CUDA, parameters are bfloat16 (ParamDType) and
// numerically sensitive math (norms, softmax, RoPE) is done in float32 by the
// model code. CUDA is initialized only when a CUDA device is first asked for
// (CheckDevice, device.go), so a binary built with TORCH_CUDA=1 runs every
// CPU path as the CPU build does, on a machine without a GPU too.
//
// The CUDA build (-tags evolm_cuda) adds cuda.go over cuda.cc: why no
// device is visible, device properties, the caching allocator's statistics
// (CUDAMemory: torch.cuda.max_memory_allocated), free memory (CUDAMemInfo),
// Synchronize and EmptyCache. Their refusals without a device are tested
// here (TestDeviceCheck, in make test's CUDA subset too); the calls that
// reach a GPU have never run: scripts/gpu-check.sh makes them on one.
package torch

import (
	"fmt"
	"strings"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"
)

// Tensor is gotch's tensor; the alias lets callers hold tensors without
// importing gotch. Create and free them only through this package.
type Tensor = ts.Tensor

// DType is a libtorch scalar type.
type DType = gotch.DType

// Device is a libtorch device.
type Device = gotch.Device

// The dtypes evolm uses.
const (
	Float32  DType = gotch.Float
	Float64  DType = gotch.Double
	BFloat16 DType = gotch.BFloat16
	Float16  DType = gotch.Half
	Int64    DType = gotch.Int64
	Int32    DType = gotch.Int
	Uint8    DType = gotch.Uint8
	Int8     DType = gotch.Int8
	Int16    DType = gotch.Int16
	Bool     DType = gotch.Bool
)

// CPU is the host device, the default everywhere.
var CPU = gotch.CPU

// CUDA returns CUDA device i.
func CUDA(i int) Device { return gotch.CudaBuilder(uint(i)) }

// ParseDevice parses "cpu", "cuda" or "cuda:N".
func ParseDevice(s string) (Device, error) {
	switch {
	case s == "" || s == "cpu":
		return CPU, nil
	case s == "cuda":
		return CUDA(0), nil
	case strings.HasPrefix(s, "cuda:"):
		var i int
		if _, err := fmt.Sscanf(s, "cuda:%d", &i); err != nil || i < 0 {
			return CPU, fmt.Errorf("device %q: want cpu, cuda or cuda:N", s)
		}
		return CUDA(i), nil
	}
	return CPU, fmt.Errorf("device %q: want cpu, cuda or cuda:N", s)
}

// IsCUDA reports whether d is a CUDA device.
func IsCUDA(d Device) bool { return d.IsCuda() }

// ParamDType is the parameter dtype for a device: bfloat16 on CUDA, float32 on
// CPU (CPU bf16 matmuls are slow and imprecise in libtorch 2.1).
func ParamDType(d Device) DType {
	if d.IsCuda() {
		return BFloat16
	}
	return Float32
}

var dtypeNames = map[DType]string{
	Float32: "float32", Float64: "float64", BFloat16: "bfloat16", Float16: "float16",
	Int64: "int64", Int32: "int32", Int16: "int16", Int8: "int8", Uint8: "uint8", Bool: "bool",
}

// DTypeName is the PyTorch name of a dtype ("float32", "bfloat16" …), as HF
// config.json writes torch_dtype.
func DTypeName(d DType) string {
	if n, ok := dtypeNames[d]; ok {
		return n
	}
	return fmt.Sprintf("dtype(%d)", int(d))
}

// ParseDType parses a PyTorch dtype name; "float", "half", "fp32", "bf16" and
// "fp16" are accepted too.
func ParseDType(s string) (DType, error) {
	switch strings.TrimPrefix(strings.ToLower(s), "torch.") {
	case "float32", "float", "fp32":
		return Float32, nil
	case "bfloat16", "bf16":
		return BFloat16, nil
	case "float16", "half", "fp16":
		return Float16, nil
	case "float64", "double":
		return Float64, nil
	case "int64", "long":
		return Int64, nil
	case "int32", "int":
		return Int32, nil
	case "bool":
		return Bool, nil
	}
	return Float32, fmt.Errorf("dtype %q: want float32, bfloat16 or float16", s)
}

// ElemSize is the size in bytes of one element of d.
func ElemSize(d DType) int { return int(d.Size()) }

// SetNumThreads sets libtorch's intra-op thread count (torch.set_num_threads).
func SetNumThreads(n int) {
	if n > 0 {
		cSetNumThreads(n)
	}
}

// NumThreads is libtorch's intra-op thread count.
func NumThreads() int { return cNumThreads() }

// torchErr returns libtorch's pending error for this thread, if any, without
// gotch's Go stack trace (which is noise in an error chain).
func torchErr(op string) error {
	if err := ts.TorchErr(); err != nil {
		return cleanErr(op, err)
	}
	return nil
}

// cleanErr wraps a gotch error as "torch OP: message", cutting gotch's Go stack
// trace and libtorch's C++ backtrace.
func cleanErr(op string, err error) error {
	msg := err.Error()
	if i := strings.Index(msg, "\ngoroutine "); i >= 0 {
		msg = msg[:i]
	}
	msg = strings.TrimPrefix(msg, "Libtorch API Error: ")
	// libtorch appends its C++ stack: "Exception raised from …" or, for an
	// allocation that failed (c10::alloc_cpu), "frame #0: …" lines.
	for _, tail := range []string{"\nException raised from", "\nframe #"} {
		if i := strings.Index(msg, tail); i >= 0 {
			msg = msg[:i]
		}
	}
	return fmt.Errorf("torch %s: %s", op, strings.TrimSpace(msg))
}
