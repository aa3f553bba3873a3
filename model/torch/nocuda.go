//go:build !evolm_cuda

package torch

import "errors"

// cudaBuilt: the CPU build (no -tags evolm_cuda) links no CUDA library.
const cudaBuilt = false

// CUDAHeaders is where the CUDA build's CUDA headers came from; "" in a CPU
// build.
const CUDAHeaders = ""

var errNoCUDA = errors.New("this evolm was built without CUDA (TORCH_CUDA=1 make build)")

func cudaProbe() (int, string)                  { return 0, errNoCUDA.Error() }
func cudaProps(int) (CUDADeviceInfo, error)     { return CUDADeviceInfo{}, errNoCUDA }
func cudaMemory(int, bool) (MemoryStats, error) { return MemoryStats{}, errNoCUDA }
func cudaMemInfo(int) (int64, int64, error)     { return 0, 0, errNoCUDA }
func cudaSynchronize(int) error                 { return errNoCUDA }
func cudaEmptyCache() error                     { return errNoCUDA }
