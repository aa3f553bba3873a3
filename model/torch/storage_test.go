package torch_test

import (
	"testing"

	"github.com/evolm/evolm/model/modeltest"
	"github.com/evolm/evolm/model/torch"
)

// TestDroppedLeafFreesStorage: a leaf made to require grad, backpropagated
// into and its gradient zeroed, frees its storage and its gradient's when
// its scope closes. gotch's in-place methods (RequiresGrad_, Detach_,
// Zero_) kept an extra handle, and so the storage, forever: every training
// micro-batch leaked the boundary leaves of its chunked log-probs. The
// caching allocator's count of live 1 MiB blocks (model/fused) sees it.
func TestDroppedLeafFreesStorage(t *testing.T) {
	modeltest.CheckFreesBlocks(t, "a 1 MiB leaf", 3, func(s *torch.Scope) error {
		x := s.Full([]int64{256, 1024}, 0.5, torch.Float32, torch.CPU) // 1 MiB
		if err := torch.SetRequiresGrad(x, true); err != nil {
			return err
		}
		if err := torch.Backward(s.Sum(s.Mul(x, x))); err != nil {
			return err
		}
		if g := s.Grad(x); g == nil {
			t.Fatal("no gradient after backward")
		}
		return torch.ZeroGrad(x)
	})
}
