package fused

// #include "fused.h"
import "C"

// KeepBlocks runs fn with host block caching on. A CPU training step
// allocates the same large tensors in every micro-batch (the logits chunk,
// its softmax and gradient, each B × chunk × V floats, and the
// activations), and glibc maps every block over its mmap threshold afresh
// and unmaps it when freed: the kernel then zeroes the block's pages again
// on first touch, which measured as much system time as the step's
// arithmetic took user time (docs/engine.md, "Host memory").
//
// While a KeepBlocks call runs, freed CPU tensor blocks of 1 MiB or more
// are kept and handed out again for a later request that fits them (the
// smallest that does, wasting at most an eighth). The cache is bounded so
// that the bytes of live and cached blocks together never exceed the most
// bytes of blocks ever live at once during the call: a new block first
// frees cached ones (largest first) when needed, so resident memory peaks
// no higher than without caching, and the memory plan (evolm plan) holds.
// When the last running KeepBlocks call returns, every cached block is
// freed, so memory goes back to the OS as before between training steps.
// Calls may nest and run concurrently. Blocks under 1 MiB, and blocks freed
// outside any call, go straight back to malloc.
//
// The first call installs the caching allocator as libtorch's CPU
// allocator for the rest of the process (blocks it handed out must come
// back to it). If another allocator of higher priority owns libtorch's CPU
// allocations, KeepBlocks runs fn without caching.
func KeepBlocks(fn func() error) error {
	if C.evolm_blocks_open() == 1 {
		defer C.evolm_blocks_close()
	}
	return fn()
}

// BlockStats are the caching allocator's counters.
type BlockStats struct {
	Hits, Misses int64 // large blocks handed out from the cache, and newly allocated, inside KeepBlocks
	Live, Cached int64 // bytes of large blocks in use, and cached idle
	Peak         int64 // the most Live bytes since the outermost running KeepBlocks call began
}

// Blocks returns the caching allocator's counters.
func Blocks() BlockStats {
	var h, m, l, c, p C.int64_t
	C.evolm_blocks_stats(&h, &m, &l, &c, &p)
	return BlockStats{Hits: int64(h), Misses: int64(m), Live: int64(l), Cached: int64(c), Peak: int64(p)}
}
