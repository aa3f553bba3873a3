package llama_test

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/cpu"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/fused"
	"github.com/evolm/evolm/model/llama"
	"github.com/evolm/evolm/model/modeltest"
	"github.com/evolm/evolm/model/torch"
)

// TestFusedEqualsPlain: the fused inference path (model/fused, the decoder
// layers in one C++ call) computes the same bits as the plain Go path, over
// a prefill and one-token decode steps through the KV cache and a pass
// without a cache, with and without left padding, on every golden
// architecture (Qwen3's q/k norms, Qwen2's biases, Llama's untied head,
// GQA), with eager and SDPA attention, in float32 and bfloat16.
func TestFusedEqualsPlain(t *testing.T) {
	dir, names := golden.Get(t)
	defer llama.SetFused(llama.SetFused(true))
	for _, name := range names {
		for _, opt := range []model.LoadOptions{
			{Attention: model.AttnEager},
			{Attention: model.AttnSDPA},
			{DType: torch.BFloat16},
		} {
			m, err := model.Load(filepath.Join(dir, name), opt)
			if err != nil {
				t.Fatal(err)
			}
			base := torch.Live()
			for c, rc := range readRefs(t, filepath.Join(dir, name, "ref.safetensors")) {
				llama.SetFused(false)
				plainCached, plainFull := cachedForward(t, m, rc, 4), forwardNoGrad(t, m, rc)
				llama.SetFused(true)
				calls := fused.Calls()
				rms0, rope0, sb0, var0 := fused.ElementwiseCalls()
				fusedCached, fusedFull := cachedForward(t, m, rc, 4), forwardNoGrad(t, m, rc)
				if n := fused.Calls() - calls; n < 2 {
					t.Fatalf("%s: the fused path ran %d times, want every pass", name, n)
				}
				// The one-pass elementwise kernels take float32 (eager
				// attention's scale and mask only under eager attention),
				// and other dtypes the ATen ops, so these bits cover both.
				// The variance is summed in the shim where its order checked
				// out against ATen's (VarianceLanes), as it must on a CPU
				// with AVX2 and without AVX-512, where ATen's lanes are 8.
				rms1, rope1, sb1, var1 := fused.ElementwiseCalls()
				f32 := m.DType() == torch.Float32
				lanes := fused.VarianceLanes()
				if cpu.X86.HasAVX2 && !cpu.X86.HasAVX512F && lanes != 8 {
					t.Fatalf("the shim sums the variance in the order of %d lanes on this AVX2 CPU, want 8", lanes)
				}
				if ran, want := [4]bool{rms1 > rms0, rope1 > rope0, sb1 > sb0, var1 > var0}, [4]bool{f32, f32, f32 && opt.Attention == model.AttnEager, f32 && lanes > 0}; ran != want {
					t.Errorf("%s %+v case%d: the elementwise kernels (rms, rope, scale+mask, variance) ran %v, want %v", name, opt, c, ran, want)
				}
				dc, df := bitDiff(plainCached, fusedCached), bitDiff(plainFull, fusedFull)
				t.Logf("%s %s/%s case%d: fused vs plain, cached %d and full %d differing logits (of %d)",
					name, opt.Attention, torch.DTypeName(m.DType()), c, dc, df, len(plainFull))
				if dc != 0 || df != 0 {
					t.Errorf("%s %+v case%d: the fused path differs from the plain one in %d cached and %d full logits",
						name, opt, c, dc, df)
				}
			}
			if n := torch.Live() - base; n != 0 {
				t.Errorf("%s: %d tensors leaked", name, n)
			}
			m.Close()
		}
	}
}

// TestGroupedAttentionEqualsPlain: on the CPU the fused path's float32
// eager attention runs its two products as MKL's batched GEMM over the
// KV cache's un-repeated K and V (fused.GroupedCalls); the plain path
// repeats K and V to the query heads (repeatKV) and libtorch runs the same
// batched GEMM over the copies. At 1, 2 and 3 intra-op threads, for head
// sizes 16 to 128, a padded prefill over three query blocks and ten decode
// steps, the two agree bit for bit.
func TestGroupedAttentionEqualsPlain(t *testing.T) {
	defer llama.SetFused(llama.SetFused(true))
	defer torch.SetNumThreads(torch.NumThreads())
	const B, T, P, V = 2, 300, 290, 1001
	rc := refCase{RefCase: modeltest.RefCase{B: B, T: T, V: V}}
	for b := range B {
		pad := 5 * b // row 1 is left-padded
		for i := range T {
			rc.IDs = append(rc.IDs, int64((b*T+i)*7919+13)%V)
			rc.Mask = append(rc.Mask, int64(min(1, max(0, i-pad+1))))
			rc.Pos = append(rc.Pos, int64(max(0, i-pad)))
		}
	}
	for _, c := range []struct{ heads, kv, hs int }{{4, 2, 16}, {8, 2, 32}, {16, 4, 128}} {
		cfg := &model.Config{Architectures: []string{"Qwen3ForCausalLM"}, HiddenSize: 64, IntermediateSize: 64, NumHiddenLayers: 2,
			NumAttentionHeads: c.heads, NumKeyValueHeads: c.kv, HeadDim: c.hs, VocabSize: V, TieWordEmbeddings: true,
			MaxPositionEmbeddings: 512, InitializerRange: 0.3, RMSNormEps: 1e-6, RopeTheta: 1e6}
		m := modeltest.Random(t, cfg, 11)
		for _, threads := range []int{1, 2, 3} {
			torch.SetNumThreads(threads)
			llama.SetFused(false)
			plain := cachedForward(t, m, rc, P)
			llama.SetFused(true)
			g := fused.GroupedCalls()
			got := cachedForward(t, m, rc, P)
			// Per layer: two products a query block, three blocks in the
			// prefill and one a decode step.
			if n, want := fused.GroupedCalls()-g, int64(2*cfg.NumHiddenLayers*(3+T-P)); n != want {
				t.Errorf("%+v, %d threads: grouped products ran %d times, want %d", c, threads, n, want)
			}
			if d := bitDiff(plain, got); d != 0 {
				t.Errorf("%+v, %d threads: the fused path differs from the plain one in %d logits (of %d)", c, threads, d, len(plain))
			}
		}
		m.Close()
	}
}

// TestFusedCacheFull: a fused pass that would overflow the KV cache fails
// with the cache's own message, as Cache.Update does on the plain path.
func TestFusedCacheFull(t *testing.T) {
	dir, _ := golden.Get(t)
	m, err := model.Load(filepath.Join(dir, "qwen3_gqa_tied"), model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	cache, err := model.NewCache(m, 1, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	s := torch.NewScope()
	defer s.Close()
	err = torch.NoGrad(func() error {
		_, err := m.Forward(s, model.Batch{IDs: s.FromInt64([]int64{1, 2, 3, 4, 5}, 1, 5), Cache: cache})
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "kv cache full: 0 cached + 5 new positions > capacity 4") {
		t.Fatalf("error %v, want the cache's capacity", err)
	}
}

// bitDiff counts the positions where a and b are not the same float32 bits
// (NaN included).
func bitDiff(a, b []float32) int {
	if len(a) != len(b) {
		return max(len(a), len(b))
	}
	n := 0
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			n++
		}
	}
	return n
}

// forwardNoGrad is forward with grad off, where the fused path applies.
func forwardNoGrad(t *testing.T, m model.CausalLM, rc refCase) []float32 {
	t.Helper()
	var out []float32
	if err := torch.NoGrad(func() error { out = forward(t, m, rc); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestFusedMaskRowsEqualStoredBias: on the CPU the fused path's eager
// attention writes each row of the mask where a query block needs it
// (fused.Mask's Pad and Branches) instead of reading the stored bias
// (fused.AttnBias) that the plain path reads. Over a pass after cached
// positions of three query blocks holding a trunk and branches (packed
// score rows), with left padding in one row and right padding in another,
// the two paths agree bit for bit, and the fused one wrote mask rows.
func TestFusedMaskRowsEqualStoredBias(t *testing.T) {
	defer llama.SetFused(llama.SetFused(true))
	const B, past, T, V = 2, 20, 300, 1001
	cfg := &model.Config{Architectures: []string{"Qwen3ForCausalLM"}, HiddenSize: 64, IntermediateSize: 64, NumHiddenLayers: 2,
		NumAttentionHeads: 4, NumKeyValueHeads: 2, HeadDim: 16, VocabSize: V, TieWordEmbeddings: true,
		MaxPositionEmbeddings: 512, InitializerRange: 0.3, RMSNormEps: 1e-6, RopeTheta: 1e6}
	m := modeltest.Random(t, cfg, 5)
	defer m.Close()
	// Row 0: 3 left-padding keys in the cached part, a trunk to 200, then
	// branches of 40 tokens; row 1: a trunk to 150, branches of 30, then
	// right padding (branch 0, after every real token).
	ids := make([]int64, 0, B*(past+T))
	pos, brs := make([]int64, 0, B*T), make([]int64, 0, B*T)
	mask := make([]int64, 0, B*(past+T))
	for b := range B {
		trunk, width, n := 200, 40, 2
		if b == 1 {
			trunk, width, n = 150, 30, 4
		}
		for i := range past + T {
			ids = append(ids, int64((b*(past+T)+i)*7919+3)%V)
			mask = append(mask, int64(min(1, max(0, i-2+b*3)))) // row 0: keys 0–2 padding
		}
		for i := range T {
			j := i - trunk
			switch {
			case j < 0:
				pos, brs = append(pos, int64(past+i)), append(brs, 0)
			case j < n*width:
				pos, brs = append(pos, int64(past+trunk+j%width)), append(brs, int64(1+j/width))
			default: // right padding
				pos, brs = append(pos, int64(past+i)), append(brs, 0)
			}
		}
	}
	run := func() []float32 {
		cache, err := model.NewCache(m, B, past+T)
		if err != nil {
			t.Fatal(err)
		}
		defer cache.Close()
		s := torch.NewScope()
		defer s.Close()
		var out []float32
		err = torch.NoGrad(func() error {
			all := s.FromInt64(ids, B, past+T)
			if _, err := m.Forward(s, model.Batch{IDs: s.Narrow(all, 1, 0, past), Mask: s.Narrow(s.FromInt64(mask, B, past+T), 1, 0, past), Cache: cache}); err != nil {
				return err
			}
			logits, err := m.Forward(s, model.Batch{IDs: s.Narrow(all, 1, past, T), Positions: s.FromInt64(pos, B, T),
				Branches: s.FromInt64(brs, B, T), Mask: s.FromInt64(mask, B, past+T), Cache: cache})
			if err != nil {
				return err
			}
			out, err = torch.Float32s(logits)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	llama.SetFused(false)
	plain := run()
	llama.SetFused(true)
	rows := fused.MaskRowCalls()
	got := run()
	if fused.MaskRowCalls() == rows {
		t.Errorf("the fused path read a stored bias: it wrote no mask rows")
	}
	if d := bitDiff(plain, got); d != 0 {
		t.Errorf("the fused path's mask rows differ from the stored bias in %d logits (of %d)", d, len(plain))
	}
}
