package sample

import (
	"slices"
	"testing"

	"github.com/evolm/evolm/model/torch"
)

// TestWorkspaceFollowsTheDevice: a Workspace keys its buffers by device: a
// step on another device (a CUDA decode loop after a CPU one) never gets
// the CPU buffer. Here the other device is one this machine lacks, so the
// new buffer fails to allocate, with an error, where a stale CPU buffer
// would have come back. (The sampling ops on a CUDA device are libtorch's
// same ops there; scripts/gpu-check.sh runs sampled generation on a GPU.)
func TestWorkspaceFollowsTheDevice(t *testing.T) {
	base := torch.Live()
	func() {
		s := torch.NewScope()
		defer s.Close()
		ws := &Workspace{}
		defer ws.Close()
		if _, err := ws.Logits(s, 2, 10, torch.CPU); err != nil {
			t.Fatal(err)
		}
		devs, _ := torch.CUDADevices()
		c := s.Child()
		defer c.Close()
		if x, err := ws.Logits(c, 2, 10, torch.CUDA(len(devs))); err == nil {
			d, _ := torch.DeviceOf(x)
			t.Errorf("a step on cuda:%d (of %d devices) got a buffer on %s", len(devs), len(devs), torch.DeviceName(d))
		}
	}()
	if n := torch.Live() - base; n != 0 {
		t.Errorf("%d tensors leaked", n)
	}
}

// TestSampleTakesOtherDTypes: logits of another dtype (a bfloat16 model's)
// are sampled in float32: the tokens and log-probs of their float32 copy,
// greedy and temperature rows alike.
func TestSampleTakesOtherDTypes(t *testing.T) {
	const b, v = 6, 300
	s := torch.NewScope()
	defer s.Close()
	x, _ := randomLogits(s, t, b, v, 31)
	x16 := s.ToDType(x, torch.BFloat16)
	got, err := Sample(s, x16, mixedRows(b, 50))
	if err != nil {
		t.Fatal(err)
	}
	want, err := Sample(s, s.Float32(x16), mixedRows(b, 50))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Tokens, want.Tokens) || !slices.Equal(got.LogProbs, want.LogProbs) {
		t.Errorf("bfloat16 logits: tokens %v log-probs %v; their float32 copy: %v %v", got.Tokens, got.LogProbs, want.Tokens, want.LogProbs)
	}
}
