package fused

// The flags committed here only make the shim fail with a clear message. The
// real ones (libtorch's include paths and C++ ABI) depend on the machine:
// scripts/gotch-overlay.sh writes them to build/_overlay/fused_cgo.go and
// build/overlay.json swaps that file in for this one, as it does for
// model/dist and for gotch's own flags.

// #cgo CXXFLAGS: -DEVOLM_FUSED_NO_OVERLAY
import "C"
