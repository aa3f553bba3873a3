package torch

import (
	"fmt"

	lib "github.com/sugarme/gotch/libtch"
)

func copyInPlace(dst, src *Tensor) error {
	lib.AtCopy_(lib.Ctensor(dst.Ctensor()), lib.Ctensor(src.Ctensor()))
	return torchErr("Copy_")
}

// CopyInto copies src into dst in place (dst.copy_(src)); shapes must
// broadcast, dtypes convert.
func CopyInto(dst, src *Tensor) error {
	defer lockThread()()
	if dst == nil || src == nil {
		return fmt.Errorf("torch Copy_: nil tensor")
	}
	return copyInPlace(dst, src)
}

// SetRequiresGrad sets x.requires_grad in place (leaf tensors only).
func SetRequiresGrad(x *Tensor, on bool) error {
	defer lockThread()()
	if x == nil || x.Ctensor() == nil {
		return fmt.Errorf("torch RequiresGrad_: nil tensor")
	}
	b := int32(0)
	if on {
		b = 1
	}
	// Not gotch's x.RequiresGrad_, which leaks a handle and so x's storage
	// (inplace.go).
	return inPlaceErr("RequiresGrad_", func(out *lib.Ctensor) { lib.AtgRequiresGrad_(out, ctensor(x), b) })
}

// RequiresGrad reports x.requires_grad.
func RequiresGrad(x *Tensor) bool { return lib.AtRequiresGrad(lib.Ctensor(x.Ctensor())) }

// Backward runs loss.backward() (loss must be a scalar), accumulating into the
// .grad of every leaf that requires grad, and then the deferred backward
// stages registered on this OS thread (deferred.go: chunked log-probs,
// activation checkpointing). Run it with grad mode on.
func Backward(loss *Tensor) error {
	defer lockThread()()
	if err := backward(loss); err != nil {
		return err
	}
	return runStages()
}

// backward is loss.backward() alone.
func backward(loss *Tensor) error {
	defer lockThread()()
	if loss == nil {
		return fmt.Errorf("torch Backward: nil loss")
	}
	if err := loss.Backward(); err != nil {
		return cleanErr("Backward", err)
	}
	return nil
}

// Grad returns x.grad as a tensor owned by s, or nil when x has no gradient
// yet. The result shares storage with the gradient: in-place updates of it
// update x.grad.
func (s *Scope) Grad(x *Tensor) *Tensor {
	if !s.ok("Grad", x) {
		return nil
	}
	g := s.op("Grad")(x.Grad(false))
	if g == nil {
		return nil
	}
	if !Defined(g) {
		s.tensors = s.tensors[:len(s.tensors)-1]
		drop(g)
		return nil
	}
	return g
}

// ZeroGrad sets x.grad to zero in place when it exists (gotch's ZeroGrad uses
// Must* and leaks the wrapper).
func ZeroGrad(x *Tensor) error {
	defer lockThread()()
	g, err := x.Grad(false)
	if err != nil {
		return cleanErr("Grad", err)
	}
	defer g.Drop()
	if !Defined(g) {
		return nil
	}
	if err := inPlaceErr("Detach_", func(out *lib.Ctensor) { lib.AtgDetach_(out, ctensor(g)) }); err != nil {
		return err
	}
	return inPlaceErr("Zero_", func(out *lib.Ctensor) { lib.AtgZero_(out, ctensor(g)) })
}

// Defined reports whether x holds a defined tensor (not torch's None).
func Defined(x *Tensor) bool {
	defer lockThread()()
	if x == nil || x.Ctensor() == nil {
		return false
	}
	ok, err := x.Defined()
	return err == nil && ok
}
