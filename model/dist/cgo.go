package dist

// The flags committed here only make the shim fail with a clear message. The
// real ones (libtorch's and Gloo's include paths, the C++ ABI, NCCL or not)
// depend on the machine: scripts/gotch-overlay.sh writes them to
// build/_overlay/dist_cgo.go and build/overlay.json swaps that file in for
// this one, as it does for gotch's own flags.

// #cgo CXXFLAGS: -DEVOLM_DIST_NO_OVERLAY
import "C"
