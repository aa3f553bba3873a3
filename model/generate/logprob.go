package generate

import (
	"context"
	"fmt"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/torch"
)

// Continuation is a prompt and a completion whose tokens are scored.
type Continuation struct {
	Prompt     []int // at least one token
	Completion []int // may be empty (its row is all padding)
}

// Scored is the result of Score, owned by the scope given to it.
//
// Layout: prompts are left-padded to the batch's longest prompt P and
// completions right-padded to the longest completion T (TRL's layout), so
// column j of every row is completion token j.
type Scored struct {
	LogProbs *torch.Tensor // (B, T) float32: log p(completion[j] | prefix); 0 at padding
	Entropy  *torch.Tensor // (B, T) float32 entropy of the next-token distribution; 0 at padding; nil unless asked
	Mask     *torch.Tensor // (B, T) float32: 1 on real completion tokens, 0 on padding
	Lens     []int         // (B) completion lengths
}

// Score computes per-token log-probs of each row's completion under m in
// one batched forward pass, in the caller's grad mode: with grad on (GRPO's
// policy pass) Scored.LogProbs and Scored.Entropy are differentiable with
// respect to m's parameters through Selective's deferred backward, which
// torch.Backward runs after the loss's own; with grad off nothing is
// retained. The log-probs are the
// log-softmax of the raw float32 logits (no temperature). Positions follow
// HF: cumsum(mask) − 1, so a row's numbers do not depend on its padding.
func Score(s *torch.Scope, m model.CausalLM, rows []Continuation, entropy bool) (Scored, error) {
	if len(rows) == 0 {
		return Scored{}, fmt.Errorf("score: no rows")
	}
	vocab := m.Config().VocabSize
	P, T := 0, 0
	for i, r := range rows {
		if len(r.Prompt) == 0 {
			return Scored{}, fmt.Errorf("score: row %d: empty prompt", i)
		}
		for _, id := range append(r.Prompt[:len(r.Prompt):len(r.Prompt)], r.Completion...) {
			if id < 0 || id >= vocab {
				return Scored{}, fmt.Errorf("score: row %d: token %d outside the vocabulary [0, %d)", i, id, vocab)
			}
		}
		P, T = max(P, len(r.Prompt)), max(T, len(r.Completion))
	}
	if T == 0 {
		return Scored{}, fmt.Errorf("score: every completion is empty")
	}
	B, L := int64(len(rows)), int64(P+T)
	ids := make([]int64, 0, B*L)
	mask := make([]int64, 0, B*L)
	pos := make([]int64, 0, B*L)
	targets := make([]int64, 0, B*int64(T))
	cmask := make([]float32, 0, B*int64(T))
	lens := make([]int, B)
	for i, r := range rows {
		lens[i] = len(r.Completion)
		n := int64(0)
		for j := 0; j < P-len(r.Prompt); j++ {
			ids, mask, pos = append(ids, 0), append(mask, 0), append(pos, 0)
		}
		for _, id := range r.Prompt {
			ids, mask, pos = append(ids, int64(id)), append(mask, 1), append(pos, n)
			n++
		}
		for j := 0; j < T; j++ {
			if j < len(r.Completion) {
				id := int64(r.Completion[j])
				ids, mask, pos = append(ids, id), append(mask, 1), append(pos, n)
				targets, cmask = append(targets, id), append(cmask, 1)
				n++
			} else {
				ids, mask, pos = append(ids, 0), append(mask, 0), append(pos, n)
				targets, cmask = append(targets, 0), append(cmask, 0)
			}
		}
	}
	dev := m.Device()
	c := s.Child()
	defer c.Close()
	h, err := m.Hidden(c, model.Batch{
		IDs:       c.To(c.FromInt64(ids, B, L), dev, torch.Int64),
		Positions: c.To(c.FromInt64(pos, B, L), dev, torch.Int64),
		Mask:      c.To(c.FromInt64(mask, B, L), dev, torch.Int64),
	})
	if err != nil {
		return Scored{}, fmt.Errorf("score: %w", err)
	}
	// Completion token j sits at column P+j and is predicted at P+j−1.
	h = c.Narrow(h, 1, int64(P-1), int64(T)) // (B, T, C)
	tgt := c.To(c.FromInt64(targets, B, int64(T)), dev, torch.Int64)
	cm := c.To(c.FromFloat32(cmask, B, int64(T)), dev, torch.Float32)
	lp, ent, err := Selective(c, m, h, tgt, entropy)
	if err != nil {
		return Scored{}, fmt.Errorf("score: %w", err)
	}
	out := Scored{Lens: lens}
	out.LogProbs = c.Mul(lp, cm) // (B, T)
	if entropy {
		out.Entropy = c.Mul(ent, cm) // (B, T)
	}
	if err := c.Err(); err != nil {
		return Scored{}, fmt.Errorf("score: %w", err)
	}
	out.LogProbs = c.MoveTo(s, out.LogProbs)
	out.Mask = c.MoveTo(s, cm)
	if entropy {
		out.Entropy = c.MoveTo(s, out.Entropy)
	}
	return out, nil
}

// LogProbs scores rows without grad, maxBatch rows per forward pass (≤ 0:
// all at once), and returns each row's completion log-probs (and entropies
// when entropy is set; nil otherwise) as Go slices of the row's own length.
func LogProbs(ctx context.Context, m model.CausalLM, rows []Continuation, maxBatch int, entropy bool) (lps, ents [][]float32, err error) {
	if maxBatch <= 0 {
		maxBatch = len(rows)
	}
	defer torch.SetGrad(false)()
	lps = make([][]float32, len(rows))
	if entropy {
		ents = make([][]float32, len(rows))
	}
	for start := 0; start < len(rows); start += maxBatch {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		end := min(start+maxBatch, len(rows))
		l, e, err := scoreRows(m, rows[start:end], entropy)
		if err != nil {
			return nil, nil, fmt.Errorf("rows %d..%d: %w", start, end-1, err)
		}
		copy(lps[start:end], l)
		if entropy {
			copy(ents[start:end], e)
		}
	}
	return lps, ents, nil
}

func scoreRows(m model.CausalLM, rows []Continuation, entropy bool) (lps, ents [][]float32, err error) {
	s := torch.NewScope()
	defer s.Close()
	sc, err := Score(s, m, rows, entropy)
	if err != nil {
		return nil, nil, err
	}
	T := 0
	for _, n := range sc.Lens {
		T = max(T, n)
	}
	flat, err := torch.Float32s(sc.LogProbs)
	if err != nil {
		return nil, nil, err
	}
	var flatE []float32
	if entropy {
		if flatE, err = torch.Float32s(sc.Entropy); err != nil {
			return nil, nil, err
		}
	}
	lps = make([][]float32, len(rows))
	if entropy {
		ents = make([][]float32, len(rows))
	}
	for i, n := range sc.Lens {
		lps[i] = append([]float32(nil), flat[i*T:i*T+n]...)
		if entropy {
			ents[i] = append([]float32(nil), flatE[i*T:i*T+n]...)
		}
	}
	return lps, ents, nil
}
