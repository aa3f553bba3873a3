package torch_test

import (
	"testing"

	"github.com/evolm/evolm/model/fused"
	"github.com/evolm/evolm/model/torch"
)

// TestDroppedLeafFreesStorage: a leaf made to require grad, backpropagated
// into and its gradient zeroed, frees its storage and its gradient's when
// its scope closes. gotch's in-place methods (RequiresGrad_, Detach_,
// Zero_) kept an extra handle, and so the storage, forever: every training
// micro-batch leaked the boundary leaves of its chunked log-probs. The
// caching allocator's count of live 1 MiB blocks (model/fused) sees it.
func TestDroppedLeafFreesStorage(t *testing.T) {
	err := fused.KeepBlocks(func() error {
		base := fused.Blocks().Live
		for it := range 3 {
			err := func() error {
				defer torch.SetGrad(true)()
				s := torch.NewScope()
				defer s.Close()
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
			}()
			if err != nil {
				return err
			}
			if n := fused.Blocks().Live - base; n != 0 {
				t.Errorf("iteration %d: %d bytes of dropped tensors still allocated", it, n)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
