package fused_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/evolm/evolm/model/fused"
	"github.com/evolm/evolm/model/torch"
)

// counters are the shim's counts of its CPU float32 kernels' runs.
func counters() [6]int64 {
	r, p, sb, v := fused.ElementwiseCalls()
	return [6]int64{r, p, sb, v, fused.GroupedCalls(), fused.MaskRowCalls()}
}

// TestOffCPUTakesTheOps runs the decoder stack on tensors of another
// device, the meta device (which holds no data, so that this runs without
// a GPU): every CPU float32 kernel of the shim (RMSNorm's, the rotary
// step's, the scores' scale and mask, MKL's batched GEMM over the
// un-repeated keys) declines it and the stack runs ATen's ops instead, as
// on CUDA: the same stack on the CPU runs them all, on meta none, and the
// ops' shapes check out (the hidden states come back (B, T, C), eager and
// SDPA, with a KV cache). The shim's other entry points behave as on
// CUDA too: Argmax takes at::argmax, SelectRows copies on the buffers'
// device (a row broadcast), and the CPU-only ones (PackedLinear, the mask from Pad and
// Branches) refuse the device in their error. What ATen's CUDA kernels
// compute is gpu-check.sh's to show.
func TestOffCPUTakesTheOps(t *testing.T) {
	defer torch.SetGrad(false)()
	const B, T, C, I, nh, nkv, hs, L = 2, 8, 64, 128, 4, 2, 16, 2
	cfg := fused.Config{Layers: L, Heads: nh, KVHeads: nkv, HeadDim: hs, NormEps: 1e-6, AttnScale: 0.25}
	base := torch.Live()
	s := torch.NewScope()
	defer s.Close()
	torch.ManualSeed(3)
	rnd := func(shape ...int64) *torch.Tensor { return s.MulScalar(s.Randn(shape, torch.Float32, torch.CPU), 0.2) }
	one := func(n int64) *torch.Tensor { return s.AddScalar(rnd(n), 1) }
	var weights []*torch.Tensor
	for range L {
		layer := make([]*torch.Tensor, fused.PerLayer)
		layer[fused.InputNorm], layer[fused.PostNorm] = one(C), one(C)
		layer[fused.QWeight], layer[fused.KWeight], layer[fused.VWeight] = rnd(nh*hs, C), rnd(nkv*hs, C), rnd(nkv*hs, C)
		layer[fused.OWeight] = rnd(C, nh*hs)
		layer[fused.QNorm], layer[fused.KNorm] = one(hs), one(hs)
		layer[fused.Gate], layer[fused.Up], layer[fused.Down] = rnd(I, C), rnd(I, C), rnd(C, I)
		weights = append(weights, layer...)
	}
	weights = append(weights, one(C))
	x := rnd(B, T, C)
	cos, sin := s.Cos(rnd(B, 1, T, hs)), s.Sin(rnd(B, 1, T, hs))
	bias := fused.AttnBias(s, B, T, 0, nil, nil)
	blocked := s.Triu(s.Ones([]int64{1, 1, T, T}, torch.Bool, torch.CPU), 1)
	cache := func() []*torch.Tensor {
		c := make([]*torch.Tensor, L)
		for i := range c {
			c[i] = s.Zeros([]int64{B, nkv, 2 * T, hs}, torch.Float32, torch.CPU)
		}
		return c
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	meta := func(ts []*torch.Tensor) []*torch.Tensor {
		out := make([]*torch.Tensor, len(ts))
		for i, w := range ts {
			if w != nil {
				out[i] = s.ToMeta(w)
			}
		}
		return out
	}
	for _, sdpa := range []bool{false, true} {
		c := cfg
		c.SDPA = sdpa
		mask := fused.Mask{Bias: bias}
		if sdpa {
			mask = fused.Mask{Blocked: blocked}
		}
		before := counters()
		y := fused.Forward(s, c, weights, x, cos, sin, mask, cache(), cache(), 0)
		cpu := counters()
		if err := s.Err(); err != nil {
			t.Fatalf("sdpa %v, cpu: %v", sdpa, err)
		}
		if cpu[0] == before[0] || cpu[1] == before[1] || (!sdpa && (cpu[2] == before[2] || cpu[4] == before[4])) {
			t.Errorf("sdpa %v: on the CPU the shim's kernels did not all run: counts %v → %v", sdpa, before, cpu)
		}
		mm := fused.Mask{Bias: s.ToMeta(bias)}
		if sdpa {
			mm = fused.Mask{Blocked: s.ToMeta(blocked)}
		}
		ym := fused.Forward(s, c, meta(weights), s.ToMeta(x), s.ToMeta(cos), s.ToMeta(sin), mm, meta(cache()), meta(cache()), 0)
		if err := s.Err(); err != nil {
			t.Fatalf("sdpa %v, meta: %v", sdpa, err)
		}
		if after := counters(); after != cpu {
			t.Errorf("sdpa %v: on meta tensors the shim's CPU kernels ran: counts %v → %v", sdpa, cpu, after)
		}
		want, _ := torch.Shape(y)
		if got, err := torch.Shape(ym); err != nil || !slices.Equal(got, want) {
			t.Errorf("sdpa %v: meta hidden states %v (%v), want %v", sdpa, got, err, want)
		}
		if _, err := torch.DeviceOf(ym); err == nil || !strings.Contains(err.Error(), "meta") {
			t.Errorf("sdpa %v: the hidden states are not on meta (%v)", sdpa, err)
		}
	}

	logits := s.ToMeta(rnd(B, 151))
	if got, err := torch.Shape(fused.Argmax(s, logits)); err != nil || !slices.Equal(got, []int64{B}) || s.Err() != nil {
		t.Errorf("Argmax on meta: shape %v, %v, %v", got, err, s.Err())
	}
	// One source row for all: the broadcast copy (distinct rows gather with
	// index_select, which libtorch 2.1 has no meta kernel for; its index
	// goes to the buffers' device first).
	rows := fused.SelectRows(s, meta(cache()), []int64{1, 1, 1}, 3, 5)
	if len(rows) == 0 {
		t.Fatalf("SelectRows on meta: %v", s.Err())
	}
	if got, err := torch.Shape(rows[0]); err != nil || !slices.Equal(got, []int64{3, nkv, 5, hs}) || s.Err() != nil {
		t.Errorf("SelectRows on meta: shape %v, %v, %v", got, err, s.Err())
	}
	for name, f := range map[string]func(*torch.Scope){
		"PackedLinear": func(c *torch.Scope) { fused.PackedLinear(c, s.ToMeta(x), s.ToMeta(rnd(151, C)), nil) },
		"AttnBias": func(c *torch.Scope) {
			fused.AttnBias(c, B, T, 0, s.ToMeta(s.Ones([]int64{B, T}, torch.Int64, torch.CPU)), nil)
		},
	} {
		c := s.Child()
		f(c)
		if err := c.Err(); err == nil || !strings.Contains(err.Error(), "meta") && !strings.Contains(err.Error(), "CPU") {
			t.Errorf("%s on meta: error %v, want the device refused", name, err)
		}
		c.Close()
	}
	s.Close()
	if n := torch.Live() - base; n != 0 {
		t.Errorf("%d tensors leaked", n)
	}
}
