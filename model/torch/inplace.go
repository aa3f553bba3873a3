package torch

import (
	lib "github.com/sugarme/gotch/libtch"
)

// In-place ops.
//
// gotch's in-place methods (x.Zero_(), x.MulScalar_(…), x.Uniform_(…))
// replace x's C handle with the new handle libtorch returns and never free
// the old one, which holds a reference to x's storage: x's memory then
// outlives every Drop. A temporary changed in place (a dropout mask drawn
// with uniform_, an update scaled with mul_) would never be freed. These
// call libtorch's bindings directly and free the returned handle, so x's
// own handle stays the only one.

// ctensor is x's C handle.
func ctensor(x *Tensor) lib.Ctensor { return lib.Ctensor(x.Ctensor()) }

// inPlace runs f, a gotch binding of an in-place op that writes a new
// handle to its result (x itself) into out, frees that handle and records
// a libtorch error on s.
func (s *Scope) inPlace(op string, f func(out *lib.Ctensor), xs ...*Tensor) {
	if !s.ok(op, xs...) {
		return
	}
	if err := inPlaceErr(op, f); err != nil {
		s.Fail(err)
	}
}

// inPlaceErr runs f as inPlace does, on the calling thread, and returns
// libtorch's error.
func inPlaceErr(op string, f func(out *lib.Ctensor)) error {
	var out lib.Ctensor
	f(&out)
	if err := torchErr(op); err != nil {
		return err
	}
	if out != nil {
		lib.AtFree(out)
	}
	return nil
}

// inPlaceScalar is inPlace with a float scalar argument.
func (s *Scope) inPlaceScalar(op string, v float64, f func(out *lib.Ctensor, sc lib.Cscalar), xs ...*Tensor) {
	s.inPlace(op, func(out *lib.Ctensor) {
		sc := lib.AtsFloat(v)
		defer lib.AtsFree(sc)
		f(out, sc)
	}, xs...)
}

// Add_ is x += y in place (broadcasting y).
func (s *Scope) Add_(x, y *Tensor) {
	s.inPlace("Add_", func(out *lib.Ctensor) { lib.AtgAdd_(out, ctensor(x), ctensor(y)) }, x, y)
}

// Mul_ is x *= y in place (broadcasting y).
func (s *Scope) Mul_(x, y *Tensor) {
	s.inPlace("Mul_", func(out *lib.Ctensor) { lib.AtgMul_(out, ctensor(x), ctensor(y)) }, x, y)
}

// MulScalar_ is x *= v in place.
func (s *Scope) MulScalar_(x *Tensor, v float64) {
	s.inPlaceScalar("MulScalar_", v, func(out *lib.Ctensor, sc lib.Cscalar) { lib.AtgMulScalar_(out, ctensor(x), sc) }, x)
}

// DivScalar_ is x /= v in place.
func (s *Scope) DivScalar_(x *Tensor, v float64) {
	s.inPlaceScalar("DivScalar_", v, func(out *lib.Ctensor, sc lib.Cscalar) { lib.AtgDivScalar_(out, ctensor(x), sc) }, x)
}

// AddScalar_ is x += v in place.
func (s *Scope) AddScalar_(x *Tensor, v float64) {
	s.inPlaceScalar("AddScalar_", v, func(out *lib.Ctensor, sc lib.Cscalar) { lib.AtgAddScalar_(out, ctensor(x), sc) }, x)
}

// Lerp_ is x.lerp_(end, w) in place: x + w·(end − x).
func (s *Scope) Lerp_(x, end *Tensor, w float64) {
	s.inPlaceScalar("Lerp_", w, func(out *lib.Ctensor, sc lib.Cscalar) { lib.AtgLerp_(out, ctensor(x), ctensor(end), sc) }, x, end)
}

// MaskedFill_ sets x to v where mask is true, in place.
func (s *Scope) MaskedFill_(x, mask *Tensor, v float64) {
	s.inPlaceScalar("MaskedFill_", v, func(out *lib.Ctensor, sc lib.Cscalar) { lib.AtgMaskedFill_(out, ctensor(x), ctensor(mask), sc) }, x, mask)
}

// Out variants: libtorch writes the result into dst, a tensor of the
// result's shape and dtype (a view of a reused buffer), instead of
// allocating one. A decode step's vocabulary-sized tensors are megabytes;
// writing them into buffers kept across steps saves their page faults and
// zeroing (the kernel clears every fresh page), which were a third of a
// batched sampling step on the CPU.

// LinearOut writes x @ w.T (F.linear without bias) into dst. The result is
// bit-identical to Linear: both run libtorch's matmul.
func (s *Scope) LinearOut(dst, x, w *Tensor) {
	s.inPlace("LinearOut", func(out *lib.Ctensor) {
		lib.AtgLinearOut(out, ctensor(dst), ctensor(s.compact(x)), ctensor(w), nil)
	}, dst, x, w)
}

// SubOut writes a − b (broadcasting) into dst.
func (s *Scope) SubOut(dst, a, b *Tensor) {
	s.inPlace("SubOut", func(out *lib.Ctensor) { lib.AtgSubOut(out, ctensor(dst), ctensor(a), ctensor(b)) }, dst, a, b)
}

// Exp_ is x = exp(x) in place.
func (s *Scope) Exp_(x *Tensor) {
	s.inPlace("Exp_", func(out *lib.Ctensor) { lib.AtgExp_(out, ctensor(x)) }, x)
}

// Div_ is x /= y in place (broadcasting y).
func (s *Scope) Div_(x, y *Tensor) {
	s.inPlace("Div_", func(out *lib.Ctensor) { lib.AtgDiv_(out, ctensor(x), ctensor(y)) }, x, y)
}

// Cumsum_ is the inclusive cumulative sum of x along dim, in place, in x's
// dtype.
func (s *Scope) Cumsum_(x *Tensor, dim int64) {
	s.inPlace("Cumsum_", func(out *lib.Ctensor) { lib.AtgCumsum_(out, ctensor(x), dim, -1) }, x)
}
