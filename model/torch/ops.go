package torch

import (
	"github.com/sugarme/gotch"
	lib "github.com/sugarme/gotch/libtch"
	"github.com/sugarme/gotch/ts"
)

// Ops on a Scope: each returns a tensor owned by the scope, or nil once the
// scope has an error. They are thin: same semantics as the torch function of
// the same name. Any gotch op not listed here can be used through Track.

// NoDType leaves the dtype argument of Softmax, Sum … unset (keep the input's).
const NoDType DType = gotch.Invalid

func (s *Scope) scalarOp(op string, x *Tensor, v float64, f func(*ts.Scalar) (*Tensor, error)) *Tensor {
	if !s.ok(op, x) {
		return nil
	}
	sc := ts.FloatScalar(v)
	defer sc.Drop()
	return s.op(op)(f(sc))
}

// --- creation ---

// Zeros is torch.zeros(shape, dtype, device).
func (s *Scope) Zeros(shape []int64, dtype DType, dev Device) *Tensor {
	if !s.ok("Zeros") {
		return nil
	}
	if len(shape) == 0 {
		return s.Reshape(s.Zeros([]int64{1}, dtype, dev))
	}
	return s.op("Zeros")(ts.Zeros(shape, dtype, dev))
}

// Ones is torch.ones(shape, dtype, device).
func (s *Scope) Ones(shape []int64, dtype DType, dev Device) *Tensor {
	if !s.ok("Ones") {
		return nil
	}
	if len(shape) == 0 {
		return s.Reshape(s.Ones([]int64{1}, dtype, dev))
	}
	return s.op("Ones")(ts.Ones(shape, dtype, dev))
}

// Full is torch.full(shape, v, dtype, device).
func (s *Scope) Full(shape []int64, v float64, dtype DType, dev Device) *Tensor {
	if !s.ok("Full") {
		return nil
	}
	if len(shape) == 0 {
		return s.Reshape(s.Full([]int64{1}, v, dtype, dev))
	}
	sc := ts.FloatScalar(v)
	defer sc.Drop()
	return s.op("Full")(ts.Full(shape, sc, dtype, dev))
}

// Empty is torch.empty(shape, dtype, device): uninitialized memory.
func (s *Scope) Empty(shape []int64, dtype DType, dev Device) *Tensor {
	if !s.ok("Empty") {
		return nil
	}
	if len(shape) == 0 {
		return s.Reshape(s.Empty([]int64{1}, dtype, dev))
	}
	return s.op("Empty")(ts.Empty(shape, dtype, dev))
}

// Arange is torch.arange(start, end, dtype, device).
func (s *Scope) Arange(start, end int64, dtype DType, dev Device) *Tensor {
	if !s.ok("Arange") {
		return nil
	}
	a, b := ts.IntScalar(start), ts.IntScalar(end)
	defer a.Drop()
	defer b.Drop()
	return s.op("Arange")(ts.ArangeStart(a, b, dtype, dev))
}

// Randn is torch.randn(shape) from libtorch's generator (see ManualSeed).
func (s *Scope) Randn(shape []int64, dtype DType, dev Device) *Tensor {
	if !s.ok("Randn") {
		return nil
	}
	if len(shape) == 0 {
		return s.Reshape(s.Randn([]int64{1}, dtype, dev))
	}
	return s.op("Randn")(ts.Randn(shape, dtype, dev))
}

// Rand is torch.rand(shape): uniform in [0, 1).
func (s *Scope) Rand(shape []int64, dtype DType, dev Device) *Tensor {
	x := s.Empty(shape, dtype, dev)
	if x == nil {
		return nil
	}
	s.inPlace("Rand", func(out *lib.Ctensor) { lib.AtgUniform_(out, ctensor(x), 0, 1) }, x)
	if s.Err() != nil {
		return nil
	}
	return x
}

// --- elementwise ---

// Add is a + b (broadcasting).
func (s *Scope) Add(a, b *Tensor) *Tensor {
	if !s.ok("Add", a, b) {
		return nil
	}
	return s.op("Add")(a.Add(b, false))
}

// Sub is a - b.
func (s *Scope) Sub(a, b *Tensor) *Tensor {
	if !s.ok("Sub", a, b) {
		return nil
	}
	return s.op("Sub")(a.Sub(b, false))
}

// Mul is a * b.
func (s *Scope) Mul(a, b *Tensor) *Tensor {
	if !s.ok("Mul", a, b) {
		return nil
	}
	return s.op("Mul")(a.Mul(b, false))
}

// Div is a / b.
func (s *Scope) Div(a, b *Tensor) *Tensor {
	if !s.ok("Div", a, b) {
		return nil
	}
	return s.op("Div")(a.Div(b, false))
}

// AddScalar is x + v.
func (s *Scope) AddScalar(x *Tensor, v float64) *Tensor {
	return s.scalarOp("AddScalar", x, v, func(sc *ts.Scalar) (*Tensor, error) { return x.AddScalar(sc, false) })
}

// MulScalar is x * v.
func (s *Scope) MulScalar(x *Tensor, v float64) *Tensor {
	return s.scalarOp("MulScalar", x, v, func(sc *ts.Scalar) (*Tensor, error) { return x.MulScalar(sc, false) })
}

// DivScalar is x / v.
func (s *Scope) DivScalar(x *Tensor, v float64) *Tensor {
	return s.scalarOp("DivScalar", x, v, func(sc *ts.Scalar) (*Tensor, error) { return x.DivScalar(sc, false) })
}

// PowScalar is x ** v.
func (s *Scope) PowScalar(x *Tensor, v float64) *Tensor {
	return s.scalarOp("PowScalar", x, v, func(sc *ts.Scalar) (*Tensor, error) { return x.PowTensorScalar(sc, false) })
}

// ClampMin is x.clamp(min=v).
func (s *Scope) ClampMin(x *Tensor, v float64) *Tensor {
	return s.scalarOp("ClampMin", x, v, func(sc *ts.Scalar) (*Tensor, error) { return x.ClampMin(sc, false) })
}

// ClampMax is x.clamp(max=v).
func (s *Scope) ClampMax(x *Tensor, v float64) *Tensor {
	return s.scalarOp("ClampMax", x, v, func(sc *ts.Scalar) (*Tensor, error) { return x.ClampMax(sc, false) })
}

// Clamp is x.clamp(lo, hi).
func (s *Scope) Clamp(x *Tensor, lo, hi float64) *Tensor {
	if !s.ok("Clamp", x) {
		return nil
	}
	a, b := ts.FloatScalar(lo), ts.FloatScalar(hi)
	defer a.Drop()
	defer b.Drop()
	return s.op("Clamp")(x.Clamp(a, b, false))
}

func (s *Scope) unary(op string, x *Tensor, f func(bool) (*Tensor, error)) *Tensor {
	if !s.ok(op, x) {
		return nil
	}
	return s.op(op)(f(false))
}

// Neg is -x.
func (s *Scope) Neg(x *Tensor) *Tensor { return s.unary("Neg", x, x.Neg) }

// Exp is exp(x).
func (s *Scope) Exp(x *Tensor) *Tensor { return s.unary("Exp", x, x.Exp) }

// Log is log(x).
func (s *Scope) Log(x *Tensor) *Tensor { return s.unary("Log", x, x.Log) }

// Sqrt is sqrt(x).
func (s *Scope) Sqrt(x *Tensor) *Tensor { return s.unary("Sqrt", x, x.Sqrt) }

// Rsqrt is 1/sqrt(x).
func (s *Scope) Rsqrt(x *Tensor) *Tensor { return s.unary("Rsqrt", x, x.Rsqrt) }

// Square is x*x.
func (s *Scope) Square(x *Tensor) *Tensor { return s.unary("Square", x, x.Square) }

// Abs is |x|.
func (s *Scope) Abs(x *Tensor) *Tensor { return s.unary("Abs", x, x.Abs) }

// Silu is x * sigmoid(x).
func (s *Scope) Silu(x *Tensor) *Tensor { return s.unary("Silu", x, x.Silu) }

// Sigmoid is 1/(1+exp(-x)).
func (s *Scope) Sigmoid(x *Tensor) *Tensor { return s.unary("Sigmoid", x, x.Sigmoid) }

// Tanh is tanh(x).
func (s *Scope) Tanh(x *Tensor) *Tensor { return s.unary("Tanh", x, x.Tanh) }

// Cos is cos(x).
func (s *Scope) Cos(x *Tensor) *Tensor { return s.unary("Cos", x, x.Cos) }

// Sin is sin(x).
func (s *Scope) Sin(x *Tensor) *Tensor { return s.unary("Sin", x, x.Sin) }

// LogicalNot is ~x for a bool tensor.
func (s *Scope) LogicalNot(x *Tensor) *Tensor { return s.unary("LogicalNot", x, x.LogicalNot) }

// Isfinite is torch.isfinite(x).
func (s *Scope) Isfinite(x *Tensor) *Tensor { return s.unary("Isfinite", x, x.Isfinite) }

// Contiguous returns x in contiguous memory (x itself re-wrapped if already so).
func (s *Scope) Contiguous(x *Tensor) *Tensor { return s.unary("Contiguous", x, x.Contiguous) }

// Detach returns a view of x cut from the autograd graph.
func (s *Scope) Detach(x *Tensor) *Tensor { return s.unary("Detach", x, x.Detach) }

// Clone is a deep copy of x (x.clone()).
func (s *Scope) Clone(x *Tensor) *Tensor {
	if !s.ok("Clone", x) {
		return nil
	}
	return s.op("Clone")(x.ToDtype(x.DType(), false, true, false))
}

// Maximum is the elementwise max of a and b.
func (s *Scope) Maximum(a, b *Tensor) *Tensor {
	if !s.ok("Maximum", a, b) {
		return nil
	}
	return s.op("Maximum")(a.Maximum(b, false))
}

// Minimum is the elementwise min of a and b.
func (s *Scope) Minimum(a, b *Tensor) *Tensor {
	if !s.ok("Minimum", a, b) {
		return nil
	}
	return s.op("Minimum")(a.Minimum(b, false))
}

// Where is torch.where(cond, a, b).
func (s *Scope) Where(cond, a, b *Tensor) *Tensor {
	if !s.ok("Where", cond, a, b) {
		return nil
	}
	return s.op("Where")(a.WhereSelf(cond, b, false))
}

// MaskedFill is x.masked_fill(mask, v).
func (s *Scope) MaskedFill(x, mask *Tensor, v float64) *Tensor {
	if !s.ok("MaskedFill", x, mask) {
		return nil
	}
	sc := ts.FloatScalar(v)
	defer sc.Drop()
	return s.op("MaskedFill")(x.MaskedFill(mask, sc, false))
}

// EqScalar is x == v (bool).
func (s *Scope) EqScalar(x *Tensor, v float64) *Tensor {
	return s.scalarOp("EqScalar", x, v, func(sc *ts.Scalar) (*Tensor, error) { return x.Eq(sc, false) })
}

// NeScalar is x != v (bool).
func (s *Scope) NeScalar(x *Tensor, v float64) *Tensor {
	return s.scalarOp("NeScalar", x, v, func(sc *ts.Scalar) (*Tensor, error) { return x.Ne(sc, false) })
}

// LtScalar is x < v (bool).
func (s *Scope) LtScalar(x *Tensor, v float64) *Tensor {
	return s.scalarOp("LtScalar", x, v, func(sc *ts.Scalar) (*Tensor, error) { return x.Lt(sc, false) })
}

// GtScalar is x > v (bool).
func (s *Scope) GtScalar(x *Tensor, v float64) *Tensor {
	return s.scalarOp("GtScalar", x, v, func(sc *ts.Scalar) (*Tensor, error) { return x.Gt(sc, false) })
}

// Eq is a == b elementwise (bool).
func (s *Scope) Eq(a, b *Tensor) *Tensor {
	if !s.ok("Eq", a, b) {
		return nil
	}
	return s.op("Eq")(a.EqTensor(b, false))
}

// LogicalAnd is a & b for bool tensors.
func (s *Scope) LogicalAnd(a, b *Tensor) *Tensor {
	if !s.ok("LogicalAnd", a, b) {
		return nil
	}
	return s.op("LogicalAnd")(a.LogicalAnd(b, false))
}

// LogicalOr is a | b for bool tensors.
func (s *Scope) LogicalOr(a, b *Tensor) *Tensor {
	if !s.ok("LogicalOr", a, b) {
		return nil
	}
	return s.op("LogicalOr")(a.LogicalOr(b, false))
}

// Gt is a > b elementwise (bool, broadcasting).
func (s *Scope) Gt(a, b *Tensor) *Tensor {
	if !s.ok("Gt", a, b) {
		return nil
	}
	return s.op("Gt")(a.GtTensor(b, false))
}

// Le is a <= b elementwise (bool, broadcasting).
func (s *Scope) Le(a, b *Tensor) *Tensor {
	if !s.ok("Le", a, b) {
		return nil
	}
	return s.op("Le")(a.LeTensor(b, false))
}
