package llama_test

import (
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/torch"
)

// TestCacheMatchesFullForward: a prefill of the first P tokens followed by
// one token at a time through the KV cache gives the logits of one full
// forward, with and without left padding.
func TestCacheMatchesFullForward(t *testing.T) {
	dir, _ := golden.Get(t)
	for _, name := range []string{"qwen3_gqa_tied", "llama_gqa_untied", "qwen2_gqa_untied"} {
		m, err := model.Load(filepath.Join(dir, name), model.LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		base := torch.Live()
		for c, rc := range readRefs(t, filepath.Join(dir, name, "ref.safetensors")) {
			full := forward(t, m, rc)
			got := cachedForward(t, m, rc, 4)
			d := maxDiff(rc, got)
			fd := maxDiff(refCase{rc.RefCase, full}, got)
			t.Logf("%s case%d: cached vs full %.3g, cached vs HF %.3g", name, c, fd, d)
			if fd > 1e-5 || d > tol || math.IsNaN(d) {
				t.Errorf("%s case%d: cached forward differs: %.3g from the full forward, %.3g from HF", name, c, fd, d)
			}
		}
		if n := torch.Live() - base; n != 0 {
			t.Errorf("%s: %d tensors leaked by cached forwards", name, n)
		}
		m.Close()
	}
}

// cachedForward prefills P positions, then feeds the rest one by one, and
// returns the logits (B, T, V) assembled from the steps.
func cachedForward(t *testing.T, m model.CausalLM, rc refCase, P int64) []float32 {
	t.Helper()
	cache, err := model.NewCache(m, int(rc.B), int(rc.T))
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	out := make([]float32, rc.B*rc.T*rc.V)
	for start := int64(0); start < rc.T; {
		n := int64(1)
		if start == 0 {
			n = P
		}
		s := torch.NewScope()
		ids := s.Narrow(s.FromInt64(rc.IDs, rc.B, rc.T), 1, start, n)
		pos := s.Narrow(s.FromInt64(rc.Pos, rc.B, rc.T), 1, start, n)
		mask := s.Narrow(s.FromInt64(rc.Mask, rc.B, rc.T), 1, 0, start+n)
		err := torch.NoGrad(func() error {
			logits, err := m.Forward(s, model.Batch{IDs: ids, Positions: pos, Mask: mask, Cache: cache})
			if err != nil {
				return err
			}
			vals, err := torch.Float32s(logits) // (B, n, V)
			if err != nil {
				return err
			}
			for b := int64(0); b < rc.B; b++ {
				for i := int64(0); i < n; i++ {
					copy(out[(b*rc.T+start+i)*rc.V:(b*rc.T+start+i+1)*rc.V], vals[(b*n+i)*rc.V:(b*n+i+1)*rc.V])
				}
			}
			return nil
		})
		s.Close()
		if err != nil {
			t.Fatal(err)
		}
		start += n
	}
	if cache.Len() != int(rc.T) {
		t.Errorf("cache length %d after %d positions", cache.Len(), rc.T)
	}
	return out
}

// TestCacheSelect: expanding a prefilled cache row-wise (n samples sharing one
// prefill) continues exactly like prefilling each copy.
func TestCacheSelect(t *testing.T) {
	dir, _ := golden.Get(t)
	m, err := model.Load(filepath.Join(dir, "qwen3_gqa_tied"), model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	rc := readRefs(t, filepath.Join(dir, "qwen3_gqa_tied", "ref.safetensors"))[0] // (2, 9), no padding
	full := forward(t, m, rc)
	cache, err := model.NewCache(m, int(rc.B), int(rc.T))
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	s := torch.NewScope()
	defer s.Close()
	defer torch.SetGrad(false)()
	ids := s.FromInt64(rc.IDs, rc.B, rc.T)
	if _, err := m.Forward(s, model.Batch{IDs: s.Narrow(ids, 1, 0, rc.T-1), Cache: cache}); err != nil {
		t.Fatal(err)
	}
	rows := []int64{1, 0, 1}
	big, err := cache.Select(rows)
	if err != nil {
		t.Fatal(err)
	}
	defer big.Close()
	// SelectTo: the same rows in buffers of another capacity.
	roomy, err := cache.SelectTo(rows, int(rc.T)+5)
	if err != nil {
		t.Fatal(err)
	}
	defer roomy.Close()
	if roomy.MaxLen() != int(rc.T)+5 || roomy.Len() != cache.Len() || roomy.Batch() != 3 {
		t.Errorf("SelectTo: capacity %d, length %d, batch %d", roomy.MaxLen(), roomy.Len(), roomy.Batch())
	}
	last := s.IndexSelect(s.Narrow(ids, 1, rc.T-1, 1), 0, s.FromInt64(rows, 3)) // (3, 1)
	for name, c := range map[string]*model.Cache{"Select": big, "SelectTo": roomy} {
		logits, err := m.Forward(s, model.Batch{IDs: last, Cache: c})
		if err != nil {
			t.Fatal(err)
		}
		got, _ := torch.Float32s(logits) // (3, 1, V)
		for i, r := range rows {
			want := full[(r*rc.T+rc.T-1)*rc.V : (r*rc.T+rc.T)*rc.V]
			worst := 0.0
			for v := range want {
				worst = math.Max(worst, math.Abs(float64(want[v]-got[int64(i)*rc.V+int64(v)])))
			}
			if worst > 1e-5 {
				t.Errorf("%s: row %d (from %d): max diff %.3g from the full forward", name, i, r, worst)
			}
		}
	}
	// One row taken for every new row (broadcast, not gathered): each holds
	// its filled positions, and zeros after them.
	twice, err := cache.SelectTo([]int64{1, 1}, cache.Len()+3)
	if err != nil {
		t.Fatal(err)
	}
	defer twice.Close()
	srcK, srcV := cache.Buffers()
	gotK, gotV := twice.Buffers()
	n := int64(cache.Len())
	for l := range srcK {
		for _, kv := range [][2]*torch.Tensor{{srcK[l], gotK[l]}, {srcV[l], gotV[l]}} {
			want, _ := torch.Float32s(s.Contiguous(s.Narrow(s.Narrow(kv[0], 0, 1, 1), 2, 0, n)))
			for r := range int64(2) {
				row := s.Narrow(kv[1], 0, r, 1)
				got, _ := torch.Float32s(s.Contiguous(s.Narrow(row, 2, 0, n)))
				if !slices.Equal(got, want) {
					t.Fatalf("SelectTo([1 1]): layer %d row %d differs from row 1 of the cache", l, r)
				}
				rest, _ := torch.Float32s(s.Contiguous(s.Narrow(row, 2, n, 3)))
				if slices.ContainsFunc(rest, func(x float32) bool { return x != 0 }) {
					t.Fatalf("SelectTo([1 1]): layer %d row %d: positions after the filled ones are not zero", l, r)
				}
			}
		}
	}
	if _, err := big.Select([]int64{5}); err == nil {
		t.Errorf("Select of a missing row did not fail")
	}
	if _, err := cache.SelectTo([]int64{5}, int(rc.T)); err == nil {
		t.Errorf("SelectTo of a missing row did not fail")
	}
	if _, err := cache.SelectTo([]int64{0}, cache.Len()-1); err == nil {
		t.Errorf("SelectTo into less than the filled length did not fail")
	}
}
