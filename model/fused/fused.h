// The C API of model/fused's shim (fused.cc): a Llama/Qwen decoder stack's
// forward pass, every layer and the final norm, in one call into libtorch.
// Tensors are gotch handles (torch::Tensor*, gotch's C `tensor`). Every
// function that can fail returns NULL on success or a malloc'd message the
// caller frees; no C++ exception crosses it.
#ifndef EVOLM_FUSED_H
#define EVOLM_FUSED_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// The handles of one decoder layer, in this order (a bias or a Qwen3 q/k
// norm that the architecture lacks is NULL).
enum {
  EVOLM_FUSED_INPUT_NORM = 0,
  EVOLM_FUSED_Q_W, EVOLM_FUSED_Q_B,
  EVOLM_FUSED_K_W, EVOLM_FUSED_K_B,
  EVOLM_FUSED_V_W, EVOLM_FUSED_V_B,
  EVOLM_FUSED_O_W, EVOLM_FUSED_O_B,
  EVOLM_FUSED_Q_NORM, EVOLM_FUSED_K_NORM,
  EVOLM_FUSED_POST_NORM,
  EVOLM_FUSED_GATE, EVOLM_FUSED_UP, EVOLM_FUSED_DOWN,
  EVOLM_FUSED_PER_LAYER
};

typedef struct {
  int64_t layers, heads, kv_heads, head_dim;
  double norm_eps;    // every RMSNorm's epsilon
  double attn_scale;  // the scores' scale
  int sdpa;           // 1: scaled_dot_product_attention over `blocked`; 0: eager over `bias`
  int64_t attn_block; // eager: query block (each against the keys up to its last query); <= 0: none
} evolm_fused_config;

// evolm_fused_forward runs the decoder layers and the final norm on x
// (B, T, C), the embedded tokens:
//   weights   layers * EVOLM_FUSED_PER_LAYER handles, then the final norm's;
//   cos, sin  (B, 1, T, hs) float32 rotary tables for the T positions;
//   bias      (B or 1, 1, T, Tk) float32 additive mask (eager; else NULL);
//   blocked   (B or 1, 1, T, Tk) bool, true where a key is hidden (sdpa; else NULL);
//   mask, branches  eager with bias NULL: the padding mask (B, Tk) and the
//             branches (B, T), CPU integer tensors or NULL, from which the
//             pass writes each row of evolm_fused_attn_bias's mask where a
//             query block needs it instead of reading a stored one (CPU);
//   k_cache, v_cache  per layer (B, nkv, MaxLen, hs) buffers, or both NULL
//             for a pass without a cache; the pass writes positions
//             [past, past+T) and attends over [0, past+T).
// *out receives a new handle to the (B, T, C) hidden states.
char* evolm_fused_forward(const evolm_fused_config* cfg, void** weights, void* x, void* cos,
                          void* sin, void* bias, void* blocked, void* mask, void* branches,
                          void** k_cache, void** v_cache, int64_t past, void** out);

// evolm_fused_attn_bias writes the eager attention's float32 additive mask
// for a pass of T queries after past cached keys (Tk = past + T keys): 0
// where key j is visible to query i and −MaxFloat32 where it is blocked,
// that is where j > past + i, where mask (B, Tk) is 0 (padding), or where
// branches (B, T) tags key j with a branch that is neither 0 (the trunk;
// cached keys are trunk) nor query i's. mask and branches are CPU integer
// tensors or NULL; *out receives a new (B, 1, T, Tk) tensor, (1, 1, T, Tk)
// when both are NULL.
char* evolm_fused_attn_bias(int64_t B, int64_t T, int64_t past, void* mask, void* branches,
                            void** out);

// evolm_fused_select_rows is model.Cache.SelectTo's copy, for the n
// buffers src (B, nkv, ≥ len, hs) in one call: out[i] receives a new
// (nrows, nkv, max_len, hs) buffer whose row r holds positions [0, len) of
// row rows[r] of src[i], and zeros after them.
char* evolm_fused_select_rows(void** src, int64_t n, const int64_t* rows, int64_t nrows, int64_t len,
                              int64_t max_len, void** out);

// evolm_fused_argmax is torch.argmax(x, -1) for x (B, V): the first index
// of each row's maximum (of its first NaN, if any), as a new (B) int64
// tensor in *out. A contiguous CPU float32 x takes a vectorized two-pass
// scan; anything else at::argmax.
char* evolm_fused_argmax(void* x, void** out);

// evolm_fused_argmax_vectorized reports whether this CPU takes the
// vectorized scan (x86-64 with AVX2).
int evolm_fused_argmax_vectorized(void);

// evolm_fused_elementwise_calls reports how many times each of the stack's
// one-pass elementwise kernels ran instead of its ATen ops: [0] RMSNorm's
// tail, [1] the rotary embedding, [2] attention's scale and mask, [3]
// RMSNorm's variance (of the [0] runs, those that summed it themselves).
void evolm_fused_elementwise_calls(int64_t* counts);

// evolm_fused_mask_row_calls reports how many times eager attention wrote
// a query block's mask rows from the padding mask and branches instead of
// reading a stored bias.
int64_t evolm_fused_mask_row_calls(void);

// evolm_fused_grouped_calls reports how many times eager attention ran one
// of its products over the un-repeated keys or values.
int64_t evolm_fused_grouped_calls(void);

// evolm_fused_variance_lanes is the lane count in whose order the shim sums
// RMSNorm's variance as ATen does on this CPU, checked against ATen on
// first use; 0 when it takes ATen's ops for it.
int64_t evolm_fused_variance_lanes(void);

// evolm_fused_parallel_threads runs an empty loop of n rows through the
// shim's parallel regions (grain rows a thread at least) and reports how
// many threads took a part, for tests.
int64_t evolm_fused_parallel_threads(int64_t n, int64_t grain);

// evolm_fused_cpu_vendor reports the x86-64 CPU's vendor: 1 Intel (MKL
// takes its own optimized kernels), 2 AMD, 0 another or another
// architecture.
int evolm_fused_cpu_vendor(void);

// evolm_fused_packed_available reports whether this libtorch has oneDNN's
// linear over packed weights (1) or not (0).
int evolm_fused_packed_available(void);

// evolm_fused_packed_linear is x·wᵀ for float32 CPU x (…, C) and w (V, C),
// grad off, through oneDNN with w reordered once into its blocked layout
// and kept until w changes (its version counter, data pointer or identity).
// With into non-NULL it writes the (…, V) result there (any tensor of that
// many elements, contiguous) and leaves *out alone; else *out receives a new
// handle.
char* evolm_fused_packed_linear(void* x, void* w, void* into, void** out);

// evolm_fused_packed_stats reports how many weights are held packed and
// their bytes.
void evolm_fused_packed_stats(int64_t* n, int64_t* bytes);

// evolm_fused_weights_stamp is a hash of the n tensors' identities, data
// pointers and version counters (which every in-place ATen op, and
// evolm_fused_bump_version, bumps), or 0 when one of them has no version
// counter (an inference tensor) or cannot be read.
uint64_t evolm_fused_weights_stamp(void** ts, int64_t n);

// evolm_fused_bump_version marks t as written (its version counter), for
// writes that bypass ATen's in-place ops.
char* evolm_fused_bump_version(void* t);

// Host block caching (blocks.cc, blocks.go). evolm_blocks_open opens a
// window in which freed CPU tensor blocks of 1 MiB or more are kept for
// reuse; it returns 0 (and opens nothing) when another allocator of higher
// priority owns libtorch's CPU allocations. evolm_blocks_close closes one
// window; the last one frees every cached block.
int evolm_blocks_open(void);
void evolm_blocks_close(void);
void evolm_blocks_stats(int64_t* hits, int64_t* misses, int64_t* live, int64_t* cached, int64_t* peak);

#ifdef __cplusplus
}
#endif

#endif
