//go:build evolm_cuda

package torch

// The CUDA build's flags (libtorch_cuda, c10_cuda and CUDA's headers)
// depend on the machine: scripts/gotch-overlay.sh, run with TORCH_CUDA=1,
// writes them to build/_overlay/torch_cuda_cgo.go and
// build/overlay-cuda.json swaps that file in for this one. Built with
// -tags evolm_cuda but without that overlay, cuda.cc stops with a message.

// #cgo CXXFLAGS: -DEVOLM_TORCH_NO_CUDA_OVERLAY
import "C"

// cudaOverlay: false here, true in the overlay's file.
const cudaOverlay = false

// cudaHeaders is where the CUDA headers came from (the overlay's file).
const cudaHeaders = ""
