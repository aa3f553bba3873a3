// A host caching allocator for large tensor blocks (see blocks.go).
#ifdef EVOLM_FUSED_NO_OVERLAY
#error "model/fused needs libtorch's headers: run `make torch` and build with GOFLAGS=-overlay=build/overlay.json (source the Makefile's environment)"
#endif
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include <algorithm>
#include <iterator>
#include <map>
#include <mutex>
#include <unordered_map>

#include "fused.h"

namespace {

// Blocks of at least kMinBlock bytes are ours; smaller ones come from and
// go back to malloc directly, as libtorch's default allocator does.
constexpr size_t kMinBlock = size_t(1) << 20;

struct Blocks {
  std::mutex mu;
  int on = 0;                                // open KeepBlocks windows
  size_t live = 0, cached = 0, peak = 0;     // bytes of our blocks
  std::unordered_map<void*, size_t> sizes;   // every block of ours, live or cached
  std::multimap<size_t, void*> idle;         // the cached blocks by size
  int64_t hits = 0, misses = 0;

  // drop frees cached blocks, largest first, until at most keep bytes
  // stay cached. Called with mu held.
  void drop(size_t keep) {
    while (cached > keep && !idle.empty()) {
      auto it = std::prev(idle.end());
      cached -= it->first;
      sizes.erase(it->second);
      c10::free_cpu(it->second);
      idle.erase(it);
    }
  }
};

// Never destroyed: tensors may be freed during static destruction.
Blocks& blocks() {
  static Blocks* b = new Blocks;
  return *b;
}

// release is the deleter of every block the allocator hands out.
void release(void* p) {
  if (p == nullptr) return;
  Blocks& b = blocks();
  {
    std::lock_guard<std::mutex> l(b.mu);
    auto it = b.sizes.find(p);
    if (it != b.sizes.end()) {
      size_t n = it->second;
      b.live -= n;
      if (b.on > 0) {
        b.idle.emplace(n, p);
        b.cached += n;
        return;
      }
      b.sizes.erase(it);
    }
  }
  c10::free_cpu(p);
}

struct Allocator final : c10::Allocator {
  c10::DataPtr allocate(size_t n) const override {
    void* p = nullptr;
    if (n >= kMinBlock) {
      Blocks& b = blocks();
      std::lock_guard<std::mutex> l(b.mu);
      if (b.on > 0) {
        // The smallest idle block that fits and wastes at most an eighth.
        auto it = b.idle.lower_bound(n);
        if (it != b.idle.end() && it->first <= n + n / 8) {
          size_t sz = it->first;
          p = it->second;
          b.idle.erase(it);
          b.cached -= sz;
          b.live += sz;
          b.peak = std::max(b.peak, b.live);
          b.hits++;
          return {p, p, &release, c10::Device(c10::DeviceType::CPU)};
        }
        // A new block: first free idle ones until ours and the cached
        // ones stay within the most bytes ever live at once.
        b.peak = std::max(b.peak, b.live + n);
        if (b.live + b.cached + n > b.peak) b.drop(b.peak - b.live - n);
        b.misses++;
      }
      p = c10::alloc_cpu(n);  // throws c10::Error when out of memory
      b.sizes.emplace(p, n);
      b.live += n;
      return {p, p, &release, c10::Device(c10::DeviceType::CPU)};
    }
    p = c10::alloc_cpu(n);
    return {p, p, &c10::free_cpu, c10::Device(c10::DeviceType::CPU)};
  }

  // release also frees a small block (it is not in sizes).
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
};

Allocator* installed() {
  // Installed once, before the first window opens, and never removed: the
  // blocks it handed out keep its deleter.
  static Allocator* a = [] {
    auto* a = new Allocator;
    c10::SetCPUAllocator(a, /*priority=*/1);
    return a;
  }();
  return a;
}

}  // namespace

extern "C" {

int evolm_blocks_open(void) {
  Allocator* a = installed();
  if (c10::GetCPUAllocator() != a) return 0;  // another allocator of higher priority
  Blocks& b = blocks();
  std::lock_guard<std::mutex> l(b.mu);
  if (b.on++ == 0) b.peak = b.live;
  return 1;
}

void evolm_blocks_close(void) {
  Blocks& b = blocks();
  std::lock_guard<std::mutex> l(b.mu);
  if (b.on > 0 && --b.on == 0) b.drop(0);
}

void evolm_blocks_stats(int64_t* hits, int64_t* misses, int64_t* live, int64_t* cached, int64_t* peak) {
  Blocks& b = blocks();
  std::lock_guard<std::mutex> l(b.mu);
  *hits = b.hits;
  *misses = b.misses;
  *live = int64_t(b.live);
  *cached = int64_t(b.cached);
  *peak = int64_t(b.peak);
}

}  // extern "C"
