//go:build evolm_cuda

package dist

// The CUDA build's flags for ProcessGroupNCCL (CUDA's and NCCL's headers,
// libtorch_cuda) depend on the machine: scripts/gotch-overlay.sh, run with
// TORCH_CUDA=1, writes them to build/_overlay/dist_nccl_cgo.go and
// build/overlay-cuda.json swaps that file in for this one. Built with
// -tags evolm_cuda but without that overlay, c10d.cc stops with a message.

// #cgo CXXFLAGS: -DEVOLM_DIST_NO_CUDA_OVERLAY
import "C"
