package generate

import (
	"math/rand"
	"strings"
	"testing"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/modeltest"
	"github.com/evolm/evolm/model/torch"
)

// TestPrefillChunks: a prefill in query chunks of 5 gives the one-pass
// prefill's last hidden states and cache (checked through the next decode
// step's logits) on a left-padded batch.
func TestPrefillChunks(t *testing.T) {
	defer func(a, b int64) { minPrefillChunk, prefillElems = a, b }(minPrefillChunk, prefillElems)
	base := torch.Live()
	m := tinyLM(t, "Qwen3ForCausalLM", true)
	defer torch.SetGrad(false)()
	r := rand.New(rand.NewSource(2))
	const B, T = 2, 23
	ids := make([]int64, B*T)
	mask := make([]int64, B*T)
	pos := make([]int64, B*T)
	for i := range ids {
		ids[i], mask[i] = int64(r.Intn(m.Config().VocabSize)), 1
	}
	for j := 0; j < 4; j++ { // row 1 left-padded by 4
		mask[T+j] = 0
	}
	for b := 0; b < B; b++ {
		n := int64(0)
		for j := 0; j < T; j++ {
			if mask[b*T+j] == 1 {
				pos[b*T+j] = n
				n++
			}
		}
	}
	run := func(chunk int64) (last, next []float32) {
		minPrefillChunk, prefillElems = chunk, 1
		s := torch.NewScope()
		defer s.Close()
		cache, err := model.NewCache(m, B, T+1)
		if err != nil {
			t.Fatal(err)
		}
		defer cache.Close()
		h, err := Prefill(s, m, model.Batch{IDs: s.FromInt64(ids, B, T), Positions: s.FromInt64(pos, B, T), Mask: s.FromInt64(mask, B, T), Cache: cache})
		if err != nil {
			t.Fatal(err)
		}
		if cache.Len() != T {
			t.Fatalf("cache holds %d positions, want %d", cache.Len(), T)
		}
		step := append(append([]int64(nil), mask...), 0, 0)
		for b := 0; b < B; b++ { // (B, T+1) mask: the new token attends
			copy(step[b*(T+1):], mask[b*T:(b+1)*T])
			step[b*(T+1)+T] = 1
		}
		lg, err := m.Forward(s, model.Batch{IDs: s.FromInt64([]int64{5, 7}, B, 1), Positions: s.FromInt64([]int64{T, T - 4}, B, 1), Mask: s.FromInt64(step[:B*(T+1)], B, T+1), Cache: cache})
		if err != nil {
			t.Fatal(err)
		}
		if last, err = torch.Float32s(h); err != nil {
			t.Fatal(err)
		}
		if next, err = torch.Float32s(lg); err != nil {
			t.Fatal(err)
		}
		return last, next
	}
	wantH, wantL := run(T)
	gotH, gotL := run(5)
	if d := modeltest.MaxAbsDiff(wantH, gotH); d > 1e-5 {
		t.Errorf("last hidden states differ by %.3g", d)
	}
	if d := modeltest.MaxAbsDiff(wantL, gotL); d > 1e-5 {
		t.Errorf("next-step logits differ by %.3g", d)
	}
	minPrefillChunk, prefillElems = 64, PrefillScoreElems
	if got := PrefillChunk(1, 8192, 4); got != 128 {
		t.Errorf("chunk of an 8k prompt on 4 heads: %d, want 128 (16 MiB of scores)", got)
	}
	m.Close()
	modeltest.CheckLeaks(t, base)
}

// TestPrefillRejectsBranches: Prefill runs chunks through the cache, where
// a later chunk would take an earlier chunk's branch keys for trunk, so it
// refuses model.Batch.Branches.
func TestPrefillRejectsBranches(t *testing.T) {
	m := tinyLM(t, "Qwen3ForCausalLM", true)
	defer torch.SetGrad(false)()
	s := torch.NewScope()
	defer s.Close()
	cache, err := model.NewCache(m, 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	x := s.FromInt64([]int64{1, 2, 2}, 1, 3)
	_, err = Prefill(s, m, model.Batch{IDs: x, Positions: x, Branches: x, Cache: cache})
	if err == nil || !strings.Contains(err.Error(), "prefill: branches need one pass") {
		t.Fatalf("error %v, want branches refused", err)
	}
}
