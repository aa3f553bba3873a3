package torch

// #include <stdint.h>
// #include <stdlib.h>
// int64_t evolm_torch_cuda_runtime(void);
// int64_t evolm_torch_cudnn_version(void);
// char* evolm_torch_seed(int64_t seed, int cuda);
// char* evolm_torch_device(void* x, int* type, int* index, char** other);
// char* evolm_torch_to_meta(void* x, void** out);
import "C"

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"
)

// CUDA is touched only through this file and cuda.go. A binary built with
// TORCH_CUDA=1 links libtorch_cuda but initializes nothing of CUDA until a
// role asks for a CUDA device (CheckDevice): every CPU path of that binary,
// ManualSeed included, runs as in the CPU build, on a machine with no GPU
// and no driver as well. The first CUDA device asked for makes CheckDevice
// count the devices, which initializes the CUDA runtime (and so loads the
// driver, libcuda), and from then on ManualSeed seeds the CUDA generators
// too, the last seed given first (as torch.manual_seed's queued CUDA seed).

// CUDABuilt reports whether this binary links libtorch's CUDA libraries (a
// TORCH_CUDA=1 build): whether libtorch_cuda registered ATen's CUDA hooks,
// read without initializing CUDA.
func CUDABuilt() bool { return cudaBuilt && CUDARuntimeVersion() != "" }

// CUDARuntimeVersion is the CUDA runtime version of the libtorch_cuda this
// process loaded ("12.1"), or "" when none registered ATen's CUDA hooks. It
// initializes nothing. A CPU build may report one: the torch wheel's
// libtorch_cpu loads libtorch_cuda itself when it finds its nvfuser
// library beside it, but a CPU build refuses CUDA devices all the same
// (CheckDevice), having no NCCL and no allocator statistics.
func CUDARuntimeVersion() string {
	v := int64(C.evolm_torch_cuda_runtime())
	if v <= 0 {
		return ""
	}
	return fmt.Sprintf("%d.%d", v/1000, v%1000/10)
}

// CuDNNVersion is the cuDNN version libtorch was compiled against
// ("8.9.2"), or "" without cuDNN or CUDA.
func CuDNNVersion() string {
	v := int64(C.evolm_torch_cudnn_version())
	if v <= 0 {
		return ""
	}
	return fmt.Sprintf("%d.%d.%d", v/1000, v%1000/100, v%100)
}

var (
	cudaInUse atomic.Bool // a CUDA device passed CheckDevice
	seedMu    sync.Mutex
	lastSeed  struct {
		v   int64
		set bool
	}
)

// CUDAInUse reports whether a CUDA device has been asked for (and found) in
// this process: whether CUDA was initialized by evolm.
func CUDAInUse() bool { return cudaInUse.Load() }

// ManualSeed seeds libtorch's default CPU generator and, once a CUDA device
// is in use (CheckDevice), every CUDA device's, like torch.manual_seed. A
// seed given before the first CUDA device is seeded into CUDA's generators
// when that device is asked for.
func ManualSeed(seed int64) {
	seedMu.Lock()
	defer seedMu.Unlock()
	lastSeed.v, lastSeed.set = seed, true
	if err := cSeed(seed, cudaInUse.Load()); err != nil {
		// The CPU generator cannot fail; a CUDA device that vanished
		// fails its next op with the driver's error.
		fmt.Fprintf(os.Stderr, "evolm: torch manual seed: %v\n", err)
	}
}

func cSeed(seed int64, cuda bool) error {
	c := C.int(0)
	if cuda {
		c = 1
	}
	if msg := C.evolm_torch_seed(C.int64_t(seed), c); msg != nil {
		defer C.free(unsafe.Pointer(msg))
		return errors.New(C.GoString(msg))
	}
	return nil
}

// CheckDevice returns an error naming d when this process cannot put
// tensors on it: a CUDA device in a binary built without CUDA, with no
// device visible (the reason: no driver, a driver too old), or with an
// index past the visible devices. It is where evolm first asks for CUDA:
// model.Build and dist.Init call it before touching the device, so a role
// configured for cuda on a machine without one fails with one line, not a
// libtorch trace. The CPU always passes, without touching CUDA.
func CheckDevice(d Device) error {
	if !IsCUDA(d) {
		return nil
	}
	name := DeviceName(d)
	if !CUDABuilt() {
		return fmt.Errorf("device %s: this evolm was built without CUDA (build it with TORCH_CUDA=1 make build; evolm version shows the build)", name)
	}
	n, why := cudaProbe()
	if n == 0 {
		return fmt.Errorf("device %s: no CUDA device is visible%s", name, visibleNote(why))
	}
	if d.Value >= n {
		return fmt.Errorf("device %s: only %d CUDA device(s) are visible (cuda:0 to cuda:%d)%s", name, n, n-1, visibleNote(""))
	}
	if !cudaInUse.Swap(true) {
		seedMu.Lock()
		defer seedMu.Unlock()
		if lastSeed.set {
			if err := cSeed(lastSeed.v, true); err != nil {
				return fmt.Errorf("device %s: seeding its generator: %w", name, err)
			}
		}
	}
	return nil
}

// visibleNote is the reason no device is visible, with
// CUDA_VISIBLE_DEVICES when it is set.
func visibleNote(why string) string {
	note := ""
	if why != "" {
		note = ": " + why
	}
	if v, ok := os.LookupEnv("CUDA_VISIBLE_DEVICES"); ok {
		note += fmt.Sprintf(" (CUDA_VISIBLE_DEVICES=%q)", v)
	}
	return note
}

// DeviceName is d as ParseDevice reads it: "cpu" or "cuda:N".
func DeviceName(d Device) string {
	if IsCUDA(d) {
		return fmt.Sprintf("cuda:%d", d.Value)
	}
	return "cpu"
}

// CUDADeviceInfo describes a visible CUDA device.
type CUDADeviceInfo struct {
	Index        int
	Name         string
	Memory       int64 // bytes
	Major, Minor int   // compute capability
}

// CUDADevices lists the visible CUDA devices, counting them as CheckDevice
// does (which initializes the CUDA runtime); with none it returns the
// reason as the error. In a CPU build it returns no device and no error.
func CUDADevices() ([]CUDADeviceInfo, error) {
	if !CUDABuilt() {
		return nil, nil
	}
	n, why := cudaProbe()
	if n == 0 {
		return nil, fmt.Errorf("no CUDA device is visible%s", visibleNote(why))
	}
	out := make([]CUDADeviceInfo, n)
	for i := range out {
		info, err := cudaProps(i)
		if err != nil {
			return out[:i], fmt.Errorf("cuda:%d: %w", i, err)
		}
		out[i] = info
	}
	return out, nil
}

// MemoryStats are the CUDA caching allocator's bytes on one device.
type MemoryStats struct {
	Allocated int64 // in tensors now (torch.cuda.memory_allocated)
	Peak      int64 // the most in tensors since the last reset (torch.cuda.max_memory_allocated)
	Reserved  int64 // held from the driver (torch.cuda.memory_reserved)
}

// CUDAMemory reads device d's allocator statistics and, with resetPeak,
// then resets its peak (torch.cuda.reset_peak_memory_stats). d must have
// passed CheckDevice.
func CUDAMemory(d Device, resetPeak bool) (MemoryStats, error) {
	if err := checkInUse(d); err != nil {
		return MemoryStats{}, err
	}
	return cudaMemory(d.Value, resetPeak)
}

// Synchronize waits for the work queued on d (torch.cuda.synchronize);
// nothing on the CPU.
func Synchronize(d Device) error {
	if !IsCUDA(d) {
		return nil
	}
	if err := checkInUse(d); err != nil {
		return err
	}
	return cudaSynchronize(d.Value)
}

// EmptyCache returns the CUDA allocator's idle blocks to the driver
// (torch.cuda.empty_cache); nothing before CUDA is in use.
func EmptyCache() error {
	if !cudaInUse.Load() {
		return nil
	}
	return cudaEmptyCache()
}

func checkInUse(d Device) error {
	if !IsCUDA(d) {
		return fmt.Errorf("device %s: not a CUDA device", DeviceName(d))
	}
	if !cudaInUse.Load() {
		return fmt.Errorf("device %s: not in use (torch.CheckDevice first)", DeviceName(d))
	}
	return nil
}

// OverlayPatches lists what scripts/gotch-overlay.sh changed in gotch for
// this build: the module copy, the cgo flags, and the two patched files.
func OverlayPatches() []string { return slices.Clone(overlayPatches) }

// deviceOf is x's device through the shim: the CPU, a CUDA device, or an
// error naming another (meta): gotch's Device exits the process there.
func deviceOf(x *Tensor) (Device, error) {
	var typ, idx C.int
	var other *C.char
	if msg := C.evolm_torch_device(Handle(x), &typ, &idx, &other); msg != nil {
		defer C.free(unsafe.Pointer(msg))
		return CPU, fmt.Errorf("torch Device: %s", C.GoString(msg))
	}
	switch typ {
	case 0:
		return CPU, nil
	case 1:
		return CUDA(int(idx)), nil
	}
	defer C.free(unsafe.Pointer(other))
	return CPU, fmt.Errorf("torch Device: the tensor is on %s; evolm runs on cpu and cuda", C.GoString(other))
}

// ToMeta is a tensor of x's shape, dtype and strides on the meta device,
// which holds no data: libtorch's ops on meta tensors compute only their
// results' shapes and dtypes, and a shim's device checks (is_cpu) take
// their non-CPU branch. For tests of code that chooses a path by device,
// on a machine without the device; DeviceOf reports such a tensor as an
// error, and reading one fails.
func (s *Scope) ToMeta(x *Tensor) *Tensor {
	if !s.ok("ToMeta", x) {
		return nil
	}
	var out unsafe.Pointer
	if msg := C.evolm_torch_to_meta(Handle(x), &out); msg != nil {
		defer C.free(unsafe.Pointer(msg))
		s.Fail(fmt.Errorf("torch ToMeta: %s", C.GoString(msg)))
		return nil
	}
	return s.AdoptHandle("ToMeta", out)
}

// CUDAMemInfo is the free and total memory of CUDA device d as the driver
// reports them (cudaMemGetInfo, torch.cuda.mem_get_info); d must have passed
// CheckDevice.
func CUDAMemInfo(d Device) (free, total int64, err error) {
	if err := checkInUse(d); err != nil {
		return 0, 0, err
	}
	return cudaMemInfo(d.Value)
}
