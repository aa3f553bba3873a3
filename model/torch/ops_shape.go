package torch

import (
	"github.com/sugarme/gotch/ts"
)

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

// RepeatInterleave is x.repeat_interleave(n, dim).
func (s *Scope) RepeatInterleave(x *Tensor, n, dim int64) *Tensor {
	if !s.ok("RepeatInterleave", x) {
		return nil
	}
	return s.op("RepeatInterleave")(x.RepeatInterleaveSelfInt(n, []int64{dim}, nil, false))
}
