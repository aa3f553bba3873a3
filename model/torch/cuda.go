//go:build evolm_cuda

package torch

// #include <stdint.h>
// #include <stdlib.h>
// char* evolm_torch_cuda_probe(int64_t* count);
// char* evolm_torch_cuda_props(int64_t dev, char** name, int64_t* total, int64_t* major, int64_t* minor);
// char* evolm_torch_cuda_memory(int64_t dev, int64_t* allocated, int64_t* peak, int64_t* reserved, int reset);
// char* evolm_torch_cuda_mem_info(int64_t dev, int64_t* free, int64_t* total);
// char* evolm_torch_cuda_synchronize(int64_t dev);
// char* evolm_torch_cuda_empty_cache(void);
import "C"

import (
	"errors"
	"strings"
	"unsafe"
)

// cudaBuilt: this file is built with -tags evolm_cuda, which links
// libtorch_cuda through build/overlay-cuda.json's cuda_cgo.go (TORCH_CUDA=1
// make build; without it the committed cuda_cgo.go makes cuda.cc stop).
const cudaBuilt = cudaOverlay

// CUDAHeaders is where the CUDA build's CUDA headers came from (a toolkit's
// include/, or build/cuda/include from the pinned wheels); "" in a CPU
// build.
const CUDAHeaders = cudaHeaders

func cErrMsg(msg *C.char) error {
	if msg == nil {
		return nil
	}
	defer C.free(unsafe.Pointer(msg))
	// One line: c10's messages may add hints on lines of their own.
	s, _, _ := strings.Cut(strings.TrimSpace(C.GoString(msg)), "\n")
	return errors.New(s)
}

func cudaProbe() (int, string) {
	var n C.int64_t
	if err := cErrMsg(C.evolm_torch_cuda_probe(&n)); err != nil {
		return 0, err.Error()
	}
	return int(n), ""
}

func cudaProps(i int) (CUDADeviceInfo, error) {
	var name *C.char
	var total, major, minor C.int64_t
	if err := cErrMsg(C.evolm_torch_cuda_props(C.int64_t(i), &name, &total, &major, &minor)); err != nil {
		return CUDADeviceInfo{}, err
	}
	defer C.free(unsafe.Pointer(name))
	return CUDADeviceInfo{Index: i, Name: C.GoString(name), Memory: int64(total), Major: int(major), Minor: int(minor)}, nil
}

func cudaMemory(i int, reset bool) (MemoryStats, error) {
	var a, p, r C.int64_t
	rs := C.int(0)
	if reset {
		rs = 1
	}
	if err := cErrMsg(C.evolm_torch_cuda_memory(C.int64_t(i), &a, &p, &r, rs)); err != nil {
		return MemoryStats{}, err
	}
	return MemoryStats{Allocated: int64(a), Peak: int64(p), Reserved: int64(r)}, nil
}

func cudaMemInfo(i int) (int64, int64, error) {
	var f, t C.int64_t
	if err := cErrMsg(C.evolm_torch_cuda_mem_info(C.int64_t(i), &f, &t)); err != nil {
		return 0, 0, err
	}
	return int64(f), int64(t), nil
}

func cudaSynchronize(i int) error { return cErrMsg(C.evolm_torch_cuda_synchronize(C.int64_t(i))) }

func cudaEmptyCache() error { return cErrMsg(C.evolm_torch_cuda_empty_cache()) }
