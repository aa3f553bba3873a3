package dist

/*
#include <stdlib.h>
#include "c10d.h"
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/evolm/evolm/model/torch"
)

// Zero2 reduces each trained parameter's gradient to its owning rank while
// backward runs (ZeRO stage 2), through libtorch's post-accumulate-grad
// hooks and c10d's reduce. A rank then holds the summed gradients of its own
// parameters and the few in flight, not the whole model's: for a model
// whose backward visits its layers last to first, pass the parameters in
// that order (the hooks reduce parameter i only after 0..i-1, so that every
// rank issues the same collectives in the same order).
//
// Use, on every rank of the group alike, per optimizer step:
//
//	Reset()                         (frees all gradients and sums)
//	for each pass (micro-batch, or an empty one where a rank has fewer):
//	    backward (the hooks reduce)  then EndPass()
//	Finish()                        (owners' .grad := their sums)
//
// Every rank must run the same number of passes. A gradient arriving after
// its parameter's reduction in a pass (a tensor used again in a later
// deferred backward stage) is held and reduced once more by EndPass. In
// evolm's GRPO step that is the lm_head alone (its log-prob chunks); a loss
// that ran the whole model twice per micro-batch, in two backward stages,
// would hold every gradient until EndPass, more than ZeRO-1 does. The
// reductions are one c10d reduce per parameter, not bucketed: on
// bench/dp's tiny model ZeRO-2's step took 6.05 s against ZeRO-1's 5.21.
type Zero2 struct {
	g *Group
	c *C.evolm_dist_zero2
}

// AttachZeRO2 hooks params (leaf tensors requiring grad, in reduction order;
// owners[i] is params[i]'s rank). Detach removes the hooks.
func (g *Group) AttachZeRO2(params []*torch.Tensor, owners []int) (*Zero2, error) {
	if len(params) != len(owners) {
		return nil, fmt.Errorf("dist: ZeRO-2: %d parameters, %d owners", len(params), len(owners))
	}
	s := g.g
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.c == nil {
		return nil, fmt.Errorf("dist: ZeRO-2: %w", ErrClosed)
	}
	n := len(params)
	hs := C.malloc(C.size_t(max(n, 1)) * C.size_t(unsafe.Sizeof(uintptr(0))))
	defer C.free(hs)
	ow := C.malloc(C.size_t(max(n, 1)) * C.size_t(unsafe.Sizeof(C.int(0))))
	defer C.free(ow)
	hv := unsafe.Slice((*unsafe.Pointer)(hs), max(n, 1))
	ov := unsafe.Slice((*C.int)(ow), max(n, 1))
	for i, p := range params {
		hv[i] = handle(p)
		ov[i] = C.int(owners[i])
	}
	var c *C.evolm_dist_zero2
	if err := cErr(C.evolm_dist_zero2_attach(s.c, (*unsafe.Pointer)(hs), (*C.int)(ow), C.int(n),
		C.int64_t(g.timeout.Milliseconds()), &c)); err != nil {
		return nil, fmt.Errorf("dist: ZeRO-2: %w", err)
	}
	return &Zero2{g: g, c: c}, nil
}

func (z *Zero2) call(what string, f func() *C.char) error {
	s := z.g.g
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.c == nil {
		return fmt.Errorf("dist: ZeRO-2 %s: %w", what, ErrClosed)
	}
	if err := cErr(f()); err != nil {
		if z.Failed() {
			s.failed.Store(true)
		}
		return fmt.Errorf("dist: ZeRO-2 %s (%s rank %d of %d): %w", what, s.backend, s.rank, s.world, err)
	}
	return nil
}

// EndPass reduces what this pass's backward left unreduced and the late
// gradients (collectives: call it on every rank, once per pass).
func (z *Zero2) EndPass() error {
	return z.call("end of pass", func() *C.char { return C.evolm_dist_zero2_end_pass(z.c) })
}

// Finish sets each owned parameter's .grad to its sum over ranks and
// passes; the others have none. Local: no collective.
func (z *Zero2) Finish() error {
	return z.call("finish", func() *C.char { return C.evolm_dist_zero2_finish(z.c) })
}

// Reset frees every gradient and sum and starts a step: after a failed or
// skipped step, and before each one.
func (z *Zero2) Reset() { C.evolm_dist_zero2_reset(z.c) }

// PeakGradBytes is the most gradient memory held at once since Reset: the
// .grad tensors of the hooked parameters not yet reduced plus this rank's
// sums.
func (z *Zero2) PeakGradBytes() int64 { return int64(C.evolm_dist_zero2_peak_bytes(z.c)) }

// LateReductions counts the parameters reduced again for late gradients
// since Reset.
func (z *Zero2) LateReductions() int64 { return int64(C.evolm_dist_zero2_late(z.c)) }

// Failed reports whether a reduction failed (in a hook during backward, or
// in EndPass): the group is then unusable, as after any failed collective.
func (z *Zero2) Failed() bool { return C.evolm_dist_zero2_failed(z.c) != 0 }

// MarkFailed records a failure seen through backward's error (a hook's
// reduction), so that the group's Close does not wait on it.
func (z *Zero2) MarkFailed() {
	if z.Failed() {
		z.g.g.failed.Store(true)
	}
}

// Detach removes the hooks; the Zero2 is unusable after.
func (z *Zero2) Detach() {
	if z.c != nil {
		C.evolm_dist_zero2_detach(z.c)
		z.c = nil
	}
}
