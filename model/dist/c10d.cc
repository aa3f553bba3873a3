// model/dist's shim: a C API (c10d.h) over libtorch's own c10d. Rendezvous is
// c10d::TCPStore, the collectives are c10d::ProcessGroupGloo's (CPU) or
// c10d::ProcessGroupNCCL's (CUDA, when built with EVOLM_DIST_NCCL); nothing
// here speaks a protocol of its own. Every entry point catches every C++
// exception and returns its message, so none crosses cgo.

#ifdef EVOLM_DIST_NO_OVERLAY
#error "model/dist needs libtorch's and Gloo's headers: run `make torch` and build with GOFLAGS=-overlay=build/overlay.json (source the Makefile's environment)"
#endif
#ifdef EVOLM_DIST_NO_CUDA_OVERLAY
#error "-tags evolm_cuda needs the CUDA overlay: run `TORCH_CUDA=1 make build` (GOFLAGS=-overlay=build/overlay-cuda.json)"
#endif

#include "c10d.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#ifdef EVOLM_DIST_NCCL
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

struct evolm_dist_group {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::Backend> backend;
  bool nccl = false;
  int rank = 0;
  int world = 1;
  int device = -1;
  std::chrono::milliseconds timeout{0};
};

namespace {

char* dup(const std::string& s) {
  char* p = static_cast<char*>(std::malloc(s.size() + 1));
  if (p != nullptr) std::memcpy(p, s.c_str(), s.size() + 1);
  return p;
}

// guard runs f and turns whatever it throws into a message: c10::Error (and
// c10d's DistBackendError) without their C++ backtraces, gloo's exceptions
// and every other std::exception by what(), anything else by a fixed text.
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

at::Tensor& tensor(void* h) {
  TORCH_CHECK(h != nullptr, "undefined tensor (nil handle)");
  auto* t = static_cast<at::Tensor*>(h);
  TORCH_CHECK(t->defined(), "undefined tensor");
  return *t;
}

c10d::ReduceOp reduceOp(int op) {
  switch (op) {
    case EVOLM_DIST_SUM:
    case EVOLM_DIST_AVG:
      return c10d::ReduceOp::SUM;
    case EVOLM_DIST_MAX:
      return c10d::ReduceOp::MAX;
    case EVOLM_DIST_MIN:
      return c10d::ReduceOp::MIN;
  }
  TORCH_CHECK(false, "unknown reduce op ", op);
}

std::chrono::milliseconds timeoutOf(const evolm_dist_group* g, int64_t ms) {
  return ms > 0 ? std::chrono::milliseconds(ms) : g->timeout;
}

// wait blocks until the work is done or timeout passes. c10d's Work::wait
// rethrows the collective's own error (a dead peer's closed connection,
// Gloo's timeout, which is the group's) and throws "Operation timed out!"
// when timeout passes first; that one gets the timeout added. The work then
// still runs in the backend's thread, holding its tensors, until it ends.
void wait(const c10::intrusive_ptr<c10d::Work>& work, std::chrono::milliseconds timeout) {
  try {
    work->wait(timeout);
  } catch (const c10::Error& e) {
    if (work->isCompleted()) throw;
    TORCH_CHECK(false, "timed out after ", timeout.count(), "ms waiting for the collective (c10d: ",
                e.what_without_backtrace(), ")");
  }
}

// checkPieces checks that big holds world pieces of small along dim 0 (the
// all-gather output, the reduce-scatter input).
void checkPieces(const at::Tensor& big, const at::Tensor& small, int world,
                               const char* bigName, const char* smallName) {
  TORCH_CHECK(small.dim() >= 1 && big.dim() == small.dim(), bigName, " and ", smallName,
              " must have the same number (>= 1) of dimensions, got ", big.sizes(), " and ",
              small.sizes());
  TORCH_CHECK(big.size(0) == small.size(0) * world &&
                  big.sizes().slice(1) == small.sizes().slice(1),
              bigName, " must be ", smallName, " stacked world-size (", world,
              ") times along dim 0: got ", big.sizes(), " and ", small.sizes());
  TORCH_CHECK(big.scalar_type() == small.scalar_type() && big.device() == small.device(),
              bigName, " and ", smallName, " must have the same dtype and device");
  TORCH_CHECK(big.is_contiguous() && small.is_contiguous(), bigName, " and ", smallName,
              " must be contiguous");
}

}  // namespace

// ZeRO-2: each parameter's gradient is reduced (summed) to its owning rank
// as soon as backward has accumulated it, and freed on every rank, so a
// rank holds its own parameters' summed gradients plus those in flight,
// not the whole model's. libtorch's post-accumulate-grad hook (the C++ side
// of Tensor.register_post_accumulate_grad_hook, new in 2.1) calls onGrad.
//
// A "pass" is one micro-batch's backward, deferred stages included. Every
// rank must issue the same collectives in the same order, whatever order
// its gradients arrive in, so parameter i is reduced only after 0..i-1:
// a gradient arriving early waits in its .grad (ready), and one arriving
// after its parameter's reduction in this pass (a tensor used again in a
// later backward stage: the lm_head in chunked log-probs) stays in .grad
// as late. end_pass reduces what is left in order (zeros where a rank has
// no gradient), then all-reduces (max) the late flags and reduces every
// flagged parameter once more: the same sequence on every rank. A rank with
// fewer micro-batches runs empty passes (end_pass alone). finish hands
// each owner its summed gradient as .grad; the other ranks have none.
struct evolm_dist_zero2 {
  evolm_dist_group* g = nullptr;
  std::vector<at::Tensor> params;
  std::vector<int> owner;
  std::vector<at::Tensor> acc;      // owned: Σ over passes of the reduced gradient
  std::vector<char> ready, late;
  std::vector<int64_t> counted;     // bytes of params[i].grad counted in held
  std::size_t next = 0;             // parameters [0, next) are reduced in this pass
  int64_t held = 0, accBytes = 0, peak = 0, lateCount = 0;
  std::chrono::milliseconds timeout{0};
  bool failed = false;
};

namespace {

void zeroNote(evolm_dist_zero2* z, std::size_t i) {
  const at::Tensor& g = z->params[i].grad();
  int64_t b = g.defined() ? static_cast<int64_t>(g.nbytes()) : 0;
  z->held += b - z->counted[i];
  z->counted[i] = b;
  z->peak = std::max(z->peak, z->held + z->accBytes);
}

void zeroReduce(evolm_dist_zero2* z, std::size_t i) {
  at::Tensor& p = z->params[i];
  at::Tensor g = p.grad();
  if (!g.defined()) {
    g = at::zeros_like(p, at::MemoryFormat::Contiguous);
  } else if (!g.is_contiguous()) {
    g = g.contiguous();
  }
  std::vector<at::Tensor> ts{g};
  c10d::ReduceOptions o;
  o.reduceOp = c10d::ReduceOp::SUM;
  o.rootRank = z->owner[i];
  o.timeout = z->timeout;
  try {
    wait(z->g->backend->reduce(ts, o), o.timeout);
  } catch (const c10::Error& e) {
    z->failed = true;
    // "dist: " as Group's errors say, since this one reaches the caller
    // through backward's error rather than through a Group method.
    TORCH_CHECK(false, "dist: ZeRO-2 reduce of gradient ", i, " to rank ", z->owner[i], " (",
                z->g->nccl ? "nccl" : "gloo", " rank ", z->g->rank, " of ", z->g->world,
                "): ", e.what_without_backtrace());
  } catch (const std::exception& e) {
    z->failed = true;
    TORCH_CHECK(false, "dist: ZeRO-2 reduce of gradient ", i, " to rank ", z->owner[i], " (",
                z->g->nccl ? "nccl" : "gloo", " rank ", z->g->rank, " of ", z->g->world,
                "): ", e.what());
  }
  if (z->owner[i] == z->g->rank) {
    if (z->acc[i].defined()) {
      z->acc[i].add_(g);
    } else {
      z->acc[i] = g.detach();
      z->accBytes += static_cast<int64_t>(g.nbytes());
    }
  }
  p.mutable_grad().reset();
  z->held -= z->counted[i];
  z->counted[i] = 0;
}

void zeroAdvance(evolm_dist_zero2* z) {
  while (z->next < z->params.size() && z->ready[z->next]) {
    zeroReduce(z, z->next);
    z->next++;
  }
}

void zeroOnGrad(evolm_dist_zero2* z, std::size_t i) {
  TORCH_CHECK(!z->failed, "ZeRO-2: an earlier gradient reduction failed");
  zeroNote(z, i);
  if (i < z->next) {
    z->late[i] = 1;
    return;
  }
  z->ready[i] = 1;
  zeroAdvance(z);
}

struct Zero2Hook : torch::autograd::PostAccumulateGradHook {
  evolm_dist_zero2* z;
  std::size_t i;
  Zero2Hook(evolm_dist_zero2* z, std::size_t i) : z(z), i(i) {}
  void operator()(const torch::autograd::Variable&) override { zeroOnGrad(z, i); }
};

void zeroClearPass(evolm_dist_zero2* z) {
  std::fill(z->ready.begin(), z->ready.end(), 0);
  std::fill(z->late.begin(), z->late.end(), 0);
  z->next = 0;
}

// written bumps x's version counter: a collective writes its memory without
// an ATen in-place op, and model/fused keeps packed copies of weights until
// their version changes.
void written(const at::Tensor& x) {
  if (x.defined() && !x.is_inference()) x.unsafeGetTensorImpl()->bump_version();
}

}  // namespace

extern "C" {

int evolm_dist_nccl_built(void) {
#ifdef EVOLM_DIST_NCCL
  return 1;
#else
  return 0;
#endif
}

void evolm_dist_nccl_version(char* buf, int n) {
  if (n <= 0) return;
  buf[0] = '\0';
#ifdef EVOLM_DIST_NCCL
  // The loaded library's version where the build links it (the wheel's
  // libnccl.so.2: EVOLM_DIST_NCCL_LIB), else the headers'.
  int v = NCCL_VERSION_CODE;
#ifdef EVOLM_DIST_NCCL_LIB
  if (ncclGetVersion(&v) != ncclSuccess) v = 0;
#endif
  if (v <= 0) return;
  // NCCL_VERSION(X, Y, Z): X*10000 + Y*100 + Z from 2.9 on (X*1000 + Y*100 + Z before).
  const int major = v >= 20900 ? v / 10000 : v / 1000;
  const int minor = v >= 20900 ? v % 10000 / 100 : v % 1000 / 100;
  std::snprintf(buf, static_cast<size_t>(n), "%d.%d.%d", major, minor, v % 100);
#endif
}

char* evolm_dist_init(const char* backend, const char* addr, int port, int is_server,
                      const char* store_prefix, int rank, int world, int device,
                      int64_t timeout_ms, evolm_dist_group** out) {
  *out = nullptr;
  return guard([&] {
    const std::string name(backend);
    TORCH_CHECK(name == "gloo" || name == "nccl", "unknown backend \"", name,
                "\" (want gloo or nccl)");
    TORCH_CHECK(world >= 1 && rank >= 0 && rank < world, "rank ", rank,
                " out of range for world size ", world);
    TORCH_CHECK(port > 0 && port < 65536, "port ", port, " out of range");
    auto timeout = std::chrono::milliseconds(timeout_ms);

    // torch.distributed's env:// and tcp:// rendezvous (rendezvous.py,
    // _create_c10d_store): rank 0 hosts a multi-tenant TCPStore, every rank
    // connects with the world size and waits for all of them to arrive.
    c10d::TCPStoreOptions so;
    so.port = static_cast<std::uint16_t>(port);
    so.isServer = is_server != 0;
    so.numWorkers = static_cast<std::size_t>(world);
    so.waitWorkers = true;
    so.timeout = timeout;
    so.multiTenant = true;
    c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::TCPStore>(std::string(addr), so);
    // torchrun's agent store: every worker is a client under this prefix.
    if (store_prefix != nullptr && store_prefix[0] != '\0') {
      store = c10::make_intrusive<c10d::PrefixStore>(std::string(store_prefix), store);
    }
    // init_process_group's key layout for the default group ("0") on one
    // device type: default_pg / 0/ / cpu/ (or cuda/), so that a Go rank and
    // a Python rank find each other's keys.
    store = c10::make_intrusive<c10d::PrefixStore>("default_pg", store);
    store = c10::make_intrusive<c10d::PrefixStore>("0/", store);

    auto g = std::make_unique<evolm_dist_group>();
    g->rank = rank;
    g->world = world;
    g->timeout = timeout;
    if (name == "gloo") {
      // The Options as Python's ProcessGroupGloo(store, rank, size, timeout)
      // builds them (torch/csrc/distributed/c10d/init.cpp): one device per
      // interface in GLOO_SOCKET_IFNAME (comma-separated), else
      // createDefaultDevice() (the address the hostname resolves to, or
      // loopback), and two threads per device.
      auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
      const char* ifnames = std::getenv("GLOO_SOCKET_IFNAME");
      if (ifnames != nullptr && std::strlen(ifnames) > 1) {
        std::string rest(ifnames);
        for (std::size_t at = 0; at <= rest.size();) {
          std::size_t end = rest.find(',', at);
          if (end == std::string::npos) end = rest.size();
          if (end > at) {
            opts->devices.push_back(
                c10d::ProcessGroupGloo::createDeviceForInterface(rest.substr(at, end - at)));
          }
          at = end + 1;
        }
      } else {
        opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
      }
      opts->threads = static_cast<int>(opts->devices.size() * 2);
      auto cpu = c10::make_intrusive<c10d::PrefixStore>("cpu/", store);
      g->backend = c10::make_intrusive<c10d::ProcessGroupGloo>(cpu, rank, world, opts);
    } else {
#ifdef EVOLM_DIST_NCCL
      TORCH_CHECK(device >= 0, "nccl needs a CUDA device index (LOCAL_RANK)");
      c10::cuda::set_device(static_cast<c10::DeviceIndex>(device));
      // Blocking wait: Work::wait blocks the host and throws on timeout or
      // a communicator error, instead of the watchdog tearing the process
      // down (ProcessGroupNCCL reads the variable in its constructor).
      setenv(c10d::NCCL_BLOCKING_WAIT, "1", 0);
      auto opts = c10d::ProcessGroupNCCL::Options::create();
      opts->timeout = timeout;
      auto cuda = c10::make_intrusive<c10d::PrefixStore>("cuda/", store);
      g->backend = c10::make_intrusive<c10d::ProcessGroupNCCL>(cuda, rank, world, opts);
      g->nccl = true;
      g->device = device;
#else
      TORCH_CHECK(false, "this build has no NCCL (build with TORCH_CUDA=1 against a CUDA libtorch)");
#endif
    }
    g->backend->setSequenceNumberForGroup();
    g->store = store;
    *out = g.release();
  });
}

char* evolm_dist_all_reduce(evolm_dist_group* g, void* t, int op, int64_t timeout_ms) {
  return guard([&] {
    at::Tensor& x = tensor(t);
    std::vector<at::Tensor> ts{x};
    c10d::AllreduceOptions o;
    o.reduceOp = reduceOp(op);
    o.timeout = timeoutOf(g, timeout_ms);
    wait(g->backend->allreduce(ts, o), o.timeout);
    written(x);
    if (op == EVOLM_DIST_AVG) {
      x.div_(g->world);
    }
  });
}

char* evolm_dist_reduce_scatter(evolm_dist_group* g, void* out, void* in, int op,
                                int64_t timeout_ms) {
  return guard([&] {
    at::Tensor& y = tensor(out);
    at::Tensor& x = tensor(in);
    checkPieces(x, y, g->world, "reduce-scatter input", "output");
    c10d::ReduceScatterOptions o;
    o.reduceOp = reduceOp(op);
    o.timeout = timeoutOf(g, timeout_ms);
    if (g->nccl) {
      wait(g->backend->_reduce_scatter_base(y, x, o), o.timeout);
    } else {
      // ProcessGroupGloo in 2.1.0 has neither reduce_scatter ("does not
      // support reduce_scatter") nor _reduce_scatter_base: all-reduce a
      // copy of the input through c10d and keep this rank's piece (W times
      // the traffic and memory of a true reduce-scatter).
      at::Tensor all = x.clone();
      std::vector<at::Tensor> ts{all};
      c10d::AllreduceOptions ao;
      ao.reduceOp = o.reduceOp;
      ao.timeout = o.timeout;
      wait(g->backend->allreduce(ts, ao), o.timeout);
      y.copy_(all.split(y.size(0), 0)[g->rank]);
    }
    written(y);
    if (op == EVOLM_DIST_AVG) {
      y.div_(g->world);
    }
  });
}

char* evolm_dist_all_gather(evolm_dist_group* g, void* out, void* in, int64_t timeout_ms) {
  return guard([&] {
    at::Tensor& y = tensor(out);
    at::Tensor& x = tensor(in);
    checkPieces(y, x, g->world, "all-gather output", "input");
    c10d::AllgatherOptions o;
    o.timeout = timeoutOf(g, timeout_ms);
    if (g->nccl) {
      wait(g->backend->_allgather_base(y, x, o), o.timeout);
    } else {
      // Gloo has no _allgather_base in 2.1.0; its allgather copies each
      // rank's piece into the given outputs, here views of y.
      std::vector<std::vector<at::Tensor>> outs{y.split(x.size(0), 0)};
      std::vector<at::Tensor> ins{x};
      wait(g->backend->allgather(outs, ins, o), o.timeout);
    }
    written(y);
  });
}

char* evolm_dist_broadcast(evolm_dist_group* g, void* t, int root, int64_t timeout_ms) {
  return guard([&] {
    TORCH_CHECK(root >= 0 && root < g->world, "root ", root, " out of range for world size ",
                g->world);
    std::vector<at::Tensor> ts{tensor(t)};
    c10d::BroadcastOptions o;
    o.rootRank = root;
    o.timeout = timeoutOf(g, timeout_ms);
    wait(g->backend->broadcast(ts, o), o.timeout);
    written(ts[0]);
  });
}

char* evolm_dist_barrier(evolm_dist_group* g, int64_t timeout_ms) {
  return guard([&] {
    c10d::BarrierOptions o;
    o.timeout = timeoutOf(g, timeout_ms);
    if (g->nccl) {
      o.device_ids = {g->device};
    }
    wait(g->backend->barrier(o), o.timeout);
  });
}

void evolm_dist_close(evolm_dist_group* g) {
  // The backend's destructor waits for work still queued (gloo) or aborts
  // the communicators (nccl); the store's closes its sockets, and on rank 0
  // stops the server.
  delete g;
}

char* evolm_dist_zero2_attach(evolm_dist_group* g, void** params, const int* owners, int n,
                              int64_t timeout_ms, evolm_dist_zero2** out) {
  *out = nullptr;
  return guard([&] {
    auto z = std::make_unique<evolm_dist_zero2>();
    z->g = g;
    z->timeout = timeoutOf(g, timeout_ms);
    for (int i = 0; i < n; i++) {
      at::Tensor& p = tensor(params[i]);
      TORCH_CHECK(p.is_leaf() && p.requires_grad(), "ZeRO-2: parameter ", i,
                  " is not a leaf that requires grad");
      TORCH_CHECK(owners[i] >= 0 && owners[i] < g->world, "ZeRO-2: owner ", owners[i],
                  " of parameter ", i, " out of range for world size ", g->world);
      TORCH_CHECK(torch::autograd::impl::post_acc_grad_hooks(p) == nullptr,
                  "ZeRO-2: parameter ", i, " already has a post-accumulate-grad hook");
      z->params.push_back(p);
      z->owner.push_back(owners[i]);
    }
    z->acc.resize(n);
    z->ready.assign(n, 0);
    z->late.assign(n, 0);
    z->counted.assign(n, 0);
    for (int i = 0; i < n; i++) {
      torch::autograd::impl::set_post_acc_grad_hooks(
          z->params[i], std::make_unique<Zero2Hook>(z.get(), static_cast<std::size_t>(i)));
    }
    *out = z.release();
  });
}

char* evolm_dist_zero2_end_pass(evolm_dist_zero2* z) {
  return guard([&] {
    TORCH_CHECK(!z->failed, "ZeRO-2: an earlier gradient reduction failed");
    const std::size_t n = z->params.size();
    std::fill(z->ready.begin(), z->ready.end(), 1);
    zeroAdvance(z);
    // Gradients that came after their parameter's reduction, on any rank.
    at::Tensor flags = at::empty({static_cast<int64_t>(n)}, at::kByte);
    std::copy(z->late.begin(), z->late.end(), flags.data_ptr<uint8_t>());
    if (z->g->nccl) flags = flags.to(z->params.empty() ? at::Device(at::kCPU) : z->params[0].device());
    std::vector<at::Tensor> ts{flags};
    c10d::AllreduceOptions o;
    o.reduceOp = c10d::ReduceOp::MAX;
    o.timeout = z->timeout;
    try {
      wait(z->g->backend->allreduce(ts, o), o.timeout);
    } catch (...) {
      z->failed = true;
      throw;
    }
    at::Tensor any = flags.cpu();
    const uint8_t* f = any.data_ptr<uint8_t>();
    for (std::size_t i = 0; i < n; i++) {
      if (f[i] != 0) {
        z->lateCount++;
        zeroReduce(z, i);
      }
    }
    zeroClearPass(z);
  });
}

char* evolm_dist_zero2_finish(evolm_dist_zero2* z) {
  return guard([&] {
    TORCH_CHECK(!z->failed, "ZeRO-2: an earlier gradient reduction failed");
    TORCH_CHECK(z->next == 0, "ZeRO-2: finish in the middle of a pass");
    for (std::size_t i = 0; i < z->params.size(); i++) {
      at::Tensor& p = z->params[i];
      if (z->owner[i] == z->g->rank) {
        p.mutable_grad() = z->acc[i].defined() ? z->acc[i] : at::zeros_like(p);
      } else {
        p.mutable_grad().reset();
      }
      z->acc[i].reset();
      z->counted[i] = 0;
    }
    z->held = 0;
    z->accBytes = 0;
  });
}

void evolm_dist_zero2_reset(evolm_dist_zero2* z) {
  for (std::size_t i = 0; i < z->params.size(); i++) {
    z->params[i].mutable_grad().reset();
    z->acc[i].reset();
    z->counted[i] = 0;
  }
  zeroClearPass(z);
  z->held = 0;
  z->accBytes = 0;
  z->peak = 0;
  z->lateCount = 0;
}

int64_t evolm_dist_zero2_peak_bytes(evolm_dist_zero2* z) { return z->peak; }
int64_t evolm_dist_zero2_late(evolm_dist_zero2* z) { return z->lateCount; }
int evolm_dist_zero2_failed(evolm_dist_zero2* z) { return z->failed ? 1 : 0; }

void evolm_dist_zero2_detach(evolm_dist_zero2* z) {
  if (z == nullptr) return;
  for (auto& p : z->params) {
    torch::autograd::impl::set_post_acc_grad_hooks(p, nullptr);
  }
  delete z;
}

}  // extern "C"
