package grpo

import (
	"context"
	"fmt"
	"math"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/backend"
	"github.com/evolm/evolm/model/generate"
	"github.com/evolm/evolm/model/optim"
	"github.com/evolm/evolm/model/torch"
	"github.com/evolm/evolm/model/train"
)

// TrainerConfig configures the in-process GRPO learner.
type TrainerConfig struct {
	Loss        LossConfig
	LR          float64 // AdamW learning rate (1e-6)
	WeightDecay float64 // on ≥2-dim tensors only (0.0 in the paper's code)
	MaxGradNorm float64 // global-norm clip (1.0)
	// MicroBatch is the number of sequences per forward/backward pass; the
	// step accumulates gradients over ⌈batch/MicroBatch⌉ of them.
	MicroBatch int
	// GradCheckpointing recomputes each decoder layer in backward instead of
	// keeping its activations (stages.run.grad_checkpointing).
	GradCheckpointing bool
}

// DefaultTrainerConfig returns the paper's defaults (DESIGN §1).
func DefaultTrainerConfig() TrainerConfig {
	return TrainerConfig{
		Loss:        LossConfig{Beta: 0.001, Epsilon: 0.2, Norm: NormGRPO},
		LR:          1e-6,
		MaxGradNorm: 1.0,
		MicroBatch:  8,
	}
}

// Trainer is backend.Trainer over the in-process engine: it trains Policy in
// place with AdamW and keeps Ref, a frozen copy made at construction, for the
// k3 KL term. One TrainStep is one optimizer step.
type Trainer struct {
	Policy model.CausalLM
	Ref    model.CausalLM // frozen; nil when Beta = 0
	tr     *train.Trainer[[]backend.TrainSample]
	cfg    TrainerConfig
	save   model.SaveOptions
}

var _ backend.Trainer = (*Trainer)(nil)

// NewTrainer turns on grads for policy and builds the optimizer. ref is the
// frozen reference of the KL term (when β ≠ 0); nil makes it a frozen copy of
// policy as it is now, which is right at the start of a run but not on
// resume, where the caller loads the initial weights. The trainer owns ref.
// save says how Save writes checkpoints (dtype, tokenizer files). Close frees
// the optimizer and the reference.
func NewTrainer(policy, ref model.CausalLM, cfg TrainerConfig, save model.SaveOptions) (*Trainer, error) {
	if cfg.MicroBatch <= 0 {
		return nil, fmt.Errorf("grpo trainer: micro_batch = %d, want > 0", cfg.MicroBatch)
	}
	if cfg.Loss.Norm == NormDrGRPO && cfg.Loss.MaxCompletionLen <= 0 {
		return nil, fmt.Errorf("grpo trainer: dr_grpo needs max completion length > 0")
	}
	if cfg.Loss.Norm == NormPack && cfg.Loss.PackLength <= 0 {
		return nil, fmt.Errorf("grpo trainer: pack normalisation needs pack length > 0")
	}
	t := &Trainer{Policy: policy, Ref: ref, cfg: cfg, save: save}
	if cfg.Loss.Beta != 0 && ref == nil {
		cp, err := model.FrozenCopy(policy)
		if err != nil {
			return nil, fmt.Errorf("grpo trainer: %w", err)
		}
		t.Ref = cp
	} else if ref != nil {
		if err := model.SetRequiresGrad(ref, false); err != nil {
			return nil, fmt.Errorf("grpo trainer: reference: %w", err)
		}
	}
	adam := optim.DefaultAdamW(cfg.LR)
	tr, err := train.New[[]backend.TrainSample](policy, train.Config{AdamW: adam, WeightDecay: cfg.WeightDecay, MaxGradNorm: cfg.MaxGradNorm, GradCheckpointing: cfg.GradCheckpointing})
	if err != nil {
		t.Close()
		return nil, fmt.Errorf("grpo trainer: %w", err)
	}
	t.tr = tr
	return t, nil
}

// Optimizer exposes the AdamW state for checkpointing.
func (t *Trainer) Optimizer() *optim.AdamW { return t.tr.Opt }

// Close frees the optimizer state and the reference model (not the policy).
func (t *Trainer) Close() {
	if t.tr != nil {
		t.tr.Close()
	}
	if t.Ref != nil {
		t.Ref.Close()
	}
}

// TrainStep takes one optimizer step on batch. Samples whose completion is
// empty carry no tokens and are skipped; a batch with no tokens at all is an
// error. Reference log-probs missing from the samples are computed with Ref.
func (t *Trainer) TrainStep(ctx context.Context, batch []backend.TrainSample) (backend.TrainStats, error) {
	var rows []backend.TrainSample
	for _, s := range batch {
		if len(s.CompletionTokenIDs) > 0 {
			rows = append(rows, s)
		}
	}
	if len(rows) == 0 {
		return backend.TrainStats{}, fmt.Errorf("grpo step: no sample has completion tokens")
	}
	if t.cfg.Loss.Beta != 0 {
		if err := t.fillRef(ctx, rows); err != nil {
			return backend.TrainStats{}, err
		}
	}
	var mbs [][]backend.TrainSample
	var packW [][]packWeight // per micro-batch, NormPack only
	weights := t.packWeights(rows)
	for i := 0; i < len(rows); i += t.cfg.MicroBatch {
		end := min(i+t.cfg.MicroBatch, len(rows))
		mbs = append(mbs, rows[i:end])
		if weights != nil {
			packW = append(packW, weights[i:end])
		}
	}
	next := 0 // train.Step calls the loss once per micro-batch, in order
	m, err := t.tr.Step(ctx, mbs, func(s *torch.Scope, mb []backend.TrainSample) (train.Loss, error) {
		var w []packWeight
		if packW != nil {
			w = packW[next]
		}
		next++
		return t.microLoss(s, mb, w)
	})
	if err != nil {
		return backend.TrainStats{}, fmt.Errorf("grpo step: %w", err)
	}
	st := backend.TrainStats{Step: int(m.Step), GradNorm: m.GradNorm, Skipped: m.Skipped}
	tokens := m.Extra["tokens"]
	if tokens > 0 {
		st.KL = m.Extra["kl_sum"] / tokens
		st.ClipFrac = m.Extra["clipped"] / tokens
	}
	// The step's loss in the configured normalisation, whatever Count was.
	st.Loss = m.Loss
	st.Tokens = int(math.Round(tokens * m.Count))
	return st, nil
}

func (t *Trainer) fillRef(ctx context.Context, rows []backend.TrainSample) error {
	var need []int
	var conts []generate.Continuation
	for i, s := range rows {
		if s.RefLogProbs == nil {
			need = append(need, i)
			conts = append(conts, generate.Continuation{Prompt: s.PromptTokenIDs, Completion: s.CompletionTokenIDs})
		}
	}
	if len(need) == 0 {
		return nil
	}
	lps, _, err := generate.LogProbs(ctx, t.Ref, conts, t.cfg.MicroBatch, false)
	if err != nil {
		return fmt.Errorf("grpo step: reference log-probs: %w", err)
	}
	for k, i := range need {
		rows[i].RefLogProbs = toF64(lps[k])
	}
	return nil
}

// packWeight is a sequence's share of NormPack's loss: its token sum is
// weighed by 1/tokens of its pack, and it counts as 1/sequences of a pack.
type packWeight struct{ perToken, count float64 }

// packWeights packs rows (NormPack; nil otherwise) as the official trainer
// does, in the order the batch arrives.
func (t *Trainer) packWeights(rows []backend.TrainSample) []packWeight {
	if t.cfg.Loss.Norm != NormPack {
		return nil
	}
	pl, cl := make([]int, len(rows)), make([]int, len(rows))
	for i, r := range rows {
		pl[i], cl[i] = len(r.PromptTokenIDs), len(r.CompletionTokenIDs)
	}
	w := make([]packWeight, len(rows))
	for _, p := range Packs(pl, cl, t.cfg.Loss.PackLength) {
		for _, i := range p.Seqs {
			w[i] = packWeight{perToken: 1 / float64(p.Tokens), count: 1 / float64(len(p.Seqs))}
		}
	}
	return w
}

// microLoss is the train.LossFn: the micro-batch's loss as a sum over its
// items in the configured normalisation (train divides by ΣCount once), so
// accumulation reproduces the full-batch loss exactly. pw holds the
// micro-batch's pack weights under NormPack.
func (t *Trainer) microLoss(s *torch.Scope, mb []backend.TrainSample, pw []packWeight) (train.Loss, error) {
	conts := make([]generate.Continuation, len(mb))
	for i, r := range mb {
		conts[i] = generate.Continuation{Prompt: r.PromptTokenIDs, Completion: r.CompletionTokenIDs}
	}
	sc, err := generate.Score(s, t.Policy, conts, false)
	if err != nil {
		return train.Loss{}, err
	}
	shape, err := torch.Shape(sc.LogProbs)
	if err != nil {
		return train.Loss{}, err
	}
	B, T := int(shape[0]), int(shape[1])
	dev := t.Policy.Device()
	padded := func(get func(backend.TrainSample) []float64) *torch.Tensor {
		buf := make([]float32, B*T)
		for i, r := range mb {
			for j, v := range get(r) {
				if j < T {
					buf[i*T+j] = float32(v)
				}
			}
		}
		return s.To(s.FromFloat32(buf, int64(B), int64(T)), dev, torch.Float32)
	}
	adv := make([]float32, B)
	for i, r := range mb {
		adv[i] = float32(r.Advantage)
	}
	in := LossInput{
		LogProbs:    sc.LogProbs,
		Advantages:  s.To(s.FromFloat32(adv, int64(B)), dev, torch.Float32),
		Mask:        sc.Mask,
		TotalSeqs:   1, // a sum over sequences; train divides by ΣCount
		TotalTokens: 1,
	}
	if mb[0].OldLogProbs != nil {
		for i, r := range mb {
			if len(r.OldLogProbs) != len(r.CompletionTokenIDs) {
				return train.Loss{}, fmt.Errorf("sample %d: %d old log-probs for %d completion tokens", i, len(r.OldLogProbs), len(r.CompletionTokenIDs))
			}
		}
		in.OldLogProbs = padded(func(r backend.TrainSample) []float64 { return r.OldLogProbs })
	}
	if t.cfg.Loss.Beta != 0 {
		for i, r := range mb {
			if len(r.RefLogProbs) != len(r.CompletionTokenIDs) {
				return train.Loss{}, fmt.Errorf("sample %d: %d reference log-probs for %d completion tokens", i, len(r.RefLogProbs), len(r.CompletionTokenIDs))
			}
		}
		in.RefLogProbs = padded(func(r backend.TrainSample) []float64 { return r.RefLogProbs })
	}
	if pw != nil {
		w := make([]float32, B)
		for i := range pw {
			w[i] = float32(pw[i].perToken)
		}
		in.PackWeights, in.TotalPacks = s.To(s.FromFloat32(w, int64(B)), dev, torch.Float32), 1
	}
	loss, m, err := Loss(s, in, t.cfg.Loss)
	if err != nil {
		return train.Loss{}, err
	}
	count := float64(B) // grpo and dr_grpo: per sequence
	switch t.cfg.Loss.Norm {
	case NormDAPO:
		count = m.Tokens
	case NormPack: // Σ over the batch is its number of packs
		count = 0
		for _, w := range pw {
			count += w.count
		}
	}
	return train.Loss{
		Sum:   loss,
		Count: count,
		Metrics: map[string]float64{
			"kl_sum": m.KLSum, "clipped": m.ClippedTokens, "tokens": m.Tokens,
		},
	}, nil
}

// Save writes the policy as an HF checkpoint to dir and returns dir.
func (t *Trainer) Save(ctx context.Context, dir string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if err := model.Save(t.Policy, dir, t.save); err != nil {
		return "", fmt.Errorf("grpo: %w", err)
	}
	return dir, nil
}

func toF64(xs []float32) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = float64(x)
	}
	return out
}
