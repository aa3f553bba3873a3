// model/torch's shim over ATen's device layer (device.go): whether this
// binary links libtorch's CUDA libraries and the CUDA devices it sees, asked
// through ATen's CUDA hooks (at::detail::getCUDAHooks()), which libtorch_cuda
// registers when it is loaded and which need no CUDA header; and the seeding
// of libtorch's default generators, CUDA's only when asked. A CUDA build's
// other device calls, which need CUDA's headers, are in cuda.cc.

#ifdef EVOLM_TORCH_NO_OVERLAY
#error "model/torch needs libtorch's headers: run `make torch` and build with GOFLAGS=-overlay=build/overlay.json (source the Makefile's environment)"
#endif

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/util/Exception.h>

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

void seed_generator(at::Generator gen, uint64_t seed) {
  std::lock_guard<std::mutex> lock(gen.mutex());  // as torch::manual_seed
  gen.set_current_seed(seed);
}

}  // namespace

extern "C" {

// evolm_torch_cuda_runtime is the CUDA runtime version libtorch's CUDA
// hooks were compiled against (12010 for 12.1), or 0 when no CUDA library
// registered them: a CPU build. It asks nothing of the CUDA runtime.
int64_t evolm_torch_cuda_runtime(void) {
  try {
    return static_cast<int64_t>(at::detail::getCUDAHooks().versionCUDART());
  } catch (...) {
    return 0;
  }
}

// evolm_torch_cudnn_version is the cuDNN version the CUDA hooks were
// compiled against, or 0.
int64_t evolm_torch_cudnn_version(void) {
  try {
    if (!at::detail::getCUDAHooks().compiledWithCuDNN()) return 0;
    return static_cast<int64_t>(at::detail::getCUDAHooks().versionCuDNN());
  } catch (...) {
    return 0;
  }
}

// evolm_torch_seed seeds the default CPU generator and, with cuda, the
// default generator of every CUDA device: torch::manual_seed, which
// counts the CUDA devices on every call (initializing the CUDA runtime in a
// CUDA build), split so that CUDA is only touched once it is in use.
char* evolm_torch_seed(int64_t seed, int cuda) {
  return guard([&] {
    const uint64_t s = static_cast<uint64_t>(seed);
    seed_generator(at::detail::getDefaultCPUGenerator(), s);
    if (cuda == 0) return;
    const int64_t n = static_cast<int64_t>(at::detail::getCUDAHooks().getNumGPUs());
    for (int64_t i = 0; i < n; i++) {
      seed_generator(at::globalContext().defaultGenerator(at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(i))), s);
    }
  });
}

// evolm_torch_device reads x's device: *type 0 for the CPU, 1 for CUDA
// (with *index), 2 for another (its name, malloc'd, in *other). gotch's
// own at_device reports -99 for a device other than these two, on which
// gotch's Go side exits the process.
char* evolm_torch_device(void* x, int* type, int* index, char** other) {
  *other = nullptr;
  return guard([&] {
    TORCH_CHECK(x != nullptr, "device: tensor is NULL");
    const at::Device d = static_cast<at::Tensor*>(x)->device();
    *index = d.has_index() ? d.index() : 0;
    *type = d.is_cpu() ? 0 : d.is_cuda() ? 1 : 2;
    if (*type == 2) *other = dup(d.str());
  });
}

// evolm_torch_to_meta is x on the meta device: its shape, dtype and
// strides, no storage.
char* evolm_torch_to_meta(void* x, void** out) {
  return guard([&] {
    TORCH_CHECK(x != nullptr, "to meta: tensor is NULL");
    const at::Tensor& t = *static_cast<at::Tensor*>(x);
    *out = new at::Tensor(at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kMeta)));
  });
}

}  // extern "C"
