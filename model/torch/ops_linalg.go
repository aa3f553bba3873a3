package torch

import (
	"github.com/sugarme/gotch/ts"
)

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
