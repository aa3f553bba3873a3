// Package fused is the engine's C++ shim over ATen (fused.cc) for the hot
// paths whose cost is per-op overhead rather than arithmetic
// (docs/engine.md, "The fused decoder stack"):
//
//   - Forward runs a Llama/Qwen decoder stack's forward pass, every layer
//     and the final norm, in one call into libtorch;
//   - AttnBias writes eager attention's additive mask in one pass, where
//     the tensor ops that build it take eight (libtorch 2.1's CPU
//     masked_fill is a scalar loop);
//   - Argmax is torch.argmax over a vocabulary row, vectorized, where
//     libtorch 2.1's CPU kernel is a scalar loop;
//   - PackedLinear is x·wᵀ through oneDNN over w packed once into its
//     blocked layout, for the lm_head: F.linear (MKL) re-packs the whole
//     weight on every call, which over the few rows of a decode step costs
//     more than the product;
//   - KeepBlocks (blocks.cc) runs a function with libtorch's CPU tensor
//     blocks of 1 MiB or more cached for reuse, where glibc maps and
//     unmaps each afresh, for a training step's repeated micro-batches.
//
// # Packed weights
//
// A packed copy is kept per weight until the weight changes, which the shim
// tells from the weight's TensorImpl (held weakly, so a new tensor at a
// freed one's address is not mistaken for it), its data pointer and its
// version counter. Every in-place ATen op bumps that counter: optimizer
// steps, copy_, LoRA merges. Writes that bypass ATen bump it themselves with
// BumpVersion (model.LoadWeights' raw copy) or in C++ (model/dist's
// collectives); model/llama's TestPackedHeadFollowsWeights and model/dist's
// TestCollectives fail on a stale copy. The copy takes as much memory as the
// weight (PackedStats); copies of freed weights go when the next weight is
// packed.
//
// # Why
//
// model/llama's forward pass is ~95 ATen ops a layer. From Go each op is a
// cgo call (two with gotch's error check), a gotch handle with a finalizer,
// a malloc'd result slot and a scope entry, and a decode step of a small
// model at batch 1 is mostly such ops. The shim makes the same ATen calls
// from C++, where an op costs only libtorch's own dispatch.
//
// # One model definition
//
// fused.cc is model/llama's forward.go and model.go transcribed op for op:
// each C++ function names the Go function it mirrors and calls the same
// operators, with the same arguments, in the same order, so the hidden
// states are the same bits. Three short runs of per-element float32 ops are
// one pass each instead (each op's ATen overhead and one-thread grain cost
// more than its arithmetic; docs/engine.md, "The fused decoder stack"):
// RMSNorm's tail after the variance (add, rsqrt, mul, mul), the rotary step
// (neg, cat, mul, mul, add) and eager attention's scale and mask (mul_,
// add_). Each element gets the
// ops' float operations in their order, one rounding each and no FMA, so
// the bits are the ops'. RMSNorm's variance is summed in ATen's own order
// (cascade_sum's, over the vector width of ATen's kernels on this CPU),
// which the shim checks against ATen on first use and otherwise leaves to
// the ops (VarianceLanes). They take float32 CPU tensors (ElementwiseCalls
// counts them), other dtypes and devices the ops. Grouped-query attention's
// two products per query block read the keys and values of the KV cache in
// place, where the Go path repeats them to the query heads (repeatKV) first:
// one call of MKL's batched GEMM whose pointers for the query heads of a
// key head all point at it, the call libtorch makes over the copies
// (GroupedCalls counts them; repeating copies the whole KV cache each
// layer and step: docs/engine.md, "Attention"). The one-pass
// kernels, the mask and argmax split their rows over libtorch's intra-op
// threads through the libgomp libtorch loaded (ParallelThreads):
// at::parallel_for compiles to a serial loop in a file built without
// -fopenmp, as fused.cc is.
//
// What takes another device or dtype: every one-pass kernel, the variance
// sum, grouped_bmm (also without MKL, or below 400 multiply-adds) and
// Argmax's scan fall back to ATen's ops; PackedLinear and a mask from Pad
// and Branches refuse anything but the CPU. TestOffCPUTakesTheOps runs the
// stack on meta tensors (no GPU needed) and checks that none of the CPU
// kernels runs and the ops' shapes hold; bfloat16 runs the same fallbacks
// on the CPU with numbers (TestFusedEqualsPlain). CUDA's kernels under
// them are scripts/gpu-check.sh's to check.
//
// model/llama's TestFusedEqualsPlain compares the two paths bit for bit
// (max |Δ| = 0) over prefill and decode steps, GQA and MHA, biases, Qwen3's
// q/k norms, padded batches, eager and SDPA attention, float32 and
// bfloat16; every HF parity test runs through the fused path.
// The rotary tables, the attention mask and the embedding stay in Go (they
// are computed once per pass), and so does everything with grad on: the
// fused path is inference only, and model/llama takes it only when no
// adapter (LoRA) is attached.
//
// # Building
//
// fused.cc compiles against the headers of the libtorch the Makefile
// provisions (the torch wheel's include/), with its C++ ABI; the flags depend
// on the machine, so scripts/gotch-overlay.sh writes them to
// build/_overlay/fused_cgo.go, which build/overlay.json swaps in for cgo.go,
// as for model/dist. It links only what gotch already links.
package fused

// #include <stdlib.h>
// #include "fused.h"
import "C"

import (
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/evolm/evolm/model/torch"
)

// PerLayer is the number of weight slots of one layer in Forward's weights.
const PerLayer = int(C.EVOLM_FUSED_PER_LAYER)

// The slots of one layer's weights, in order; a bias or q/k norm the
// architecture lacks is nil.
const (
	InputNorm = iota
	QWeight
	QBias
	KWeight
	KBias
	VWeight
	VBias
	OWeight
	OBias
	QNorm
	KNorm
	PostNorm
	Gate
	Up
	Down
)

var calls atomic.Int64

// Calls is the number of Forward calls so far, for tests that must know
// the fused path ran.
func Calls() int64 { return calls.Load() }

// ElementwiseCalls is how many times each of Forward's one-pass
// elementwise kernels has run in place of its ATen ops (fused.cc): RMSNorm's
// tail, the rotary embedding, and eager attention's scale and mask. They
// take float32 CPU tensors; other dtypes and devices take the ops. For tests
// that must know the kernels ran.
// variance counts the rms runs that also summed the variance themselves,
// which they do where the shim's order of the sum checked out against
// ATen's on this CPU (fused.cc's variance_lanes).
func ElementwiseCalls() (rms, rope, scaleBias, variance int64) {
	var c [4]C.int64_t
	C.evolm_fused_elementwise_calls(&c[0])
	return int64(c[0]), int64(c[1]), int64(c[2]), int64(c[3])
}

// MaskRowCalls is how many times Forward's eager attention has written a
// query block's mask rows from Mask's Pad and Branches instead of reading a
// stored bias. For tests that must know it ran.
func MaskRowCalls() int64 { return int64(C.evolm_fused_mask_row_calls()) }

// GroupedCalls is how many times Forward's eager attention has run one of
// its products over the un-repeated keys or values, in place of repeating
// them to the query heads first (fused.cc's grouped_bmm; two a query
// block). For tests that must know it ran.
func GroupedCalls() int64 { return int64(C.evolm_fused_grouped_calls()) }

// VarianceLanes is the vector width (8 on AVX2, 16 on AVX-512) in whose
// order the shim sums RMSNorm's variance as libtorch's CPU kernels do,
// which it checks against libtorch on first use; 0 where it takes
// libtorch's ops for the variance instead (another CPU, or a difference).
func VarianceLanes() int64 { return int64(C.evolm_fused_variance_lanes()) }

// ParallelThreads runs an empty loop of n rows through the shim's parallel
// regions (at least grain rows a thread) and reports how many threads took
// a part: libtorch's intra-op threads when n > grain, else 1. For tests.
func ParallelThreads(n, grain int64) int64 {
	return int64(C.evolm_fused_parallel_threads(C.int64_t(n), C.int64_t(grain)))
}

// Config is the stack's shape.
type Config struct {
	Layers, Heads, KVHeads, HeadDim int64
	NormEps                         float64 // every RMSNorm's epsilon
	AttnScale                       float64
	SDPA                            bool // scaled_dot_product_attention over blocked, else eager over bias
	// AttnBlock > 0: eager attention over more queries than this runs in
	// query blocks of AttnBlock, each against the keys up to its last
	// query (model/llama's eagerAttention); the mask must be causal.
	AttnBlock int64
}

// Mask is a pass's attention mask: Bias, the (B or 1, 1, T, Tk) float32
// additive mask (eager attention), or Blocked, the bool mask (SDPA), or,
// for eager attention on the CPU with Bias nil, what AttnBias builds the
// bias from: Pad (B, Tk) and Branches (B, T), integer CPU tensors, either
// or both nil. The shim then writes each row of that bias where a query
// block needs it, once for all its heads, instead of reading it from a
// stored B·T·Tk floats, and adds the same values (the bits are the same).
type Mask struct {
	Bias, Blocked, Pad, Branches *torch.Tensor
}

// Forward runs the decoder layers and the final norm on x (B, T, C), the
// embedded tokens, and returns the hidden states (B, T, C), owned by s.
// weights holds cfg.Layers*PerLayer handles (see the slot constants), then
// the final norm's. cos and sin are the (B, 1, T, hs) float32 rotary tables;
// mask the attention's. k and v are the cache's per-layer (B, nkv, MaxLen,
// hs) buffers, or nil for a pass without a cache; with them the pass writes
// positions [past, past+T) and attends over [0, past+T) (the caller checks
// the capacity and advances the cache). Grad must be off: the ops run
// below autograd's dispatch keys, and the shim refuses otherwise. Errors are
// recorded on s.
func Forward(s *torch.Scope, cfg Config, weights []*torch.Tensor, x, cos, sin *torch.Tensor, mask Mask, k, v []*torch.Tensor, past int64) *torch.Tensor {
	if s.Err() != nil {
		return nil
	}
	calls.Add(1)
	if len(weights) != int(cfg.Layers)*PerLayer+1 {
		s.Fail(fmt.Errorf("fused forward: %d weight slots for %d layers, want %d", len(weights), cfg.Layers, int(cfg.Layers)*PerLayer+1))
		return nil
	}
	if (k == nil) != (v == nil) || (k != nil && (len(k) != int(cfg.Layers) || len(v) != int(cfg.Layers))) {
		s.Fail(errors.New("fused forward: the cache needs a key and a value buffer per layer"))
		return nil
	}
	// Handles are C pointers (torch::Tensor* from new), so Go memory
	// holding them may be passed to C.
	hs := make([]unsafe.Pointer, len(weights)+2*len(k))
	for i, w := range weights {
		hs[i] = torch.Handle(w)
	}
	var kc, vc *unsafe.Pointer
	if k != nil {
		for i := range k {
			hs[len(weights)+i] = torch.Handle(k[i])
			hs[len(weights)+len(k)+i] = torch.Handle(v[i])
		}
		kc, vc = &hs[len(weights)], &hs[len(weights)+len(k)]
	}
	c := C.evolm_fused_config{
		layers: C.int64_t(cfg.Layers), heads: C.int64_t(cfg.Heads), kv_heads: C.int64_t(cfg.KVHeads),
		head_dim: C.int64_t(cfg.HeadDim), norm_eps: C.double(cfg.NormEps), attn_scale: C.double(cfg.AttnScale),
		attn_block: C.int64_t(cfg.AttnBlock),
	}
	if cfg.SDPA {
		c.sdpa = 1
	}
	var out unsafe.Pointer
	msg := C.evolm_fused_forward(&c, &hs[0], torch.Handle(x), torch.Handle(cos), torch.Handle(sin),
		torch.Handle(mask.Bias), torch.Handle(mask.Blocked), torch.Handle(mask.Pad), torch.Handle(mask.Branches),
		kc, vc, C.int64_t(past), &out)
	if msg != nil {
		defer C.free(unsafe.Pointer(msg))
		s.Fail(fmt.Errorf("fused forward: %s", C.GoString(msg)))
		return nil
	}
	return s.AdoptHandle("fused forward", out)
}

// Argmax is torch.argmax(x, -1) for x (B, V): each row's first index of its
// maximum (of its first NaN, if any), (B) int64 owned by s. A contiguous
// CPU float32 x takes the shim's vectorized scan (libtorch 2.1's CPU argmax
// is a scalar loop); anything else at::argmax. TestArgmaxEqualsTorch checks
// the two agree, ties, infinities and NaN included.
func Argmax(s *torch.Scope, x *torch.Tensor) *torch.Tensor {
	if s.Err() != nil {
		return nil
	}
	if x == nil {
		s.Fail(errors.New("argmax: input is nil"))
		return nil
	}
	var out unsafe.Pointer
	if msg := C.evolm_fused_argmax(torch.Handle(x), &out); msg != nil {
		defer C.free(unsafe.Pointer(msg))
		s.Fail(fmt.Errorf("argmax: %s", C.GoString(msg)))
		return nil
	}
	return s.AdoptHandle("argmax", out)
}

// AttnBias is model/llama's eager attention bias for a pass of T queries
// after past cached keys, written by the shim in one pass over its output:
// (B, 1, T, past+T) float32, (1, 1, T, past+T) when mask and branches are
// both nil, 0 where key j is visible to query i and −MaxFloat32 where j >
// past+i, where mask (B, past+T) is 0, or where branches (B, T) tags key j
// with a branch other than 0 (the trunk; cached keys are trunk) and query
// i's. mask and branches must be on the CPU. Owned by s.
func AttnBias(s *torch.Scope, B, T, past int64, mask, branches *torch.Tensor) *torch.Tensor {
	if s.Err() != nil {
		return nil
	}
	var out unsafe.Pointer
	if msg := C.evolm_fused_attn_bias(C.int64_t(B), C.int64_t(T), C.int64_t(past), torch.Handle(mask), torch.Handle(branches), &out); msg != nil {
		defer C.free(unsafe.Pointer(msg))
		s.Fail(fmt.Errorf("fused %s", C.GoString(msg)))
		return nil
	}
	return s.AdoptHandle("attn bias", out)
}

// SelectRows copies positions [0, n) of the rows rows of each buffer in
// src (B, nkv, ≥ n, hs) into a new (len(rows), nkv, maxLen, hs) buffer, with
// zeros after them, owned by s: model.Cache.SelectTo's copy of every
// layer's keys and values in one call, where the tensor ops take five a
// buffer (a row taken for every new row is broadcast, not gathered).
func SelectRows(s *torch.Scope, src []*torch.Tensor, rows []int64, n, maxLen int64) []*torch.Tensor {
	if s.Err() != nil || len(src) == 0 {
		return nil
	}
	hs := make([]unsafe.Pointer, 2*len(src))
	for i, x := range src {
		hs[i] = torch.Handle(x)
	}
	var rp *C.int64_t
	if len(rows) > 0 {
		rp = (*C.int64_t)(unsafe.Pointer(&rows[0]))
	}
	if msg := C.evolm_fused_select_rows(&hs[0], C.int64_t(len(src)), rp, C.int64_t(len(rows)), C.int64_t(n), C.int64_t(maxLen), &hs[len(src)]); msg != nil {
		defer C.free(unsafe.Pointer(msg))
		s.Fail(fmt.Errorf("fused %s", C.GoString(msg)))
		return nil
	}
	out := make([]*torch.Tensor, len(src))
	for i := range out {
		out[i] = s.AdoptHandle("select rows", hs[len(src)+i])
	}
	return out
}

// ArgmaxVectorized reports whether Argmax takes the vectorized scan on this
// CPU (x86-64 with AVX2) for contiguous float32 CPU rows.
func ArgmaxVectorized() bool { return C.evolm_fused_argmax_vectorized() == 1 }

// CPUVendor is the x86-64 CPU's vendor: "intel", "amd", or "" for another
// or another architecture. MKL dispatches its own optimized kernels on
// Intel's only; on AMD's its level-2 BLAS takes generic code paths
// (mkl_blas_def_xsgemv).
func CPUVendor() string { return [...]string{"", "intel", "amd"}[C.evolm_fused_cpu_vendor()] }

// PackedAvailable reports whether this libtorch has oneDNN's linear over
// packed weights, which PackedLinear needs.
func PackedAvailable() bool { return C.evolm_fused_packed_available() == 1 }

// PackedLinear is x·wᵀ for float32 CPU x (…, C) and w (V, C), grad off,
// through oneDNN with w reordered once into its blocked layout and reused
// until w changes: its version counter (bumped by every in-place ATen op,
// and by BumpVersion), its data pointer or its identity. With into not nil
// the (…, V) result is written there (a contiguous tensor of as many
// elements) and PackedLinear returns into; else a new tensor owned by s.
// The packed copy takes as much memory as w. Errors are recorded on s.
func PackedLinear(s *torch.Scope, x, w, into *torch.Tensor) *torch.Tensor {
	if s.Err() != nil {
		return nil
	}
	if x == nil || w == nil {
		s.Fail(errors.New("packed linear: input or weight is nil"))
		return nil
	}
	var out unsafe.Pointer
	if msg := C.evolm_fused_packed_linear(torch.Handle(x), torch.Handle(w), torch.Handle(into), &out); msg != nil {
		defer C.free(unsafe.Pointer(msg))
		s.Fail(fmt.Errorf("packed linear: %s", C.GoString(msg)))
		return nil
	}
	if into != nil {
		return into
	}
	return s.AdoptHandle("packed linear", out)
}

// PackedStats reports how many weights PackedLinear holds packed and how
// many bytes those weights have (their packed copies take about as many).
func PackedStats() (n int, bytes int64) {
	var cn, cb C.int64_t
	C.evolm_fused_packed_stats(&cn, &cb)
	return int(cn), int64(cb)
}

// WeightsStamp is a hash of ts' identities, data and version counters: it
// changes when one of them is replaced, or written by an in-place ATen op
// (an optimizer step, copy_) or by code that calls BumpVersion after a raw
// write. It is 0 when one of them has no version counter (an inference
// tensor), so that a caller keeping state derived from the values (a KV
// cache) keeps none.
func WeightsStamp(ts []*torch.Tensor) uint64 {
	if len(ts) == 0 {
		return 0
	}
	hs := make([]unsafe.Pointer, len(ts))
	for i, t := range ts {
		hs[i] = torch.Handle(t)
	}
	return uint64(C.evolm_fused_weights_stamp(&hs[0], C.int64_t(len(hs))))
}

// BumpVersion marks t as written. Code that writes a tensor's memory
// without an ATen in-place op (a raw copy into its data, a collective)
// calls it, so that PackedLinear repacks the weight.
func BumpVersion(t *torch.Tensor) error {
	if msg := C.evolm_fused_bump_version(torch.Handle(t)); msg != nil {
		defer C.free(unsafe.Pointer(msg))
		return fmt.Errorf("bump version: %s", C.GoString(msg))
	}
	return nil
}
