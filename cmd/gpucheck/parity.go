package main

import (
	"flag"
	"fmt"
	"path/filepath"
	"time"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/generate"
	"github.com/evolm/evolm/model/torch"
)

// logitsCmd: the logits of rows (left-padded into one batch, as HF pads
// for a batched forward: mask 0 and position 0 on padding, positions
// cumsum(mask) − 1) written to logits.f32 (B, T, V), and the log-prob of
// each row's token j ≥ 1 given the tokens before it through the learner's
// path (generate.Score: the chunked selective log-softmax) to
// logprobs.f32 (B, T − 1), right-padded with zeros.
func logitsCmd(fs *flag.FlagSet, c *common) func() (any, error) {
	in := fs.String("in", "", "rows JSON: {\"rows\": [[id, …], …]}")
	out := fs.String("out", "", "directory for logits.f32 and logprobs.f32")
	return func() (any, error) {
		rows, err := readRows(*in)
		if err != nil {
			return nil, err
		}
		m, _, err := c.load()
		if err != nil {
			return nil, err
		}
		defer m.Close()
		defer torch.SetGrad(false)()
		t0 := time.Now()
		s := torch.NewScope()
		defer s.Close()
		B, T := int64(len(rows)), 0
		for _, r := range rows {
			T = max(T, len(r))
		}
		ids := make([]int64, 0, int(B)*T)
		mask := make([]int64, 0, int(B)*T)
		pos := make([]int64, 0, int(B)*T)
		for _, r := range rows {
			for j := 0; j < T-len(r); j++ {
				ids, mask, pos = append(ids, 0), append(mask, 0), append(pos, 0)
			}
			for j, id := range r {
				ids, mask, pos = append(ids, int64(id)), append(mask, 1), append(pos, int64(j))
			}
		}
		logits, err := m.Forward(s, model.Batch{
			IDs: s.FromInt64(ids, B, int64(T)), Positions: s.FromInt64(pos, B, int64(T)), Mask: s.FromInt64(mask, B, int64(T)),
		})
		if err != nil {
			return nil, err
		}
		lv, err := torch.Float32s(logits)
		if err != nil {
			return nil, err
		}
		conts := make([]generate.Continuation, len(rows))
		for i, r := range rows {
			conts[i] = generate.Continuation{Prompt: r[:1], Completion: r[1:]}
		}
		sc, err := generate.Score(s, m, conts, false)
		if err != nil {
			return nil, err
		}
		lp, err := torch.Float32s(sc.LogProbs)
		if err != nil {
			return nil, err
		}
		if err := s.Err(); err != nil {
			return nil, err
		}
		if err := writeF32(filepath.Join(*out, "logits.f32"), lv); err != nil {
			return nil, err
		}
		if err := writeF32(filepath.Join(*out, "logprobs.f32"), lp); err != nil {
			return nil, err
		}
		V := int64(len(lv)) / (B * int64(T))
		if V != int64(m.Config().VocabSize) {
			return nil, fmt.Errorf("logits: %d values for (%d, %d, V = %d)", len(lv), B, T, m.Config().VocabSize)
		}
		return map[string]any{
			"B": B, "T": T, "V": V, "device": c.device, "dtype": torch.DTypeName(m.DType()),
			"attention": m.Config().AttnImplementation, "seconds": time.Since(t0).Seconds(),
		}, nil
	}
}
