// model/fused's shim: model/llama's decoder stack (forward.go, model.go),
// op for op, in C++. Each function below is the Go function it names,
// calling the same ATen operators with the same arguments in the same
// order, so the result is the same bits; TestFusedEqualsPlain checks it.
// What it saves is the cost around each op in Go: a cgo call or two, a gotch
// handle, a finalizer and a scope entry, for ~95 ops a layer. Three short
// runs of per-element float32 ops (RMSNorm's tail, the rotary step, the
// scores' scale and mask) are one pass each instead, computing every element
// with the ops' float operations in their order, and RMSNorm's variance is
// summed in ATen's order (see rms, rope and scale_bias_ below), and
// grouped-query attention's products read the KV cache's key and value
// heads in place of copies of them (grouped_bmm), so the bits stay the same.

#ifdef EVOLM_FUSED_NO_OVERLAY
#error "model/fused needs libtorch's headers: run `make torch` and build with GOFLAGS=-overlay=build/overlay.json (source the Makefile's environment)"
#endif

#include "fused.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <c10/util/intrusive_ptr.h>

#include <mutex>
#include <unordered_map>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace {

char* dup(const std::string& s) {
  char* p = static_cast<char*>(std::malloc(s.size() + 1));
  if (p != nullptr) std::memcpy(p, s.c_str(), s.size() + 1);
  return p;
}

// guard runs f and turns whatever it throws into a message (c10::Error
// without its C++ backtrace).
template <typename F>
char* guard(F&& f) {
  try {
    f();
    return nullptr;
  } catch (const c10::Error& e) {
    return dup(e.what_without_backtrace());
  } catch (const std::exception& e) {
    return dup(e.what());
  } catch (...) {
    return dup("unknown C++ exception");
  }
}

// handle is gotch's tensor behind h (an undefined tensor for NULL).
at::Tensor handle(void* h) { return h == nullptr ? at::Tensor() : *static_cast<at::Tensor*>(h); }

// compact is model/torch's Scope.compact: x with a fresh tensor's strides.
at::Tensor compact(const at::Tensor& x) {
  if (x.dim() < 3) return x;
  int64_t want = 1;
  for (int64_t i = x.dim() - 1; i >= 0; i--) {
    if (x.stride(i) != want) return x.contiguous().view(x.sizes());
    want *= x.size(i);
  }
  return x;
}

// linear is Linear.Forward (no adapter).
at::Tensor linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  return at::linear(compact(x), w, b);
}

// parallel_rows runs f(r0, r1) over [0, n) split into one range per
// thread of libtorch's intra-op pool, as at::parallel_for does, when n
// exceeds grain, libtorch runs more than one thread and no parallel region
// is open. at::parallel_for itself is a header template whose region
// (#pragma omp parallel) exists only when the including file is built with
// -fopenmp; this file is built without it, since linking an OpenMP runtime
// of its own would start a second thread pool beside libtorch's, so there
// at::parallel_for runs serially. parallel_rows opens the region the
// pragma compiles to, GOMP_parallel, in the libgomp that libtorch itself
// loaded (found at run time through libtorch's own handle), so its threads
// are the pool's. Without it (another OpenMP runtime) f runs serially.
struct Gomp {
  void (*parallel)(void (*)(void*), void*, unsigned, unsigned) = nullptr;
  int (*num_threads)() = nullptr;
  int (*thread_num)() = nullptr;
};

// libtorch_handle is the handle of the library libtorch's ATen functions
// are in (libtorch_cpu), whose symbols include those of the libgomp and
// MKL it loaded; nullptr if it cannot be opened.
void* libtorch_handle() {
  static void* const h = [] {
    Dl_info info;
    if (dladdr(reinterpret_cast<void*>(&at::get_num_threads), &info) == 0 || info.dli_fname == nullptr) {
      return static_cast<void*>(nullptr);
    }
    return dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
  }();
  return h;
}

const Gomp& gomp() {
  static const Gomp g = [] {
    Gomp g;
    void* torch = libtorch_handle();
    if (torch == nullptr) return g;
    g.parallel = reinterpret_cast<decltype(g.parallel)>(dlsym(torch, "GOMP_parallel"));
    g.num_threads = reinterpret_cast<decltype(g.num_threads)>(dlsym(torch, "omp_get_num_threads"));
    g.thread_num = reinterpret_cast<decltype(g.thread_num)>(dlsym(torch, "omp_get_thread_num"));
    if (g.parallel == nullptr || g.num_threads == nullptr || g.thread_num == nullptr) g = Gomp{};
    return g;
  }();
  return g;
}

template <typename F>
void parallel_rows(int64_t n, int64_t grain, const F& f) {
  const Gomp& g = gomp();
  if (n <= std::max<int64_t>(grain, 1) || g.parallel == nullptr || at::in_parallel_region() ||
      at::get_num_threads() <= 1) {
    f(int64_t(0), n);
    return;
  }
  struct Region {
    const F* f;
    const Gomp* g;
    int64_t n, grain;
  } region{&f, &g, n, grain};
  g.parallel(
      [](void* p) {
        const Region& r = *static_cast<const Region*>(p);
        int64_t threads = std::min<int64_t>(r.g->num_threads(), (r.n + r.grain - 1) / r.grain);
        int64_t chunk = (r.n + threads - 1) / threads, begin = r.g->thread_num() * chunk;
        if (begin < r.n) (*r.f)(begin, std::min(r.n, begin + chunk));
      },
      &region, 0, 0);
}

bool has_avx2() {
#if defined(__x86_64__)
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
#else
  return false;
#endif
}

// Three short runs of RMSNorm.Forward's, rope.apply's and eagerAttention's
// ops are per-element float32 arithmetic: add, rsqrt and two muls after the
// variance; neg, cat, two muls and add for the rotation; mul_ and add_ for
// the scores' scale and mask. Each op pays ATen's cost around it (a
// TensorIterator, an output allocation), which at a decode step's few rows
// is most of its time, and runs on one thread below ATen's grain of 32,768
// elements, which a judge's packed row of a few hundred positions is. The
// kernels below compute each element with the same float operations in the
// same order, one rounding each, with no contraction into FMAs (this file
// is built for x86-64 without -mfma, and the AVX2 loops use mul and add
// intrinsics), so the bits equal the ops'. model/llama's
// TestFusedEqualsPlain checks them against the Go path's ops and that they
// ran (ElementwiseCalls); TestLongPromptMatchesHF does on rows long enough
// to split over threads. Other dtypes, devices and layouts take the ops.

// elementwise_calls counts the kernels' runs (evolm_fused_elementwise_calls).
std::atomic<int64_t> elementwise_calls[4];

// elementwise_grain is the rows of width values one thread takes at least:
// about 4,096 elements, so that a packed row of a few hundred positions
// splits over two threads and a decode step's few rows do not.
int64_t elementwise_grain(int64_t width) { return std::max<int64_t>(1, 4096 / std::max<int64_t>(width, 1)); }

// scale_row is y[i] = w[i] * (x[i] * inv), as x.mul(inv) then w.mul(·).
#if defined(__x86_64__)
__attribute__((target("avx2"))) void scale_row_avx2(const float* __restrict__ x, const float* __restrict__ w,
                                                    float inv, float* __restrict__ y, int64_t n) {
  int64_t i = 0;
  const __m256 vinv = _mm256_set1_ps(inv);
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(w + i), _mm256_mul_ps(_mm256_loadu_ps(x + i), vinv)));
  }
  for (; i < n; i++) {
    const float xi = x[i] * inv;
    y[i] = w[i] * xi;
  }
}
#endif

void scale_row(const float* __restrict__ x, const float* __restrict__ w, float inv, float* __restrict__ y,
               int64_t n) {
#if defined(__x86_64__)
  if (has_avx2()) return scale_row_avx2(x, w, inv, y, n);
#endif
  for (int64_t i = 0; i < n; i++) {
    const float xi = x[i] * inv;
    y[i] = w[i] * xi;
  }
}

// The variance, at::square(x).mean(-1): ATen squares each element, sums
// each row with cascade_sum (SumKernel.cpp: vectorized_inner_sum over
// vectors of W lanes, row_sum's 4 partial sums, multi_row_sum's levels of
// 16), then divides by the width. sum_squares adds the same squares in the
// same order, lane by lane in AVX2 registers, so its sum has the same bits;
// W is the lane count of the kernels ATen dispatches to on this CPU (at::
// get_cpu_capability: 8 for AVX2 and for "NO AVX", 16 for AVX512).
// variance_lanes checks that against ATen itself once, over rows of widths
// that take every branch of the order, and returns 0 (the ops, always) on
// any difference, another capability or a CPU without AVX2.
constexpr int64_t kMaxLanes = 16;

int64_t ceil_log2(int64_t x) { return x <= 2 ? 1 : 64 - __builtin_clzll(static_cast<uint64_t>(x - 1)); }

#if defined(__x86_64__)
// sum_squares is the sum for W = 8·NV lanes, each W-lane vector as NV AVX2
// registers (lanes are independent, so NV 8-lane adds are one W-lane add).
template <int NV>
struct Lanes {
  __m256 r[NV];
};

template <int NV>
__attribute__((target("avx2"), always_inline)) inline void lanes_zero(Lanes<NV>& a) {
  for (int i = 0; i < NV; i++) a.r[i] = _mm256_setzero_ps();
}

template <int NV>
__attribute__((target("avx2"), always_inline)) inline void lanes_add(Lanes<NV>& a, const Lanes<NV>& b) {
  for (int i = 0; i < NV; i++) a.r[i] = _mm256_add_ps(a.r[i], b.r[i]);
}

template <int NV>
__attribute__((target("avx2"), always_inline)) inline void lanes_add_squares(Lanes<NV>& a, const float* p) {
  for (int i = 0; i < NV; i++) {
    const __m256 v = _mm256_loadu_ps(p + 8 * i);
    a.r[i] = _mm256_add_ps(a.r[i], _mm256_mul_ps(v, v));
  }
}

template <int NV>
__attribute__((target("avx2"))) float sum_squares(const float* __restrict__ x, int64_t n) {
  constexpr int64_t W = 8 * NV;
  const int64_t vec_size = n / W, size_ilp = vec_size / 4;
  const int64_t power = std::max<int64_t>(4, ceil_log2(size_ilp) / 4), step = int64_t(1) << power,
                mask = step - 1;
  float sum = 0.0f;
  alignas(32) float lanes[W];
  if (size_ilp < step) {
    // No level fills: multi_row_sum's levels above the first stay zero, and
    // adding them changes no sum of squares (x + 0 = x for x ≥ +0), so the
    // four partial sums are the whole order. A head's or a small model's
    // rows take this path.
    Lanes<NV> p[4];
    for (int k = 0; k < 4; k++) lanes_zero(p[k]);
    for (int64_t i = 0; i < size_ilp; ++i) {
      for (int k = 0; k < 4; k++) lanes_add_squares(p[k], x + (i * 4 + k) * W);
    }
    for (int64_t v = size_ilp * 4; v < vec_size; v++) lanes_add_squares(p[0], x + v * W);
    for (int k = 1; k < 4; k++) lanes_add(p[0], p[k]);
    for (int64_t k = vec_size * W; k < n; k++) {
      const float sq = x[k] * x[k];
      sum += sq;
    }
    for (int r = 0; r < NV; r++) _mm256_store_ps(lanes + 8 * r, p[0].r[r]);
    for (int64_t l = 0; l < W; l++) sum += lanes[l];
    return sum;
  }
  Lanes<NV> acc[4][4];  // [level][partial sum]
  for (int j = 0; j < 4; j++) {
    for (int k = 0; k < 4; k++) lanes_zero(acc[j][k]);
  }
  int64_t i = 0;
  for (; i + step <= size_ilp;) {
    for (int64_t j = 0; j < step; ++j, ++i) {
      for (int k = 0; k < 4; k++) lanes_add_squares(acc[0][k], x + (i * 4 + k) * W);
    }
    for (int64_t j = 1; j < 4; ++j) {
      for (int k = 0; k < 4; k++) {
        lanes_add(acc[j][k], acc[j - 1][k]);
        lanes_zero(acc[j - 1][k]);
      }
      if ((i & (mask << (j * power))) != 0) break;
    }
  }
  for (; i < size_ilp; ++i) {
    for (int k = 0; k < 4; k++) lanes_add_squares(acc[0][k], x + (i * 4 + k) * W);
  }
  for (int j = 1; j < 4; ++j) {
    for (int k = 0; k < 4; k++) lanes_add(acc[0][k], acc[j][k]);
  }
  for (int64_t v = size_ilp * 4; v < vec_size; v++) lanes_add_squares(acc[0][0], x + v * W);
  for (int k = 1; k < 4; k++) lanes_add(acc[0][0], acc[0][k]);
  for (int64_t k = vec_size * W; k < n; k++) {
    const float sq = x[k] * x[k];
    sum += sq;
  }
  for (int r = 0; r < NV; r++) _mm256_store_ps(lanes + 8 * r, acc[0][0].r[r]);
  for (int64_t l = 0; l < W; l++) sum += lanes[l];
  return sum;
}
#endif

// sum_of_squares is sum_squares over W lanes (variance_lanes).
float sum_of_squares(const float* __restrict__ x, int64_t n, int64_t W) {
#if defined(__x86_64__)
  return W == 16 ? sum_squares<2>(x, n) : sum_squares<1>(x, n);
#else
  return 0;  // unreachable: variance_lanes is 0 off x86-64
#endif
}

int64_t variance_lanes() {
  static const int64_t lanes = [] {
    const std::string cap = at::get_cpu_capability();
    const int64_t W = cap == "AVX512" ? 16 : (cap == "AVX2" || cap == "NO AVX") ? 8 : 0;
    if (W == 0 || !has_avx2()) return int64_t(0);
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    at::NoGradGuard no_grad;
    for (int64_t n : {8, 16, 17, 31, 64, 100, 128, 256, 520, 1024, 2048, 2056, 4096, 5120, 8192, 16384, 20000}) {
      if (n < W) continue;
      const int64_t rows = 3;
      std::vector<float> v(rows * n);
      uint64_t r = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(n);
      for (float& f : v) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        f = (static_cast<float>(r >> 40) / 16777216.0f - 0.5f) * (1.0f + static_cast<float>(n % 7));
      }
      at::Tensor x = at::from_blob(v.data(), {rows, n}, at::kFloat);
      at::Tensor want = at::square(x).mean({-1}, true).contiguous();
      for (int64_t i = 0; i < rows; i++) {
        const float got = sum_of_squares(v.data() + i * n, n, W) / static_cast<float>(n);
        if (std::memcmp(&got, want.data_ptr<float>() + i, sizeof(float)) != 0) return int64_t(0);
      }
    }
    return W;
  }();
  return lanes;
}

// rms_ops is RMSNorm.Forward.
at::Tensor rms_ops(const at::Tensor& x, const at::Tensor& w, double eps) {
  at::Tensor x32 = x.to(at::kFloat);
  at::Tensor variance = at::square(x32).mean({-1}, true);
  at::Tensor y = x32.mul(at::rsqrt(variance.add(eps)));
  return w.mul(y.to(x.scalar_type()));
}

// rms is rms_ops in one pass per row: the variance as sum_of_squares(x) /
// width when variance_lanes vouches for it (else by the ops), then w * (x *
// rsqrt(variance + eps)) per element.
at::Tensor rms(const at::Tensor& x, const at::Tensor& w, double eps) {
  if (!x.is_cpu() || x.scalar_type() != at::kFloat || w.scalar_type() != at::kFloat ||
      !x.is_contiguous() || !w.is_contiguous() || w.dim() != 1 || x.dim() < 1 ||
      w.size(0) != x.size(-1) || x.numel() == 0) {
    return rms_ops(x, w, eps);
  }
  elementwise_calls[0]++;
  const int64_t width = x.size(-1), rows = x.numel() / width;
  // (At 32,768 elements and more in one row ATen may split its sum over
  // threads, another order; no model is that wide.)
  const int64_t lanes = width >= kMaxLanes && width < 32768 ? variance_lanes() : 0;
  at::Tensor variance;
  if (lanes == 0) {
    variance = at::square(x).mean({-1}, true).contiguous();
  } else {
    elementwise_calls[3]++;
  }
  at::Tensor y = at::empty_like(x, at::MemoryFormat::Contiguous);
  const float* xp = x.data_ptr<float>();
  const float* wp = w.data_ptr<float>();
  const float* vp = variance.defined() ? variance.data_ptr<float>() : nullptr;
  float* yp = y.data_ptr<float>();
  const float e = static_cast<float>(eps);  // add(Tensor, Scalar) computes in float32
  const float fw = static_cast<float>(width);  // mean divides the sum by the width as a float32
  parallel_rows(rows, elementwise_grain(width), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; r++) {
      const float var = vp != nullptr ? vp[r] : sum_of_squares(xp + r * width, width, lanes) / fw;
      const float inv = 1.0f / std::sqrt(var + e);  // rsqrt is 1 / sqrt in ATen, exact
      scale_row(xp + r * width, wp, inv, yp + r * width, width);
    }
  });
  return y;
}

// rotate_row is y = x*c + rot(x)*s, rot(x) = (−x[half:], x[:half]), as
// x.mul(cos).add(cat(x2.neg(), x1).mul(sin)).
#if defined(__x86_64__)
__attribute__((target("avx2"))) void rotate_row_avx2(const float* __restrict__ x, const float* __restrict__ c,
                                                     const float* __restrict__ s, float* __restrict__ y,
                                                     int64_t half) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t i = 0; i < half; i += 8) {
    __m256 lo = _mm256_loadu_ps(x + i), hi = _mm256_loadu_ps(x + half + i);
    __m256 a = _mm256_mul_ps(lo, _mm256_loadu_ps(c + i));
    __m256 d = _mm256_mul_ps(_mm256_xor_ps(hi, sign), _mm256_loadu_ps(s + i));
    _mm256_storeu_ps(y + i, _mm256_add_ps(a, d));
    a = _mm256_mul_ps(hi, _mm256_loadu_ps(c + half + i));
    d = _mm256_mul_ps(lo, _mm256_loadu_ps(s + half + i));
    _mm256_storeu_ps(y + half + i, _mm256_add_ps(a, d));
  }
}
#endif

void rotate_row(const float* __restrict__ x, const float* __restrict__ c, const float* __restrict__ s,
                float* __restrict__ y, int64_t half) {
#if defined(__x86_64__)
  if (half % 8 == 0 && has_avx2()) return rotate_row_avx2(x, c, s, y, half);
#endif
  for (int64_t i = 0; i < 2 * half; i++) {
    const float rot = i < half ? -x[i + half] : x[i - half];
    const float a = x[i] * c[i];
    const float d = rot * s[i];
    y[i] = a + d;
  }
}

// rope_ops is rope.apply.
at::Tensor rope_ops(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, int64_t hs) {
  at::Tensor x32 = x.to(at::kFloat);
  at::Tensor x1 = x32.narrow(-1, 0, hs / 2);
  at::Tensor x2 = x32.narrow(-1, hs / 2, hs / 2);
  at::Tensor rot = at::cat({x2.neg(), x1}, -1);
  at::Tensor y = x32.mul(cos).add(rot.mul(sin));
  return y.to(x.scalar_type());
}

// rope is rope_ops over x of shape (B, H, T, hs), any strides with the last
// dimension contiguous, and tables of shape (B or 1, 1, T, hs). The result
// has x's strides, as the ops' has (their first mul allocates it like x,
// and the add after it like that).
at::Tensor rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, int64_t hs) {
  if (!x.is_cpu() || x.scalar_type() != at::kFloat || cos.scalar_type() != at::kFloat ||
      sin.scalar_type() != at::kFloat || x.dim() != 4 || cos.dim() != 4 || x.size(3) != hs ||
      hs % 2 != 0 || x.stride(3) != 1 || !x.is_non_overlapping_and_dense() ||
      cos.sizes() != sin.sizes() || cos.strides() != sin.strides() || cos.size(1) != 1 ||
      (cos.size(0) != 1 && cos.size(0) != x.size(0)) || cos.size(2) != x.size(2) ||
      cos.size(3) != hs || cos.stride(3) != 1 || x.numel() == 0) {
    return rope_ops(x, cos, sin, hs);
  }
  elementwise_calls[1]++;
  at::Tensor y = at::empty_like(x);  // x's strides (MemoryFormat::Preserve)
  const int64_t H = x.size(1), T = x.size(2);
  const float* xp = x.data_ptr<float>();
  const float* cp = cos.data_ptr<float>();
  const float* sp = sin.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const int64_t xb = x.stride(0), xh = x.stride(1), xt = x.stride(2);
  const int64_t yb = y.stride(0), yh = y.stride(1), yt = y.stride(2);
  const int64_t cb = cos.size(0) == 1 ? 0 : cos.stride(0), ct = cos.stride(2);
  parallel_rows(x.numel() / hs, elementwise_grain(hs), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; r++) {
      const int64_t b = r / (H * T), h = (r / T) % H, t = r % T;
      rotate_row(xp + b * xb + h * xh + t * xt, cp + b * cb + t * ct, sp + b * cb + t * ct,
                 yp + b * yb + h * yh + t * yt, hs / 2);
    }
  });
  return y;
}

// scale_mask_row is a[j] = a[j]*scale + m[j], as att.mul_(scale) then
// att.add_(bias).
#if defined(__x86_64__)
__attribute__((target("avx2"))) void scale_mask_row_avx2(float* __restrict__ a, const float* __restrict__ m,
                                                         float scale, int64_t n) {
  int64_t j = 0;
  const __m256 vs = _mm256_set1_ps(scale);
  for (; j + 8 <= n; j += 8) {
    _mm256_storeu_ps(a + j, _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(a + j), vs), _mm256_loadu_ps(m + j)));
  }
  for (; j < n; j++) {
    const float x = a[j] * scale;
    a[j] = x + m[j];
  }
}
#endif

void scale_mask_row(float* __restrict__ a, const float* __restrict__ m, float scale, int64_t n) {
#if defined(__x86_64__)
  if (has_avx2()) return scale_mask_row_avx2(a, m, scale, n);
#endif
  for (int64_t j = 0; j < n; j++) {
    const float x = a[j] * scale;
    a[j] = x + m[j];
  }
}

// MaskSpec is eager attention's additive mask for a pass of T queries
// after past cached keys (Tk = past + T keys), as model/llama's mask
// defines it: 0 where key j is visible to query i and −MaxFloat32 where it
// is blocked, that is where j > past + i, where the padding mask (B, Tk) is
// 0, or where branches (B, T) tags key j with a branch that is neither 0
// (the trunk; cached keys are trunk) nor query i's. row writes any row's
// leading keys, so that the mask need not be stored: bias stores it whole
// (evolm_fused_attn_bias), and scale_mask_ writes each row where a query
// block needs it. Both write the same values, one row at a time.
struct MaskSpec {
  int64_t B, T, past, Tk;
  at::Tensor pad, br;      // contiguous CPU int64, or undefined
  const int64_t* pm = nullptr;
  const int64_t* bm = nullptr;
  std::vector<int64_t> first;  // first[b]: row b's first key of a branch (Tk if none)
  mutable at::Tensor stored_;  // stored()
  static constexpr float lowest = -3.4028234663852886e38f;  // −MaxFloat32

  MaskSpec(int64_t B, int64_t T, int64_t past, const at::Tensor& mask, const at::Tensor& branches)
      : B(B), T(T), past(past), Tk(past + T) {
    TORCH_CHECK(B >= 0 && T >= 0 && past >= 0, "attn mask: bad arguments");
    if (mask.defined()) {
      pad = mask.to(at::kLong).contiguous();
      TORCH_CHECK(pad.device().is_cpu() && pad.dim() == 2 && pad.size(0) == B && pad.size(1) == Tk,
                  "attn bias: the mask must be a CPU (", B, ", ", Tk, ") tensor, got ", pad.sizes());
      pm = pad.data_ptr<int64_t>();
    }
    if (branches.defined()) {
      br = branches.to(at::kLong).contiguous();
      TORCH_CHECK(br.device().is_cpu() && br.dim() == 2 && br.size(0) == B && br.size(1) == T,
                  "attn bias: branches must be a CPU (", B, ", ", T, ") tensor, got ", br.sizes());
      bm = br.data_ptr<int64_t>();
    }
    // The trunk before a row's first branch key needs no look.
    first.assign(B, Tk);
    for (int64_t b = 0; bm != nullptr && b < B; b++) {
      for (int64_t i = 0; i < T; i++) {
        if (bm[b * T + i] != 0) {
          first[b] = past + i;
          break;
        }
      }
    }
  }

  // rows is the mask's batch: one row for the whole batch when nothing
  // differs by row, as the ops broadcast it.
  int64_t rows() const { return (pm != nullptr || bm != nullptr) ? B : 1; }

  // row writes keys [0, n) (n ≤ Tk) of query i's row of batch row b.
  void row(float* o, int64_t n, int64_t b, int64_t i) const {
    const int64_t vis = std::min(past + i + 1, n);  // keys [0, vis) are not in the future
    std::fill(o, o + vis, 0.0f);
    std::fill(o + vis, o + n, lowest);
    if (bm != nullptr) {  // a key of a branch other than the trunk and the query's own
      const int64_t qb = bm[b * T + i];
      const int64_t* kb = bm + b * T - past;  // kb[j] for j >= past; the cache is trunk
      for (int64_t j = first[b]; j < vis; j++) o[j] = (kb[j] != 0 && kb[j] != qb) ? lowest : o[j];
    }
    if (pm != nullptr) {  // padding keys
      const int64_t* kp = pm + b * Tk;
      for (int64_t j = 0; j < vis; j++) o[j] = kp[j] == 0 ? lowest : o[j];
    }
  }

  // stored is bias(), built on first use and kept: what scale_mask_ reads
  // for scores it does not take (another dtype), block after block and
  // layer after layer of one pass.
  const at::Tensor& stored() const {
    if (!stored_.defined()) stored_ = bias();
    return stored_;
  }

  // bias is the whole (rows, 1, T, Tk) float32 mask.
  at::Tensor bias() const {
    at::Tensor bias = at::empty({rows(), 1, T, Tk}, at::kFloat);
    float* o = bias.data_ptr<float>();
    parallel_rows(rows() * T, std::max<int64_t>(1, 16384 / std::max<int64_t>(Tk, 1)), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; r++) row(o + r * Tk, Tk, r / T, r % T);
    });
    return bias;
  }
};

// scale_bias_ is eagerAttention's att.mul_(scale), att.to(float32) and
// att.add_(bias) on the scores att (B, nh, n, keys), with bias (B or 1, 1,
// n, keys): for contiguous float32 scores, one pass (mul_ takes the scale
// as a float32).
void scale_bias_(at::Tensor& att, double scale, const at::Tensor& bias) {
  if (!att.is_cpu() || att.scalar_type() != at::kFloat || !att.is_contiguous() || att.dim() != 4 ||
      bias.scalar_type() != at::kFloat || bias.dim() != 4 || bias.size(1) != 1 ||
      (bias.size(0) != 1 && bias.size(0) != att.size(0)) || bias.size(2) != att.size(2) ||
      bias.size(3) != att.size(3) || bias.stride(3) != 1 || att.numel() == 0) {
    att.mul_(scale);
    att = att.to(at::kFloat);
    att.add_(bias);
    return;
  }
  elementwise_calls[2]++;
  const int64_t H = att.size(1), n = att.size(2), keys = att.size(3);
  const int64_t bb = bias.size(0) == 1 ? 0 : bias.stride(0), bi = bias.stride(2);
  const float s = static_cast<float>(scale);
  float* ap = att.data_ptr<float>();
  const float* bp = bias.data_ptr<float>();
  parallel_rows(att.numel() / keys, elementwise_grain(keys), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; r++) {
      scale_mask_row(ap + r * keys, bp + (r / (H * n)) * bb + (r % n) * bi, s, keys);
    }
  });
}

// mask_row_calls counts scale_mask_'s runs (evolm_fused_mask_row_calls).
std::atomic<int64_t> mask_row_calls{0};

// scale_mask_ is scale_bias_ over the rows [q0, q0 + n) of m's mask, its
// leading keys (att (B, nh, n, keys) is a query block's scores): each mask
// row is written where the block needs it, once for every head, instead of
// read from a stored bias of B · T · Tk floats. The same kernel adds the
// same values, so the bits are scale_bias_'s over m.bias(). Scores it does
// not take go through the stored bias (m.stored(), built once a pass).
void scale_mask_(at::Tensor& att, double scale, const MaskSpec& m, int64_t q0) {
  if (!att.is_cpu() || att.scalar_type() != at::kFloat || !att.is_contiguous() || att.dim() != 4 ||
      att.size(0) != m.B || att.size(3) > m.Tk || q0 < 0 || q0 + att.size(2) > m.T || att.numel() == 0) {
    scale_bias_(att, scale, m.stored().narrow(2, q0, att.size(2)).narrow(3, 0, att.size(3)));
    return;
  }
  elementwise_calls[2]++;
  mask_row_calls++;
  const int64_t H = att.size(1), n = att.size(2), keys = att.size(3);
  const float s = static_cast<float>(scale);
  float* ap = att.data_ptr<float>();
  // A mask row that does not differ by batch row (rows() == 1) is written
  // once for every batch row's heads.
  const int64_t rows = m.rows(), per = m.B / rows;  // batch rows per mask row
  parallel_rows(rows * n, elementwise_grain(keys * H * per), [&](int64_t r0, int64_t r1) {
    std::vector<float> mask(keys);
    for (int64_t r = r0; r < r1; r++) {
      const int64_t mb = r / n, i = r % n;
      m.row(mask.data(), keys, mb, q0 + i);
      for (int64_t b = mb * per; b < (mb + 1) * per; b++) {
        for (int64_t h = 0; h < H; h++) scale_mask_row(ap + ((b * H + h) * n + i) * keys, mask.data(), s, keys);
      }
    }
  });
}

// grouped_calls counts grouped_bmm's runs (evolm_fused_grouped_calls).
std::atomic<int64_t> grouped_calls{0};

// repeat_kv is repeatKV.
at::Tensor repeat_kv(const at::Tensor& x, int64_t groups) {
  if (groups == 1) return x;
  int64_t B = x.size(0), nkv = x.size(1), Tk = x.size(2), hs = x.size(3);
  return x.unsqueeze(2).expand({B, nkv, groups, Tk, hs}).reshape({B, nkv * groups, Tk, hs});
}

// MKL's batched GEMM, cblas_sgemm_batch, from libtorch's own copy of MKL,
// or nullptr.
using SgemmBatch = void (*)(int layout, const int* transa, const int* transb, const int* m, const int* n,
                            const int* k, const float* alpha, const float** a, const int* lda,
                            const float** b, const int* ldb, const float* beta, float** c, const int* ldc,
                            int group_count, const int* group_size);

SgemmBatch sgemm_batch() {
  static const SgemmBatch f = [] {
    void* torch = libtorch_handle();
    return torch == nullptr ? SgemmBatch(nullptr) : reinterpret_cast<SgemmBatch>(dlsym(torch, "cblas_sgemm_batch"));
  }();
  return f;
}

// grouped_bmm is at::matmul(a, repeat_kv(m, groups)), or with transpose
// at::matmul(a, repeat_kv(m, groups).transpose(2, 3)), for float32 a (B,
// nh, n, d) on the CPU and m (B, nkv, r, c), without repeat_kv's copy:
// libtorch 2.1 runs such a product (bmm over B·nh matrices of at least 400
// multiply-adds each, the items contiguous or transposed) as one call of
// MKL's batched GEMM with an array of pointers to the matrices
// (baddbmm_with_gemm_, cpublas::gemm_batched, mkl_gemm_batched), and so does
// this, with the same arguments, column-major, except that the pointers of
// the query heads of one key head all point at that key head's matrix in m
// (the KV cache) instead of at copies of it. The same GEMMs run on the same
// values with the same threads, so the bits are the same
// (TestGroupedAttentionEqualsPlain). One difference is left: libtorch's
// matmul first copies a query block whose heads are not evenly strided
// (rope's output keeps the projection's (B, T, nh, hs) layout) to pass it
// with leading dimension hs, where this passes it in place, with nh·hs;
// MKL packs each operand into its own panels before its kernels run, so a
// leading dimension never reaches the arithmetic (the test runs prefill
// blocks, passed this way, and decode steps). It returns an undefined tensor
// where libtorch would run another kernel (below 400 multiply-adds, no
// MKL, another dtype or device), and the caller repeats the keys and
// values as before.
at::Tensor grouped_bmm(const at::Tensor& a, const at::Tensor& m, bool transpose) {
  const int64_t B = a.size(0), nh = a.size(1), n = a.size(2), nkv = m.size(1);
  const int64_t cols = transpose ? m.size(2) : m.size(3), contraction = a.size(3);
  SgemmBatch gemm = sgemm_batch();
  if (gemm == nullptr || !at::hasMKL() || nkv == 0 || nh % nkv != 0 || nh == nkv || !a.is_cpu() ||
      !m.is_cpu() || a.scalar_type() != at::kFloat || m.scalar_type() != at::kFloat || a.stride(3) != 1 ||
      m.stride(3) != 1 || a.stride(2) < contraction || m.stride(2) < m.size(3) ||
      contraction * n * cols < 400 || std::max({B * nh, n, cols, contraction, a.stride(2), m.stride(2)}) > INT32_MAX) {
    return at::Tensor();
  }
  const int64_t groups = nh / nkv;
  at::Tensor out = at::empty({B, nh, n, cols}, a.options());
  grouped_calls++;
  // Column-major: out[b, h]ᵀ (cols × n) = op(m[b, h/groups])ᵀ · a[b, h]ᵀ.
  const int count = static_cast<int>(B * nh);
  const int M = static_cast<int>(cols), N = static_cast<int>(n), K = static_cast<int>(contraction);
  const int lda = static_cast<int>(m.stride(2)), ldb = static_cast<int>(a.stride(2)), ldc = M;
  const int trans_a = transpose ? 112 : 111, trans_b = 111;  // CblasTrans, CblasNoTrans
  const float alpha = 1, beta = 0;
  std::vector<const float*> ap(count), bp(count);
  std::vector<float*> cp(count);
  const float* md = m.data_ptr<float>();
  const float* ad = a.data_ptr<float>();
  float* od = out.data_ptr<float>();
  for (int64_t i = 0; i < count; i++) {
    const int64_t b = i / nh, h = i % nh;
    ap[i] = md + b * m.stride(0) + (h / groups) * m.stride(1);
    bp[i] = ad + b * a.stride(0) + h * a.stride(1);
    cp[i] = od + i * n * cols;
  }
  gemm(102, &trans_a, &trans_b, &M, &N, &K, &alpha, ap.data(), &lda, bp.data(), &ldb, &beta, cp.data(), &ldc,
       1, &count);  // 102: CblasColMajor
  return out;
}

struct Stack {
  const evolm_fused_config* cfg;
  void** w;
  at::Tensor cos, sin, bias, sdpa_bias;
  const MaskSpec* mask;  // eager without a stored bias: the mask, row by row
  void** kc;
  void** vc;
  int64_t past;

  at::Tensor W(int64_t layer, int i) const {
    return handle(w[layer * EVOLM_FUSED_PER_LAYER + i]);
  }

  // attention is Attention.Forward.
  at::Tensor attention(int64_t l, const at::Tensor& x) const {
    int64_t B = x.size(0), T = x.size(1);
    int64_t nh = cfg->heads, nkv = cfg->kv_heads, hs = cfg->head_dim;
    at::Tensor q = linear(x, W(l, EVOLM_FUSED_Q_W), W(l, EVOLM_FUSED_Q_B)).view({B, T, nh, hs});
    at::Tensor k = linear(x, W(l, EVOLM_FUSED_K_W), W(l, EVOLM_FUSED_K_B)).view({B, T, nkv, hs});
    at::Tensor v = linear(x, W(l, EVOLM_FUSED_V_W), W(l, EVOLM_FUSED_V_B)).view({B, T, nkv, hs});
    at::Tensor qn = W(l, EVOLM_FUSED_Q_NORM);
    if (qn.defined()) {
      q = rms(q, qn, cfg->norm_eps);
      k = rms(k, W(l, EVOLM_FUSED_K_NORM), cfg->norm_eps);
    }
    q = rope(q.transpose(1, 2), cos, sin, hs);
    k = rope(k.transpose(1, 2), cos, sin, hs);
    v = v.transpose(1, 2);
    if (kc != nullptr) {  // Cache.Update
      at::Tensor kall = handle(kc[l]), vall = handle(vc[l]);
      kall.narrow(2, past, T).copy_(k);
      vall.narrow(2, past, T).copy_(v);
      k = kall.narrow(2, 0, past + T);
      v = vall.narrow(2, 0, past + T);
    }
    at::Tensor y;
    if (cfg->sdpa) {
      y = at::scaled_dot_product_attention(q, repeat_kv(k, nh / nkv), repeat_kv(v, nh / nkv), sdpa_bias,
                                           0.0, false, cfg->attn_scale);
    } else {
      y = eager(q, k, v, T);
    }
    y = y.transpose(1, 2).reshape({B, T, nh * hs});
    return linear(y, W(l, EVOLM_FUSED_O_W), W(l, EVOLM_FUSED_O_B));
  }

  // eager is eagerAttention: HF's eager attention, over query blocks of
  // attn_block when T exceeds it, each against the keys up to its last
  // query (the later ones are masked for the whole block). k and v are the
  // nkv heads (the KV cache's): the products read them in place
  // (grouped_bmm) where libtorch would run MKL's batched GEMM, and are
  // repeated to the nh query heads otherwise.
  at::Tensor eager(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t T) const {
    // add_mask is scale_bias_ for the block of queries from q0 on.
    auto add_mask = [&](at::Tensor& att, int64_t q0, const at::Tensor& bias) {
      if (mask != nullptr) {
        scale_mask_(att, cfg->attn_scale, *mask, q0);
      } else {
        scale_bias_(att, cfg->attn_scale, bias);
      }
    };
    auto block = [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t q0,
                     const at::Tensor& bias) {
      if (at::Tensor att = grouped_bmm(q, k, true); att.defined()) {
        add_mask(att, q0, bias);
        att = at::softmax(att, -1, at::kFloat);
        if (at::Tensor y = grouped_bmm(att, v, false); y.defined()) return y;
        return at::matmul(att, repeat_kv(v, q.size(1) / v.size(1)));
      }
      const int64_t groups = q.size(1) / k.size(1);
      at::Tensor att = at::matmul(q, repeat_kv(k, groups).transpose(2, 3));
      add_mask(att, q0, bias);
      att = at::softmax(att, -1, at::kFloat).to(v.scalar_type());
      return at::matmul(att, repeat_kv(v, groups));
    };
    int64_t blk = cfg->attn_block;
    if (blk <= 0 || T <= blk) return block(q, k, v, 0, bias);
    int64_t past = k.size(2) - T;
    std::vector<at::Tensor> ys;
    for (int64_t q0 = 0; q0 < T; q0 += blk) {
      int64_t n = std::min(blk, T - q0), keys = past + q0 + n;
      ys.push_back(block(q.narrow(2, q0, n), k.narrow(2, 0, keys), v.narrow(2, 0, keys), q0,
                         mask != nullptr ? at::Tensor() : bias.narrow(2, q0, n).narrow(3, 0, keys)));
    }
    return at::cat(ys, 2);
  }

  // mlp is MLP.Forward.
  at::Tensor mlp(int64_t l, const at::Tensor& x) const {
    at::Tensor gate = at::silu(linear(x, W(l, EVOLM_FUSED_GATE), at::Tensor()));
    return linear(gate.mul(linear(x, W(l, EVOLM_FUSED_UP), at::Tensor())), W(l, EVOLM_FUSED_DOWN),
                  at::Tensor());
  }

  // layer is DecoderLayer.Forward.
  at::Tensor layer(int64_t l, const at::Tensor& x) const {
    at::Tensor h = x.add(attention(l, rms(x, W(l, EVOLM_FUSED_INPUT_NORM), cfg->norm_eps)));
    return h.add(mlp(l, rms(h, W(l, EVOLM_FUSED_POST_NORM), cfg->norm_eps)));
  }
};

// row_argmax is the first index of p[0:n]'s maximum, or of its first NaN:
// torch.argmax's answer. libtorch 2.1's CPU argmax is a scalar loop (5-7% of
// a tiny model's greedy decode step over a 151,936-token vocabulary); this
// is a vectorized max, then a vectorized search for the first element equal
// to it.
#if defined(__x86_64__)
__attribute__((target("avx2"))) int64_t row_argmax_avx2(const float* p, int64_t n) {
  int64_t i = 0;
  __m256 vmax = _mm256_set1_ps(-INFINITY), unord = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(p + i);
    vmax = _mm256_max_ps(vmax, v);
    unord = _mm256_or_ps(unord, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  }
  bool nan = _mm256_movemask_ps(unord) != 0;
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, vmax);
  float m = -INFINITY;
  for (float l : lanes) m = l > m ? l : m;
  for (int64_t j = i; j < n; j++) {
    nan = nan || p[j] != p[j];
    m = p[j] > m ? p[j] : m;
  }
  if (nan) {
    for (int64_t j = 0; j < n; j++)
      if (p[j] != p[j]) return j;
  }
  __m256 vm = _mm256_set1_ps(m);
  for (i = 0; i + 8 <= n; i += 8) {
    int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(p + i), vm, _CMP_EQ_OQ));
    if (hit != 0) return i + __builtin_ctz(hit);
  }
  for (; i < n; i++)
    if (p[i] == m) return i;
  return 0;  // n == 0 (unreachable: at::argmax rejects an empty row first)
}
#endif


// Packed weights (evolm_fused_packed_linear). A weight is reordered once
// into oneDNN's blocked layout (mkldnn::_reorder_linear_weight) and kept
// while it is the same weight with the same values: the entry holds a weak
// reference to the weight's TensorImpl (a new tensor at the same address is
// not it), its data pointer, and its version counter, which every in-place
// ATen op bumps (optimizer steps, copy_ from a checkpoint); writes that
// bypass ATen (model.LoadWeights' raw copy, model/dist's collectives) bump
// it themselves (evolm_fused_bump_version).
struct Packed {
  c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl> weight;
  const void* data;
  int64_t version;
  at::Tensor packed;
  int64_t bytes;
};

std::mutex packed_mu;
std::unordered_map<const c10::TensorImpl*, Packed> packed_cache;

bool packing_available() {
  static const bool yes = [] {
    if (!at::hasMKLDNN()) return false;
    auto& d = c10::Dispatcher::singleton();
    return d.findSchema({"mkldnn::_reorder_linear_weight", ""}).has_value() &&
           d.findSchema({"mkldnn::_linear_pointwise", ""}).has_value();
  }();
  return yes;
}

// packed_weight is w's packed form, reordered on first use and again after
// w changed. Entries of freed weights go whenever another weight is packed.
at::Tensor packed_weight(const at::Tensor& w) {
  const c10::TensorImpl* key = w.unsafeGetTensorImpl();
  std::lock_guard<std::mutex> lock(packed_mu);
  auto it = packed_cache.find(key);
  if (it != packed_cache.end() && !it->second.weight.expired() &&
      it->second.data == w.data_ptr() && it->second.version == w._version()) {
    return it->second.packed;
  }
  for (auto e = packed_cache.begin(); e != packed_cache.end();) {
    e = e->second.weight.expired() ? packed_cache.erase(e) : std::next(e);
  }
  static auto reorder = c10::Dispatcher::singleton()
                            .findSchemaOrThrow("mkldnn::_reorder_linear_weight", "")
                            .typed<at::Tensor(const at::Tensor&, c10::optional<int64_t>)>();
  at::Tensor p = reorder.call(w, c10::nullopt);
  packed_cache.insert_or_assign(key, Packed{
      c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>(w.getIntrusivePtr()),
      w.data_ptr(), w._version(), p, w.numel() * static_cast<int64_t>(w.element_size())});
  return p;
}

}  // namespace

extern "C" int64_t evolm_fused_grouped_calls(void) { return grouped_calls.load(); }

extern "C" int64_t evolm_fused_mask_row_calls(void) { return mask_row_calls.load(); }

extern "C" int64_t evolm_fused_variance_lanes(void) { return variance_lanes(); }

extern "C" void evolm_fused_elementwise_calls(int64_t* counts) {
  for (int i = 0; i < 4; i++) counts[i] = elementwise_calls[i].load();
}

extern "C" int64_t evolm_fused_parallel_threads(int64_t n, int64_t grain) {
  std::atomic<int64_t> parts{0};
  parallel_rows(n, grain, [&](int64_t, int64_t) { parts++; });
  return parts.load();
}

extern "C" int evolm_fused_packed_available(void) { return packing_available() ? 1 : 0; }

extern "C" char* evolm_fused_packed_linear(void* x, void* w, void* into, void** out) {
  return guard([&] {
    TORCH_CHECK(x != nullptr && w != nullptr, "packed linear: a required argument is NULL");
    TORCH_CHECK(packing_available(), "packed linear: this libtorch has no oneDNN (mkldnn) linear");
    at::Tensor a = handle(x), wt = handle(w);
    TORCH_CHECK(a.is_cpu() && wt.is_cpu() && a.scalar_type() == at::kFloat &&
                    wt.scalar_type() == at::kFloat,
                "packed linear: needs float32 CPU tensors, got ", a.scalar_type(), " on ",
                a.device(), " and ", wt.scalar_type(), " on ", wt.device());
    TORCH_CHECK(wt.dim() == 2 && wt.is_contiguous() && a.dim() >= 1 && a.size(-1) == wt.size(1),
                "packed linear: input ", a.sizes(), " against weight ", wt.sizes());
    TORCH_CHECK(!at::GradMode::is_enabled() || !(a.requires_grad() || wt.requires_grad()),
                "packed linear: inference only (grad is on)");
    static auto linear = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("mkldnn::_linear_pointwise", "")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&,
                                               const c10::optional<at::Tensor>&, c10::string_view,
                                               c10::List<c10::optional<at::Scalar>>,
                                               c10::optional<c10::string_view>)>();
    at::Tensor p = packed_weight(wt);
    std::vector<int64_t> shape(a.sizes().begin(), a.sizes().end());
    shape.back() = wt.size(0);
    at::Tensor y = linear.call(a.reshape({-1, a.size(-1)}).contiguous(), p, c10::nullopt, "none",
                               c10::List<c10::optional<at::Scalar>>(), c10::string_view(""))
                       .view(shape);
    if (into != nullptr) {
      at::Tensor o = handle(into);
      TORCH_CHECK(o.numel() == y.numel(), "packed linear: output ", o.sizes(), " for ", y.sizes());
      o.view(shape).copy_(y);
      return;
    }
    *out = new at::Tensor(std::move(y));
  });
}

extern "C" void evolm_fused_packed_stats(int64_t* n, int64_t* bytes) {
  std::lock_guard<std::mutex> lock(packed_mu);
  *n = 0;
  *bytes = 0;
  for (auto& e : packed_cache) {
    if (e.second.weight.expired()) continue;
    (*n)++;
    *bytes += e.second.bytes;
  }
}

extern "C" uint64_t evolm_fused_weights_stamp(void** ts, int64_t n) {
  try {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over each tensor's identity, data and version
    auto mix = [&h](uint64_t v) {
      for (int i = 0; i < 8; i++) {
        h ^= (v >> (8 * i)) & 0xff;
        h *= 1099511628211ull;
      }
    };
    for (int64_t i = 0; i < n; i++) {
      at::Tensor t = handle(ts[i]);
      if (!t.defined()) {
        mix(0);
        continue;
      }
      if (t.is_inference()) return 0;  // no version counter: in-place writes are not seen
      mix(reinterpret_cast<uint64_t>(t.unsafeGetTensorImpl()));
      mix(reinterpret_cast<uint64_t>(t.data_ptr()));
      mix(static_cast<uint64_t>(t._version()));
    }
    return h == 0 ? 1 : h;
  } catch (...) {
    return 0;
  }
}

extern "C" char* evolm_fused_bump_version(void* t) {
  return guard([&] {
    TORCH_CHECK(t != nullptr, "bump version: tensor is NULL");
    at::Tensor x = handle(t);
    if (x.defined() && !x.is_inference()) x.unsafeGetTensorImpl()->bump_version();
  });
}

extern "C" int evolm_fused_argmax_vectorized(void) { return has_avx2() ? 1 : 0; }

extern "C" int evolm_fused_cpu_vendor(void) {
#if defined(__x86_64__)
  if (__builtin_cpu_is("intel")) return 1;
  if (__builtin_cpu_is("amd")) return 2;
#endif
  return 0;
}

extern "C" char* evolm_fused_argmax(void* x, void** out) {
  return guard([&] {
    TORCH_CHECK(x != nullptr && out != nullptr, "argmax: a required argument is NULL");
    at::Tensor t = handle(x);
    if (!(has_avx2() && t.dim() == 2 && t.size(1) > 0 && t.is_cpu() &&
          t.scalar_type() == at::kFloat && t.is_contiguous())) {
      *out = new at::Tensor(at::argmax(t, -1, false));
      return;
    }
#if defined(__x86_64__)
    int64_t B = t.size(0), V = t.size(1);
    at::Tensor idx = at::empty({B}, t.options().dtype(at::kLong));
    const float* p = t.data_ptr<float>();
    int64_t* o = idx.data_ptr<int64_t>();
    parallel_rows(B, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; b++) o[b] = row_argmax_avx2(p + b * V, V);
    });
    *out = new at::Tensor(std::move(idx));
#endif
  });
}

extern "C" char* evolm_fused_select_rows(void** src, int64_t n, const int64_t* rows, int64_t nrows,
                                        int64_t len, int64_t max_len, void** out) {
  return guard([&] {
    TORCH_CHECK(src != nullptr && out != nullptr && n >= 0 && nrows >= 0 && len >= 0 && max_len >= len,
                "select rows: bad arguments");
    bool same = true;
    for (int64_t r = 0; r < nrows; r++) same = same && rows[r] == rows[0];
    at::Tensor idx;
    std::vector<at::Tensor> ys;
    ys.reserve(n);
    for (int64_t i = 0; i < n; i++) {
      at::Tensor x = handle(src[i]);
      TORCH_CHECK(x.defined() && x.dim() == 4 && x.size(2) >= len, "select rows: buffer ", i,
                  " must be (B, nkv, ≥ ", len, ", hs), got ", x.sizes());
      for (int64_t r = 0; r < nrows; r++) {
        TORCH_CHECK(rows[r] >= 0 && rows[r] < x.size(0), "select rows: row ", rows[r], " out of range [0, ",
                    x.size(0), ")");
      }
      at::Tensor y = at::empty({nrows, x.size(1), max_len, x.size(3)}, x.options());
      if (len > 0 && nrows > 0) {
        at::Tensor part = x.narrow(2, 0, len);
        if (same) {
          part = part.narrow(0, rows[0], 1).expand({nrows, -1, -1, -1});
        } else {
          if (!idx.defined()) {
            idx = at::from_blob(const_cast<int64_t*>(rows), {nrows}, at::kLong).to(x.device());
          }
          part = part.index_select(0, idx.device() == x.device() ? idx : idx.to(x.device()));
        }
        y.narrow(2, 0, len).copy_(part);
      }
      if (max_len > len) y.narrow(2, len, max_len - len).zero_();
      ys.push_back(std::move(y));
    }
    for (int64_t i = 0; i < n; i++) out[i] = new at::Tensor(std::move(ys[i]));
  });
}

// evolm_fused_attn_bias is model/llama's mask, the bias half (hidden, the
// lines that build blocked and then bias from it), written in one pass over
// the output where the tensor ops take eight: libtorch 2.1's CPU masked_fill
// is a scalar loop and its broadcast int64 comparisons are not much faster,
// which cost a packed judge pass of tiny (486 tokens) 0.87 ms of its 6.8
// (docs/engine.md, "The attention mask"). Each row is MaskSpec::row's: the causal fill
// (0 up to the query's position, −MaxFloat32 after), then the keys of
// another branch and the padding keys before the query blocked over it;
// TestAttnBiasEqualsOps checks the result against the ops bit for bit.
extern "C" char* evolm_fused_attn_bias(int64_t B, int64_t T, int64_t past, void* mask,
                                       void* branches, void** out) {
  return guard([&] {
    TORCH_CHECK(out != nullptr, "attn bias: bad arguments");
    *out = new at::Tensor(MaskSpec(B, T, past, handle(mask), handle(branches)).bias());
  });
}

extern "C" char* evolm_fused_forward(const evolm_fused_config* cfg, void** weights, void* x,
                                     void* cos, void* sin, void* bias, void* blocked, void* mask,
                                     void* branches, void** k_cache, void** v_cache, int64_t past,
                                     void** out) {
  return guard([&] {
    TORCH_CHECK(cfg != nullptr && weights != nullptr && x != nullptr && cos != nullptr &&
                    sin != nullptr && out != nullptr,
                "fused forward: a required argument is NULL");
    TORCH_CHECK((k_cache == nullptr) == (v_cache == nullptr),
                "fused forward: pass both caches or neither");
    // Inference only, so every op may go straight to its CPU (or CUDA)
    // kernel: with grad off the Autograd and ADInplaceOrView kernels only
    // forward the call, one dispatch step each per op (docs/engine.md, "The
    // fused decoder stack"). The same kernels run, so the bits are the same. The one
    // in-place write, to the KV cache, skips the cache's version bump, which
    // nothing reads.
    TORCH_CHECK(!at::GradMode::is_enabled(), "fused forward: inference only (grad is on)");
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    Stack st{cfg, weights, handle(cos), handle(sin), handle(bias), at::Tensor(), nullptr,
             k_cache, v_cache, past};
    at::Tensor h = handle(x);
    std::optional<MaskSpec> spec;
    if (cfg->sdpa) {
      // Attention.Forward's SDPA bias (the same in every layer).
      TORCH_CHECK(blocked != nullptr, "fused forward: sdpa needs the blocked mask");
      double lowest = -3.4028234663852886e38;  // minValue
      if (h.scalar_type() == at::kBFloat16) lowest = -3.3895313892515355e38;
      if (h.scalar_type() == at::kHalf) lowest = -65504;
      st.sdpa_bias = at::zeros({1}, h.options()).masked_fill(handle(blocked), lowest);
    } else if (bias == nullptr) {
      TORCH_CHECK(h.dim() == 3, "fused forward: x must be (B, T, C), got ", h.sizes());
      spec.emplace(h.size(0), h.size(1), past, handle(mask), handle(branches));
      st.mask = &*spec;
    }
    for (int64_t l = 0; l < cfg->layers; l++) h = st.layer(l, h);
    at::Tensor y = rms(h, handle(weights[cfg->layers * EVOLM_FUSED_PER_LAYER]), cfg->norm_eps);
    *out = new at::Tensor(std::move(y));
  });
}
