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

// --- reductions ---

// Sum is x.sum() over all elements (a 0-dim tensor).
func (s *Scope) Sum(x *Tensor) *Tensor {
	if !s.ok("Sum", x) {
		return nil
	}
	return s.op("Sum")(x.Sum(NoDType, false))
}

// SumDim is x.sum(dims, keepdim).
func (s *Scope) SumDim(x *Tensor, dims []int64, keepdim bool) *Tensor {
	if !s.ok("SumDim", x) {
		return nil
	}
	return s.op("SumDim")(x.SumDimIntlist(dims, keepdim, NoDType, false))
}

// Mean is x.mean() over all elements.
func (s *Scope) Mean(x *Tensor) *Tensor {
	if !s.ok("Mean", x) {
		return nil
	}
	return s.op("Mean")(x.Mean(NoDType, false))
}

// MeanDim is x.mean(dims, keepdim).
func (s *Scope) MeanDim(x *Tensor, dims []int64, keepdim bool) *Tensor {
	if !s.ok("MeanDim", x) {
		return nil
	}
	return s.op("MeanDim")(x.MeanDim(dims, keepdim, NoDType, false))
}

// Amax is x.amax(dims, keepdim).
func (s *Scope) Amax(x *Tensor, dims []int64, keepdim bool) *Tensor {
	if !s.ok("Amax", x) {
		return nil
	}
	return s.op("Amax")(x.Amax(dims, keepdim, false))
}

// Argmax is x.argmax(dim, keepdim) (int64).
func (s *Scope) Argmax(x *Tensor, dim int64, keepdim bool) *Tensor {
	if !s.ok("Argmax", x) {
		return nil
	}
	return s.op("Argmax")(x.Argmax([]int64{dim}, keepdim, false))
}

// Logsumexp is x.logsumexp(dims, keepdim).
func (s *Scope) Logsumexp(x *Tensor, dims []int64, keepdim bool) *Tensor {
	if !s.ok("Logsumexp", x) {
		return nil
	}
	return s.op("Logsumexp")(x.Logsumexp(dims, keepdim, false))
}

// Cumsum is x.cumsum(dim).
func (s *Scope) Cumsum(x *Tensor, dim int64) *Tensor {
	if !s.ok("Cumsum", x) {
		return nil
	}
	return s.op("Cumsum")(x.Cumsum(dim, NoDType, false))
}

// Softmax is x.softmax(dim, dtype); dtype NoDType keeps x's dtype, Float32
// upcasts first (as HF does for attention).
func (s *Scope) Softmax(x *Tensor, dim int64, dtype DType) *Tensor {
	if !s.ok("Softmax", x) {
		return nil
	}
	return s.op("Softmax")(x.Softmax(dim, dtype, false))
}

// LogSoftmax is x.log_softmax(dim, dtype).
func (s *Scope) LogSoftmax(x *Tensor, dim int64, dtype DType) *Tensor {
	if !s.ok("LogSoftmax", x) {
		return nil
	}
	return s.op("LogSoftmax")(x.LogSoftmax(dim, dtype, false))
}

// Sort is x.sort(dim, descending): values and int64 indices.
func (s *Scope) Sort(x *Tensor, dim int64, descending bool) (values, indices *Tensor) {
	if !s.ok("Sort", x) {
		return nil, nil
	}
	v, i, err := x.Sort(dim, descending, false)
	if err != nil {
		s.Fail(cleanErr("Sort", err))
		return nil, nil
	}
	return s.track("Sort", v, nil), s.track("Sort", i, nil)
}

// Topk is x.topk(k, dim, largest, sorted=true): values and int64 indices.
func (s *Scope) Topk(x *Tensor, k, dim int64, largest bool) (values, indices *Tensor) {
	if !s.ok("Topk", x) {
		return nil, nil
	}
	v, i, err := x.Topk(k, dim, largest, true, false)
	if err != nil {
		s.Fail(cleanErr("Topk", err))
		return nil, nil
	}
	return s.track("Topk", v, nil), s.track("Topk", i, nil)
}

// Multinomial is torch.multinomial(probs, n, replacement) (int64 indices),
// drawn from libtorch's generator.
func (s *Scope) Multinomial(probs *Tensor, n int64, replacement bool) *Tensor {
	if !s.ok("Multinomial", probs) {
		return nil
	}
	return s.op("Multinomial")(probs.Multinomial(n, replacement, false))
}

// --- linear algebra and lookups ---

// Matmul is a @ b.
func (s *Scope) Matmul(a, b *Tensor) *Tensor {
	if !s.ok("Matmul", a, b) {
		return nil
	}
	return s.op("Matmul")(a.Matmul(b, false))
}

// Linear is x @ w.T + b (F.linear); b may be nil. x (…, in), w (out, in).
func (s *Scope) Linear(x, w, b *Tensor) *Tensor {
	if !s.ok("Linear", x, w) {
		return nil
	}
	if b == nil {
		b = ts.None
	}
	return s.op("Linear")(ts.Linear(s.compact(x), w, b))
}

// compact returns x with the strides of a fresh tensor of its shape: x
// itself when it has them, else a view or a contiguous copy. libtorch 2.1's
// matmul takes a slow path for an input of 3 or more dimensions whose
// strides are not these, such as the last position (B, 1, C) narrowed from
// (B, T, C) — even at B = 1, where is_contiguous() holds. For a bf16 lm_head
// on CPU that path was 30–150× slower and made a temporary copy of the
// weight (1.2 GB for Qwen3-8B); PyTorch's F.linear does the same.
func (s *Scope) compact(x *Tensor) *Tensor {
	defer lockThread()()
	sh, err := x.Size()
	if err != nil || len(sh) < 3 {
		return x
	}
	st, err := x.Stride()
	if err != nil {
		return x
	}
	want := int64(1)
	for i := len(sh) - 1; i >= 0; i-- {
		if st[i] != want {
			return s.View(s.Contiguous(x), sh...) // a view recomputes the strides
		}
		want *= sh[i]
	}
	return x
}

// Embedding looks ids (int64, any shape) up in w (V, C): (…, C).
func (s *Scope) Embedding(w, ids *Tensor) *Tensor {
	if !s.ok("Embedding", w, ids) {
		return nil
	}
	return s.op("Embedding")(ts.Embedding(w, ids, -1, false, false))
}

// Gather is x.gather(dim, index).
func (s *Scope) Gather(x *Tensor, dim int64, index *Tensor) *Tensor {
	if !s.ok("Gather", x, index) {
		return nil
	}
	return s.op("Gather")(x.Gather(dim, index, false, false))
}

// IndexSelect is x.index_select(dim, index).
func (s *Scope) IndexSelect(x *Tensor, dim int64, index *Tensor) *Tensor {
	if !s.ok("IndexSelect", x, index) {
		return nil
	}
	return s.op("IndexSelect")(x.IndexSelect(dim, index, false))
}

// --- shapes (views share storage with their input) ---

// Reshape is x.reshape(shape).
func (s *Scope) Reshape(x *Tensor, shape ...int64) *Tensor {
	if !s.ok("Reshape", x) {
		return nil
	}
	if len(shape) == 0 { // gotch cannot pass an empty shape: take element 0 of a flat view
		return s.Select(s.Reshape(x, 1), 0, 0)
	}
	return s.op("Reshape")(x.Reshape(shape, false))
}

// View is x.view(shape).
func (s *Scope) View(x *Tensor, shape ...int64) *Tensor {
	if !s.ok("View", x) {
		return nil
	}
	if len(shape) == 0 {
		return s.Select(s.View(x, 1), 0, 0)
	}
	return s.op("View")(x.View(shape, false))
}

// Transpose is x.transpose(d0, d1).
func (s *Scope) Transpose(x *Tensor, d0, d1 int64) *Tensor {
	if !s.ok("Transpose", x) {
		return nil
	}
	return s.op("Transpose")(x.Transpose(d0, d1, false))
}

// Permute is x.permute(dims).
func (s *Scope) Permute(x *Tensor, dims ...int64) *Tensor {
	if !s.ok("Permute", x) {
		return nil
	}
	return s.op("Permute")(x.Permute(dims, false))
}

// Unsqueeze is x.unsqueeze(dim).
func (s *Scope) Unsqueeze(x *Tensor, dim int64) *Tensor {
	if !s.ok("Unsqueeze", x) {
		return nil
	}
	return s.op("Unsqueeze")(x.Unsqueeze(dim, false))
}

// Squeeze is x.squeeze(dim).
func (s *Scope) Squeeze(x *Tensor, dim int64) *Tensor {
	if !s.ok("Squeeze", x) {
		return nil
	}
	return s.op("Squeeze")(x.SqueezeDim(dim, false))
}

// Expand is x.expand(shape) (-1 keeps a dim).
func (s *Scope) Expand(x *Tensor, shape ...int64) *Tensor {
	if !s.ok("Expand", x) {
		return nil
	}
	return s.op("Expand")(x.Expand(shape, false, false))
}

// Narrow is x.narrow(dim, start, length): a view.
func (s *Scope) Narrow(x *Tensor, dim, start, length int64) *Tensor {
	if !s.ok("Narrow", x) {
		return nil
	}
	return s.op("Narrow")(x.Narrow(dim, start, length, false))
}

// Select is x.select(dim, i): a view without dim.
func (s *Scope) Select(x *Tensor, dim, i int64) *Tensor {
	if !s.ok("Select", x) {
		return nil
	}
	return s.op("Select")(x.Select(dim, i, false))
}

// Flatten is x.flatten(start, end).
func (s *Scope) Flatten(x *Tensor, start, end int64) *Tensor {
	if !s.ok("Flatten", x) {
		return nil
	}
	return s.op("Flatten")(x.Flatten(start, end, false))
}

// Cat is torch.cat(xs, dim).
func (s *Scope) Cat(xs []*Tensor, dim int64) *Tensor {
	if !s.ok("Cat", xs...) {
		return nil
	}
	return s.op("Cat")(ts.Cat(xs, dim))
}

// Stack is torch.stack(xs, dim).
func (s *Scope) Stack(xs []*Tensor, dim int64) *Tensor {
	if !s.ok("Stack", xs...) {
		return nil
	}
	return s.op("Stack")(ts.Stack(xs, dim))
}

// Tril is x.tril(diagonal).
func (s *Scope) Tril(x *Tensor, diagonal int64) *Tensor {
	if !s.ok("Tril", x) {
		return nil
	}
	return s.op("Tril")(x.Tril(diagonal, false))
}

// Triu is x.triu(diagonal).
func (s *Scope) Triu(x *Tensor, diagonal int64) *Tensor {
	if !s.ok("Triu", x) {
		return nil
	}
	return s.op("Triu")(x.Triu(diagonal, false))
}

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

// RepeatInterleave is x.repeat_interleave(n, dim).
func (s *Scope) RepeatInterleave(x *Tensor, n, dim int64) *Tensor {
	if !s.ok("RepeatInterleave", x) {
		return nil
	}
	return s.op("RepeatInterleave")(x.RepeatInterleaveSelfInt(n, []int64{dim}, nil, false))
}

// ScaledDotProductAttention is F.scaled_dot_product_attention(q, k, v,
// attn_mask=mask, scale=scale) without dropout: q (B, nh, T, hs), k and v
// (B, nh, Tk, hs), mask nil or broadcastable to (B, nh, T, Tk), additive
// (float) or boolean (true attends).
func (s *Scope) ScaledDotProductAttention(q, k, v, mask *Tensor, scale float64) *Tensor {
	if !s.ok("ScaledDotProductAttention", q, k, v) {
		return nil
	}
	if mask == nil {
		mask = ts.None
	}
	return s.op("ScaledDotProductAttention")(ts.ScaledDotProductAttention(q, k, v, mask, 0, false, []float64{scale}))
}
