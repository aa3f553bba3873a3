package sample

import (
	"fmt"
	"math"

	"github.com/evolm/evolm/model/torch"
)

// Adjust is what one row's logits go through before the filters of Params:
// the logit processors of vLLM's sampler, in its order. Each part is
// optional; a nil *Adjust leaves the row's logits as they are.
//
//  1. Bias: logits[id] += v (logit_bias; vLLM clamps v to ±100 before).
//  2. Penalty: for every id of Penalized (the prompt's and the output's
//     tokens, each once), logit/Penalty where the logit is > 0 and
//     logit·Penalty where it is < 0 (repetition_penalty, HF's
//     RepetitionPenaltyLogitsProcessor and vLLM's formula).
//  3. Subtract: logits[id] += v with v = −(frequency·count + presence) over
//     the output's tokens (OpenAI's and vLLM's presence/frequency penalty).
//  4. Ban: logits[id] = −Inf (min_tokens' stop tokens, bad_words' last
//     tokens).
//  5. Allow: when non-nil (len V), every id with Allow[id] false is set to
//     −Inf (allowed_token_ids, structured output).
//
// The log-probs a Sample reports stay those of the raw logits, as vLLM's
// default raw_logprobs.
type Adjust struct {
	Bias      []TokenValue
	Penalty   float64 // repetition penalty; 0 or 1: off
	Penalized []int   // ids the penalty applies to, each once
	Subtract  []TokenValue
	Ban       []int
	Allow     []bool
}

// TokenValue is a value for one token id.
type TokenValue struct {
	ID    int
	Value float32
}

func (a *Adjust) empty() bool {
	return a == nil || len(a.Bias) == 0 && (a.Penalty == 0 || a.Penalty == 1 || len(a.Penalized) == 0) &&
		len(a.Subtract) == 0 && len(a.Ban) == 0 && a.Allow == nil
}

func (a *Adjust) check(vocab int64) error {
	in := func(what string, id int) error {
		if id < 0 || int64(id) >= vocab {
			return fmt.Errorf("sample: %s token %d outside the vocabulary [0, %d)", what, id, vocab)
		}
		return nil
	}
	for _, tv := range a.Bias {
		if err := in("bias", tv.ID); err != nil {
			return err
		}
	}
	for _, id := range a.Penalized {
		if err := in("penalized", id); err != nil {
			return err
		}
	}
	for _, tv := range a.Subtract {
		if err := in("penalized", tv.ID); err != nil {
			return err
		}
	}
	for _, id := range a.Ban {
		if err := in("banned", id); err != nil {
			return err
		}
	}
	if a.Allow != nil && int64(len(a.Allow)) != vocab {
		return fmt.Errorf("sample: allow mask of %d entries for a vocabulary of %d", len(a.Allow), vocab)
	}
	if a.Penalty < 0 || math.IsNaN(a.Penalty) || math.IsInf(a.Penalty, 0) {
		return fmt.Errorf("sample: repetition penalty %v, want > 0", a.Penalty)
	}
	return nil
}

// Adjusted returns x (B, V) float32 after each row's Adjust (rows[i] nil:
// row i unchanged), as a new tensor owned by s; x itself is not modified.
// All rows' sparse parts go through one flat op each: B·V indices, so V
// must stay below 2^63/B.
func Adjusted(s *torch.Scope, x *torch.Tensor, adj []*Adjust) *torch.Tensor {
	sh, err := torch.Shape(x)
	if err != nil {
		s.Fail(err)
		return nil
	}
	if len(sh) != 2 || int64(len(adj)) != sh[0] {
		s.Failf("sample: adjust %d rows of logits %v", len(adj), sh)
		return nil
	}
	b, vocab := sh[0], sh[1]
	dev, err := torch.DeviceOf(x)
	if err != nil {
		s.Fail(err)
		return nil
	}
	var (
		biasIdx, subIdx, penIdx, banIdx []int64
		biasVal, subVal, penFac         []float32
		masked                          bool
	)
	for i, a := range adj {
		if a.empty() {
			continue
		}
		if err := a.check(vocab); err != nil {
			s.Fail(fmt.Errorf("row %d: %w", i, err))
			return nil
		}
		base := int64(i) * vocab
		for _, tv := range a.Bias {
			biasIdx, biasVal = append(biasIdx, base+int64(tv.ID)), append(biasVal, tv.Value)
		}
		if a.Penalty != 0 && a.Penalty != 1 {
			for _, id := range a.Penalized {
				penIdx, penFac = append(penIdx, base+int64(id)), append(penFac, float32(a.Penalty))
			}
		}
		for _, tv := range a.Subtract {
			subIdx, subVal = append(subIdx, base+int64(tv.ID)), append(subVal, tv.Value)
		}
		for _, id := range a.Ban {
			banIdx = append(banIdx, base+int64(id))
		}
		masked = masked || a.Allow != nil
	}
	flat := s.Reshape(s.Clone(x), b*vocab) // (B·V)
	idx := func(ix []int64) *torch.Tensor { return s.To(s.FromInt64(ix, int64(len(ix))), dev, torch.Int64) }
	vals := func(v []float32) *torch.Tensor { return s.To(s.FromFloat32(v, int64(len(v))), dev, torch.Float32) }
	if len(biasIdx) > 0 {
		flat = s.Track(flat.ScatterAdd(0, idx(biasIdx), vals(biasVal), false))
	}
	if len(penIdx) > 0 {
		ix := idx(penIdx)
		v := s.Gather(flat, 0, ix)
		r := vals(penFac)
		v = s.Where(s.LtScalar(v, 0), s.Mul(v, r), s.Div(v, r))
		flat = s.Track(flat.Scatter(0, ix, v, false))
	}
	if len(subIdx) > 0 {
		flat = s.Track(flat.ScatterAdd(0, idx(subIdx), vals(subVal), false))
	}
	if len(banIdx) > 0 {
		ninf := make([]float32, len(banIdx))
		for i := range ninf {
			ninf[i] = float32(math.Inf(-1))
		}
		flat = s.Track(flat.Scatter(0, idx(banIdx), vals(ninf), false))
	}
	out := s.Reshape(flat, b, vocab)
	if masked {
		drop := make([]bool, b*vocab)
		for i, a := range adj {
			if a == nil || a.Allow == nil {
				continue
			}
			row := drop[int64(i)*vocab : int64(i+1)*vocab]
			for j, ok := range a.Allow {
				row[j] = !ok
			}
		}
		out = s.MaskedFill(out, s.To(s.FromBool(drop, b, vocab), dev, torch.Bool), math.Inf(-1))
	}
	return out
}

// adjusting reports whether any row has something to adjust.
func adjusting(rows []Row) bool {
	for _, r := range rows {
		if !r.Adjust.empty() {
			return true
		}
	}
	return false
}
