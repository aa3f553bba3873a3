package torch

// The flags committed here only make the shim (device.cc) fail with a clear
// message. The real ones (libtorch's include paths and C++ ABI) depend on
// the machine: scripts/gotch-overlay.sh writes them to
// build/_overlay/torch_cgo.go, with the list of its patches to gotch, and
// build/overlay.json swaps that file in for this one, as it does for
// model/fused, model/dist and gotch's own flags.

// #cgo CXXFLAGS: -DEVOLM_TORCH_NO_OVERLAY
import "C"

// overlayPatches is what scripts/gotch-overlay.sh changed in gotch for this
// build; none without the overlay (which device.cc refuses to build).
var overlayPatches []string
