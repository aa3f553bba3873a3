package torch

import (
	lib "github.com/sugarme/gotch/libtch"
)

// --- dtype and device ---

// ToDType converts x to dtype; when x already has it the result shares x's
// storage (x.to(dtype)).
func (s *Scope) ToDType(x *Tensor, dtype DType) *Tensor {
	if !s.ok("ToDType", x) {
		return nil
	}
	return s.op("ToDType")(x.ToDtype(dtype, false, false, false))
}

// To moves x to device and converts it to dtype, always copying.
func (s *Scope) To(x *Tensor, dev Device, dtype DType) *Tensor {
	if !s.ok("To", x) {
		return nil
	}
	return s.op("To")(x.ToDevice(dev, dtype, false, true, false))
}

// Float32 is x in float32 (x.float()).
func (s *Scope) Float32(x *Tensor) *Tensor { return s.ToDType(x, Float32) }

// --- in place (no new tensor) ---

// Copy_ copies src into dst in place (dst.copy_(src), broadcasting src).
func (s *Scope) Copy_(dst, src *Tensor) {
	if !s.ok("Copy_", dst, src) {
		return
	}
	if err := copyInPlace(dst, src); err != nil {
		s.Fail(err)
	}
}

// Zero_ zeroes x in place.
func (s *Scope) Zero_(x *Tensor) {
	if !s.ok("Zero_", x) {
		return
	}
	s.inPlace("Zero_", func(out *lib.Ctensor) { lib.AtgZero_(out, ctensor(x)) }, x)
}
