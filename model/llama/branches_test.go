package llama_test

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/llama"
	"github.com/evolm/evolm/model/modeltest"
	"github.com/evolm/evolm/model/torch"
)

// TestBranchesEqualSeparateRows: one row holding a trunk and three
// branches after it (model.Batch.Branches, positions restarting at the
// trunk's end for each branch) computes, at every branch position, the
// logits of a row holding the trunk and that branch alone, and at the trunk
// positions the trunk's own. It holds on every golden architecture, with
// eager and SDPA attention, on the plain and the fused path, without a
// cache and with part of the trunk cached, and with right padding after
// the last branch.
func TestBranchesEqualSeparateRows(t *testing.T) {
	dir, names := golden.Get(t)
	defer llama.SetFused(llama.SetFused(true))
	trunk := []int64{5, 17, 3, 9, 11, 2}
	branches := [][]int64{{7, 8}, {4, 13, 6}, {1}}
	for _, name := range names {
		for _, attn := range []string{model.AttnEager, model.AttnSDPA} {
			base := torch.Live()
			m, err := model.Load(filepath.Join(dir, name), model.LoadOptions{Attention: attn})
			if err != nil {
				t.Fatal(err)
			}
			for _, fusedOn := range []bool{false, true} {
				llama.SetFused(fusedOn)
				// The references: trunk + one branch, a plain row each.
				var want [][]float32
				for _, br := range branches {
					want = append(want, rowLogits(t, m, append(append([]int64{}, trunk...), br...), nil, nil, 0, 0))
				}
				for _, cached := range []int{0, 4} {
					for _, pad := range []int{0, 2} {
						ids, pos, brs := []int64{}, []int64{}, []int64{}
						for j, id := range trunk {
							ids, pos, brs = append(ids, id), append(pos, int64(j)), append(brs, 0)
						}
						for b, br := range branches {
							for j, id := range br {
								ids, pos, brs = append(ids, id), append(pos, int64(len(trunk)+j)), append(brs, int64(b+1))
							}
						}
						got := rowLogits(t, m, ids, pos, brs, cached, pad) // logits of the positions after the cache
						V := m.Config().VocabSize
						what := fmt.Sprintf("%s %s fused=%v cached=%d pad=%d", name, attn, fusedOn, cached, pad)
						// The trunk's positions, then each branch's.
						d := modeltest.MaxAbsDiff(got[:(len(trunk)-cached)*V], want[0][cached*V:len(trunk)*V])
						off := len(trunk) - cached
						for b, br := range branches {
							n := len(br) * V
							d = math.Max(d, modeltest.MaxAbsDiff(got[off*V:off*V+n], want[b][len(trunk)*V:]))
							off += len(br)
						}
						t.Logf("%s: max |packed - separate| = %.3g", what, d)
						if d > 1e-5 || math.IsNaN(d) {
							t.Errorf("%s: packed branches differ from separate rows by %.3g", what, d)
						}
					}
				}
			}
			m.Close()
			modeltest.CheckLeaks(t, base)
		}
	}
}

// TestBranchesNeedPositions: Branches without Positions, or of the wrong
// shape, is an error that names them.
func TestBranchesNeedPositions(t *testing.T) {
	dir, _ := golden.Get(t)
	m, err := model.Load(filepath.Join(dir, "qwen3_gqa_tied"), model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, c := range []struct {
		pos, branches []int64
		want          string
	}{
		{nil, []int64{0, 1, 2}, "branches without positions"},
		{[]int64{0, 1, 1}, []int64{0, 1}, "branches: shape [1 2], want [1 3]"},
	} {
		s := torch.NewScope()
		b := model.Batch{IDs: s.FromInt64([]int64{1, 2, 3}, 1, 3), Branches: s.FromInt64(c.branches, 1, int64(len(c.branches)))}
		if c.pos != nil {
			b.Positions = s.FromInt64(c.pos, 1, 3)
		}
		_, err := m.Hidden(s, b)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want %q", err, c.want)
		}
		s.Close()
	}
}

// rowLogits runs one row of ids (grad off), the first cached of them
// through a KV cache first, with pad padding tokens after it (masked, their
// logits dropped), and returns the logits of the positions after the cache.
func rowLogits(t *testing.T, m model.CausalLM, ids, pos, branches []int64, cached, pad int) []float32 {
	t.Helper()
	var out []float32
	err := torch.NoGrad(func() error {
		s := torch.NewScope()
		defer s.Close()
		var cache *model.Cache
		if cached > 0 {
			var err error
			if cache, err = model.NewCache(m, 1, len(ids)+pad); err != nil {
				return err
			}
			defer cache.Close()
			if _, err := m.Hidden(s, model.Batch{IDs: s.FromInt64(ids[:cached], 1, int64(cached)), Cache: cache}); err != nil {
				return err
			}
		}
		n := len(ids) - cached
		x, mask := append([]int64{}, ids[cached:]...), make([]int64, len(ids)+pad)
		for j := range mask {
			mask[j] = 1
		}
		var p, br []int64
		if pos != nil {
			p, br = append([]int64{}, pos[cached:]...), append([]int64{}, branches[cached:]...)
		}
		for j := 0; j < pad; j++ {
			x, mask[len(ids)+j] = append(x, 0), 0
			if p != nil {
				p, br = append(p, 0), append(br, 0)
			}
		}
		T := int64(n + pad)
		b := model.Batch{IDs: s.FromInt64(x, 1, T), Cache: cache, Mask: s.FromInt64(mask, 1, int64(len(mask)))}
		if p != nil {
			b.Positions, b.Branches = s.FromInt64(p, 1, T), s.FromInt64(br, 1, T)
		}
		lg, err := m.Forward(s, b)
		if err != nil {
			return err
		}
		all, err := torch.Float32s(s.Contiguous(lg))
		if err != nil {
			return err
		}
		out = all[:n*m.Config().VocabSize]
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
