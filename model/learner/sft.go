package learner

import (
	"context"
	"fmt"
	"math"
	"sort"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/fused"
	"github.com/evolm/evolm/model/generate"
	"github.com/evolm/evolm/model/torch"
	"github.com/evolm/evolm/model/train"
	"github.com/evolm/evolm/serving/backend"
)

// Supervised fine-tuning on the GRPO learner's model, optimizer, LoRA
// adapter and data-parallel group. The loss is TRL SFTTrainer's (with
// transformers' Trainer and ForCausalLMLoss):
//
//	loss = Σ_{target tokens t of the global batch} −log p(x_t | x_<t) / #targets
//
// one token mean over every micro-batch (and rank) of the optimizer step,
// not a mean per sequence or per micro-batch: each micro-batch's loss is a
// sum over its target tokens and train.Step divides the accumulated
// gradient by the step's target count once.
//
// Rows are padded (right padding, positions 0…n−1 per row) or packed: the
// sequences of a row are laid one after another, each one its own
// model.Batch branch with positions restarting at 0, so that it attends to
// itself only and computes what it computes alone (flash attention's
// position_ids-aware packing in TRL; TRL 0.19's eager path lets packed
// sequences attend to each other instead).

// sftRow is one forward row: one sequence, or several packed.
type sftRow struct {
	seqs []int // indices into the step's batch, in row order
	len  int   // tokens
}

// SFTStep takes one optimizer step over batch (see backend.SFTTrainer). A
// sequence with no target token contributes nothing; a batch with none at
// all is an error.
func (t *Trainer) SFTStep(ctx context.Context, batch []backend.SFTSample, opt backend.SFTOptions) (st backend.SFTStats, err error) {
	err = fused.KeepBlocks(func() error {
		st, err = t.sftStep(ctx, batch, opt)
		return err
	})
	return st, err
}

func (t *Trainer) sftStep(ctx context.Context, batch []backend.SFTSample, opt backend.SFTOptions) (backend.SFTStats, error) {
	vocab := t.Policy.Config().VocabSize
	targets := 0
	for i, s := range batch {
		if len(s.Targets) != len(s.TokenIDs) {
			return backend.SFTStats{}, fmt.Errorf("sft step: sequence %d: %d targets for %d tokens", i, len(s.Targets), len(s.TokenIDs))
		}
		if opt.PackLength > 0 && len(s.TokenIDs) > opt.PackLength {
			return backend.SFTStats{}, fmt.Errorf("sft step: sequence %d: %d tokens, longer than the pack length %d", i, len(s.TokenIDs), opt.PackLength)
		}
		for j, id := range s.TokenIDs {
			if id < 0 || id >= vocab {
				return backend.SFTStats{}, fmt.Errorf("sft step: sequence %d token %d: id %d outside the vocabulary [0, %d)", i, j, id, vocab)
			}
		}
		targets += s.TargetCount()
	}
	if targets == 0 {
		return backend.SFTStats{}, fmt.Errorf("sft step: no target tokens in a batch of %d sequences", len(batch))
	}
	rows := sftRows(batch, opt.PackLength)
	var mbs [][]sftRow
	for i := 0; i < len(rows); i += t.cfg.MicroBatch {
		mbs = append(mbs, rows[i:min(i+t.cfg.MicroBatch, len(rows))])
	}
	if dp := t.cfg.DP; dp != nil {
		a, b := backend.RankBlock(len(mbs), dp.Group.Rank(), dp.Group.WorldSize())
		mbs = mbs[a:b]
	}
	if t.Adapter != nil {
		prev := t.Adapter.SetTraining(true)
		defer t.Adapter.SetTraining(prev)
		if t.cfg.LoRA.Dropout > 0 {
			torch.ManualSeed(stepSeed(t.cfg.Seed, t.tr.Opt.StepCount()))
		}
	}
	m, err := t.tr.Step(ctx, indices(len(mbs)), func(s *torch.Scope, i int) (train.Loss, error) {
		return t.sftLoss(s, batch, mbs[i])
	})
	if err != nil {
		return backend.SFTStats{}, fmt.Errorf("sft step: %w", err)
	}
	return backend.SFTStats{Step: int(m.Step), Loss: m.Loss, GradNorm: m.GradNorm, Tokens: int(math.Round(m.Count)),
		Rows: len(rows), Skipped: m.Skipped}, nil
}

// sftRows lays the batch out in forward rows: one sequence per row in
// batch order (packLength 0), or packed first-fit decreasing into rows of at
// most packLength tokens (TRL's "ffd": longest first, ties in batch order,
// each into the first row with room).
func sftRows(batch []backend.SFTSample, packLength int) []sftRow {
	if packLength <= 0 {
		rows := make([]sftRow, len(batch))
		for i, s := range batch {
			rows[i] = sftRow{seqs: []int{i}, len: len(s.TokenIDs)}
		}
		return rows
	}
	order := indices(len(batch))
	sort.SliceStable(order, func(a, b int) bool { return len(batch[order[a]].TokenIDs) > len(batch[order[b]].TokenIDs) })
	var rows []sftRow
	for _, i := range order {
		n := len(batch[i].TokenIDs)
		placed := false
		for r := range rows {
			if rows[r].len+n <= packLength {
				rows[r].seqs = append(rows[r].seqs, i)
				rows[r].len += n
				placed = true
				break
			}
		}
		if !placed {
			rows = append(rows, sftRow{seqs: []int{i}, len: n})
		}
	}
	return rows
}

// sftLoss is the train.LossFn of one micro-batch of rows: the sum over its
// target tokens of −log p, with Count the number of those tokens.
func (t *Trainer) sftLoss(s *torch.Scope, batch []backend.SFTSample, rows []sftRow) (train.Loss, error) {
	L := 2 // one-token rows get a padding column: the loss stays a graph
	for _, r := range rows {
		L = max(L, r.len)
	}
	packed := false
	for _, r := range rows {
		packed = packed || len(r.seqs) > 1
	}
	B := int64(len(rows))
	ids := make([]int64, 0, int(B)*L)
	pos := make([]int64, 0, int(B)*L)
	mask := make([]int64, 0, int(B)*L)
	branch := make([]int64, 0, int(B)*L)
	// Position j of a row predicts its token j+1: tgt and w are (B, L−1).
	tgt := make([]int64, 0, int(B)*(L-1))
	w := make([]float32, 0, int(B)*(L-1))
	var count float64
	for _, r := range rows {
		n := 0
		for k, i := range r.seqs {
			seq := batch[i]
			for j, id := range seq.TokenIDs {
				ids, pos, mask, branch = append(ids, int64(id)), append(pos, int64(j)), append(mask, 1), append(branch, int64(k+1))
				if n+j == 0 {
					continue // a row's first token is predicted by nothing
				}
				// Row position n+j−1 predicts this token; the first token of a
				// packed sequence is not a target (its predictor belongs to
				// the sequence before it).
				on := j > 0 && seq.Targets[j]
				tgt = append(tgt, int64(id))
				if on {
					w = append(w, 1)
					count++
				} else {
					w = append(w, 0)
				}
			}
			n += len(seq.TokenIDs)
		}
		for ; n < L; n++ {
			ids, pos, mask, branch = append(ids, 0), append(pos, int64(n)), append(mask, 0), append(branch, 0)
			if n > 0 {
				tgt, w = append(tgt, 0), append(w, 0)
			}
		}
	}
	dev := t.Policy.Device()
	b := model.Batch{
		IDs:       s.To(s.FromInt64(ids, B, int64(L)), dev, torch.Int64),
		Positions: s.To(s.FromInt64(pos, B, int64(L)), dev, torch.Int64),
		Mask:      s.To(s.FromInt64(mask, B, int64(L)), dev, torch.Int64),
	}
	if packed {
		b.Branches = s.To(s.FromInt64(branch, B, int64(L)), dev, torch.Int64)
	}
	h, err := t.Policy.Hidden(s, b) // (B, L, C)
	if err != nil {
		return train.Loss{}, err
	}
	h = s.Narrow(h, 1, 0, int64(L-1)) // (B, L−1, C): the predicting positions
	target := s.To(s.FromInt64(tgt, B, int64(L-1)), dev, torch.Int64)
	weight := s.To(s.FromFloat32(w, B, int64(L-1)), dev, torch.Float32)
	lp, _, err := generate.Selective(s, t.Policy, h, target, false) // (B, L−1)
	if err != nil {
		return train.Loss{}, err
	}
	sum := s.Neg(s.Sum(s.Mul(lp, weight)))
	if err := s.Err(); err != nil {
		return train.Loss{}, err
	}
	return train.Loss{Sum: sum, Count: count, Metrics: map[string]float64{}}, nil
}

// SFTEvalLoss returns the summed target-token cross-entropy of batch and
// the number of target tokens, without grad and without an update
// (a validation split's loss is sum/tokens).
func (t *Trainer) SFTEvalLoss(ctx context.Context, batch []backend.SFTSample, opt backend.SFTOptions) (sum float64, tokens int, err error) {
	defer torch.SetGrad(false)()
	rows := sftRows(batch, opt.PackLength)
	for i := 0; i < len(rows); i += t.cfg.MicroBatch {
		if err := ctx.Err(); err != nil {
			return 0, 0, err
		}
		err := func() error {
			s := torch.NewScope()
			defer s.Close()
			l, err := t.sftLoss(s, batch, rows[i:min(i+t.cfg.MicroBatch, len(rows))])
			if err != nil {
				return err
			}
			v, err := torch.Item(l.Sum)
			if err != nil {
				return err
			}
			sum += v
			tokens += int(l.Count)
			return nil
		}()
		if err != nil {
			return 0, 0, fmt.Errorf("sft eval: %w", err)
		}
	}
	return sum, tokens, nil
}

// SetLR sets the optimizer's learning rate for the next steps.
func (t *Trainer) SetLR(lr float64) { t.tr.Opt.SetLR(lr) }

// indices returns 0 … n−1.
func indices(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}
