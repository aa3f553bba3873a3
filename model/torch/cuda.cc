//go:build evolm_cuda

// model/torch's CUDA shim (cuda.go), compiled only in the CUDA build
// (TORCH_CUDA=1 make build: -tags evolm_cuda, with the CUDA headers of
// build/overlay-cuda.json's cuda_cgo.go): the reason no device is visible,
// device properties, and the caching allocator's statistics, which
// torch.cuda.max_memory_allocated reads.

#ifdef EVOLM_TORCH_NO_CUDA_OVERLAY
#error "-tags evolm_cuda needs the CUDA overlay: run `TORCH_CUDA=1 make build` (GOFLAGS=-overlay=build/overlay-cuda.json)"
#endif

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>

namespace {

char* dup(const std::string& s) {
  char* p = static_cast<char*>(std::malloc(s.size() + 1));
  if (p != nullptr) std::memcpy(p, s.c_str(), s.size() + 1);
  return p;
}

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

c10::DeviceIndex index(int64_t dev) {
  const int64_t n = c10::cuda::device_count();
  TORCH_CHECK(dev >= 0 && dev < n, "CUDA device ", dev, " out of range (", n, " visible)");
  return static_cast<c10::DeviceIndex>(dev);
}

}  // namespace

extern "C" {

// evolm_torch_cuda_probe counts the visible devices as
// torch.cuda.device_count does and, when there is none, says why (no
// driver, a driver too old for CUDA 12.1, no device): the message of
// c10::cuda::device_count_ensure_non_zero.
char* evolm_torch_cuda_probe(int64_t* count) {
  *count = 0;
  return guard([&] { *count = c10::cuda::device_count_ensure_non_zero(); });
}

// evolm_torch_cuda_props reads device dev's name (malloc'd), memory and
// compute capability.
char* evolm_torch_cuda_props(int64_t dev, char** name, int64_t* total, int64_t* major, int64_t* minor) {
  *name = nullptr;
  return guard([&] {
    const cudaDeviceProp* p = at::cuda::getDeviceProperties(index(dev));
    *name = dup(p->name);
    *total = static_cast<int64_t>(p->totalGlobalMem);
    *major = p->major;
    *minor = p->minor;
  });
}

// evolm_torch_cuda_memory reads the caching allocator's bytes on device
// dev: allocated now, the most allocated since the last reset (peak,
// torch.cuda.max_memory_allocated) and reserved from the driver; with reset
// it then resets the peak (torch.cuda.reset_peak_memory_stats).
char* evolm_torch_cuda_memory(int64_t dev, int64_t* allocated, int64_t* peak, int64_t* reserved, int reset) {
  return guard([&] {
    const c10::DeviceIndex d = index(dev);
    using c10::cuda::CUDACachingAllocator::StatType;
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(d);
    const size_t all = static_cast<size_t>(StatType::AGGREGATE);
    *allocated = stats.allocated_bytes[all].current;
    *peak = stats.allocated_bytes[all].peak;
    *reserved = stats.reserved_bytes[all].current;
    if (reset != 0) c10::cuda::CUDACachingAllocator::resetPeakStats(d);
  });
}

// evolm_torch_cuda_mem_info reads device dev's free and total memory from
// the driver (torch.cuda.mem_get_info).
char* evolm_torch_cuda_mem_info(int64_t dev, int64_t* free, int64_t* total) {
  return guard([&] {
    c10::cuda::CUDAGuard g(index(dev));
    size_t f = 0, t = 0;
    C10_CUDA_CHECK(cudaMemGetInfo(&f, &t));
    *free = static_cast<int64_t>(f);
    *total = static_cast<int64_t>(t);
  });
}

// evolm_torch_cuda_synchronize waits for every stream of device dev
// (torch.cuda.synchronize).
char* evolm_torch_cuda_synchronize(int64_t dev) {
  return guard([&] {
    c10::cuda::CUDAGuard g(index(dev));
    c10::cuda::device_synchronize();
  });
}

// evolm_torch_cuda_empty_cache returns the allocator's idle blocks to the
// driver (torch.cuda.empty_cache).
char* evolm_torch_cuda_empty_cache(void) {
  return guard([] { c10::cuda::CUDACachingAllocator::emptyCache(); });
}

}  // extern "C"
