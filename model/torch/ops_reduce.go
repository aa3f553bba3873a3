package torch

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
