package torchbe

import (
	"slices"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/torch"
)

// packedRow is one row of a packed pass: trunk tokens (may be none) after
// the cached ones, then each tail as a branch of its own.
type packedRow struct {
	trunk []int
	tails [][]int
}

// packedHidden runs rows as one right-padded batch after what cache holds
// (nil: nothing; else one cache row per row, its keys appended to it, which
// the caller truncates): in each row the trunk, then each tail as a branch
// of its own (model.Batch.Branches) at the positions it has in its full
// prompt. It returns, owned, per row the final hidden state at each tail's
// last token (K, C): what a row holding the cached tokens, the trunk and
// that tail alone computes there. The padding after a row's last token
// (id 0, in the trunk) is after every real token, so causal attention
// keeps them from it.
func (m *Model) packedHidden(cache *model.Cache, rows []packedRow) ([]*torch.Tensor, error) {
	s := torch.NewScope()
	defer s.Close()
	past := 0
	if cache != nil {
		past = cache.Len()
	}
	T := 0
	for _, r := range rows {
		n := len(r.trunk)
		for _, t := range r.tails {
			n += len(t)
		}
		T = max(T, n)
	}
	B := len(rows)
	ids, pos, branch := make([]int64, 0, B*T), make([]int64, 0, B*T), make([]int64, 0, B*T)
	last := make([][]int64, B) // flat (b·T + j) index of each tail's last token
	for b, r := range rows {
		for j, id := range r.trunk {
			ids, pos, branch = append(ids, int64(id)), append(pos, int64(past+j)), append(branch, 0)
		}
		for k, t := range r.tails {
			for j, id := range t {
				ids, pos, branch = append(ids, int64(id)), append(pos, int64(past+len(r.trunk)+j)), append(branch, int64(k+1))
			}
			last[b] = append(last[b], int64(len(ids)-1))
		}
		for j := len(ids) - b*T; j < T; j++ { // right padding
			ids, pos, branch = append(ids, 0), append(pos, int64(past+j)), append(branch, 0)
		}
	}
	dev := m.lm.Device()
	h, err := m.lm.Hidden(s, model.Batch{
		IDs:       s.To(s.FromInt64(ids, int64(B), int64(T)), dev, torch.Int64),
		Positions: s.To(s.FromInt64(pos, int64(B), int64(T)), dev, torch.Int64),
		Branches:  s.To(s.FromInt64(branch, int64(B), int64(T)), dev, torch.Int64),
		Cache:     cache,
	}) // (B, T, C)
	if err != nil {
		return nil, err
	}
	all := slices.Concat(last...)
	x := s.IndexSelect(s.Reshape(h, int64(B*T), -1), 0, s.To(s.FromInt64(all, int64(len(all))), dev, torch.Int64)) // a copy: the tails' rows, not h
	out := make([]*torch.Tensor, B)
	at := int64(0)
	for b, idx := range last {
		out[b] = s.Narrow(x, 0, at, int64(len(idx))) // row b's, a view of x
		at += int64(len(idx))
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	for _, x := range out {
		s.Keep(x)
	}
	return out, nil
}

// lastHidden runs full prompts as one right-padded batch and returns,
// owned, the final hidden state at each row's last token (K, C). Right
// padding needs no mask: causal attention keeps every real token from
// seeing the padding after it.
func (m *Model) lastHidden(rows [][]int) (*torch.Tensor, error) {
	s := torch.NewScope()
	defer s.Close()
	K, T := int64(len(rows)), longest(rows)
	ids, last := rightPad(rows, T)
	h, err := m.lm.Hidden(s, model.Batch{IDs: s.To(s.FromInt64(ids, K, int64(T)), m.lm.Device(), torch.Int64)}) // (K, T, C)
	if err != nil {
		return nil, err
	}
	C := int64(m.lm.Config().HiddenSize)
	x := s.IndexSelect(s.Reshape(h, -1, C), 0, s.To(s.FromInt64(last, K), m.lm.Device(), torch.Int64)) // a copy: K rows, not h
	if err := s.Err(); err != nil {
		return nil, err
	}
	return s.Keep(x), nil
}

// rightPad lays rows out as one (len(rows), T) batch of ids, right-padded
// with 0, and returns it with the flat index of each row's last real token.
func rightPad(rows [][]int, T int) (ids, last []int64) {
	ids = make([]int64, 0, len(rows)*T)
	last = make([]int64, len(rows))
	for k, r := range rows {
		for j := 0; j < T; j++ {
			id := 0
			if j < len(r) {
				id = r[j]
			}
			ids = append(ids, int64(id))
		}
		last[k] = int64(k*T + len(r) - 1)
	}
	return ids, last
}
