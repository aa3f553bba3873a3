package torch

// gotch's C API defines these in its libtch archive, which every binary that
// imports gotch links; gotch just has no Go wrappers for them. Declaring them
// here (no libtorch headers needed) lets the linker resolve them there.

/*
#include <stdint.h>
void at_set_num_threads(int);
int at_get_num_threads();
int at_grad_set_enabled(int);

#include <malloc.h>
static int evolm_mmap_threshold(int n, int trim) {
	return mallopt(M_MMAP_THRESHOLD, n) == 1 && mallopt(M_TRIM_THRESHOLD, trim) == 1;
}

// evolm_claim_thread marks the calling OS thread as claimed and reports
// whether it already was. The mark is thread-local, so it dies with the
// thread.
static __thread int evolm_claimed;
static int evolm_claim_thread(void) { int was = evolm_claimed; evolm_claimed = 1; return was; }
static int evolm_thread_claimed(void) { return evolm_claimed; }
*/
import "C"

import "fmt"

// cClaimThread marks the calling OS thread and reports whether it was
// marked before.
func cClaimThread() bool { return C.evolm_claim_thread() == 1 }

// ThreadClaimed reports whether the calling goroutine's OS thread has been
// claimed by a goroutine that entered libtorch (claimThread), and so may hold
// a libgomp worker pool. It is meaningful on a goroutine locked to its thread
// (runtime.LockOSThread), or on one that has itself used libtorch.
func ThreadClaimed() bool { return C.evolm_thread_claimed() == 1 }

func cSetNumThreads(n int) { C.at_set_num_threads(C.int(n)) }
func cNumThreads() int     { return int(C.at_get_num_threads()) }

func cGradSetEnabled(on bool) bool {
	b := C.int(0)
	if on {
		b = 1
	}
	return C.at_grad_set_enabled(b) == 1
}

// SetMmapThreshold sets glibc's M_MMAP_THRESHOLD: host allocations of at
// least n bytes (CPU tensors among them) are mapped on their own and go
// back to the OS when freed. glibc's default threshold adapts upward to the
// largest freed block (up to 32 MiB), after which tensors of a few MiB come
// from the heap, which keeps its high-water mark: a server's RSS then grows
// with the longest prompt it has prefilled although every tensor was freed.
//
// A fixed threshold also fixes glibc's M_TRIM_THRESHOLD, which the adaptive
// one moves with it (to twice the threshold), at its 128 KiB default: the
// heap's top would then go back to the OS whenever 128 KiB of it are free,
// and the next pass fault it in again, page by page, for its tensors under
// n. So the trim threshold is set with it, to TrimThreshold(n): at most
// that much free memory stays at the heap's top. (At a 1 MiB threshold a
// tiny model's yes/no judge took 17.8–19.4 ms a request without it and
// 13.3–14.8 with it, 9–10 under glibc's adaptive default, which also keeps
// the blocks of 1 MiB and more: docs/engine.md, "Host memory".)
func SetMmapThreshold(n int) error {
	if n <= 0 || C.evolm_mmap_threshold(C.int(n), C.int(TrimThreshold(n))) != 1 {
		return fmt.Errorf("mallopt(M_MMAP_THRESHOLD, %d) and mallopt(M_TRIM_THRESHOLD, %d) failed", n, TrimThreshold(n))
	}
	return nil
}

// TrimThreshold is the M_TRIM_THRESHOLD SetMmapThreshold sets with an mmap
// threshold of n: 16 MiB, or 2n (glibc's own rule) when that is more.
func TrimThreshold(n int) int { return max(16<<20, 2*n) }
