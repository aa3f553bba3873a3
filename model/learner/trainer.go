package learner

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/evolm/evolm/method/grpo"
	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/fused"
	"github.com/evolm/evolm/model/generate"
	"github.com/evolm/evolm/model/lora"
	"github.com/evolm/evolm/model/optim"
	"github.com/evolm/evolm/model/torch"
	"github.com/evolm/evolm/model/train"
	"github.com/evolm/evolm/serving/backend"
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
	// LoRA, with Rank > 0, trains a LoRA adapter (fp32) on the frozen
	// policy instead of every weight; the KL reference is then the policy
	// with its adapter off. Rank 0 is full fine-tuning.
	LoRA lora.Config
	// Seed draws the adapter's initial lora_A and, with LoRA dropout, the
	// dropout masks of each optimizer step (seeded from Seed and the step,
	// so a resumed run draws the same masks).
	Seed int64
	// GradCheckpointing recomputes each decoder layer in backward instead of
	// keeping its activations (stages.run.grad_checkpointing).
	GradCheckpointing bool
	// DP, when set, makes the learner one rank of a data-parallel group:
	// every rank is given the same (global) batch, trains the micro-batches
	// of its block (backend.RankBlock) and the step equals the one-process step
	// over the whole batch (model/train, DataParallel). nil: one process.
	DP *train.DataParallel
}

// DefaultTrainerConfig returns the paper's defaults (README.md, "The method").
func DefaultTrainerConfig() TrainerConfig {
	return TrainerConfig{
		Loss:        LossConfig{Beta: 0.001, Epsilon: 0.2, Norm: grpo.NormGRPO},
		LR:          1e-6,
		MaxGradNorm: 1.0,
		MicroBatch:  8,
	}
}

// Trainer is the GRPO learner of the in-process engine (with a tokenizer,
// serving/torchbe makes it a backend.Trainer). In full
// fine-tuning it trains Policy in place with AdamW and keeps Ref, a frozen
// copy made at construction, for the k3 KL term. With LoRA it trains
// Adapter, attached to the frozen Policy, and the reference is Policy with
// the adapter off. One TrainStep is one optimizer step.
type Trainer struct {
	Policy  model.CausalLM
	Ref     model.CausalLM // frozen; nil when Beta = 0 or with LoRA
	Adapter *lora.Adapter  // the trained adapter with LoRA, else nil
	// BaseModel is recorded as base_model_name_or_path in saved adapters.
	BaseModel string
	tr        *train.Trainer[int] // micro-batches are indices into a step's own slices
	cfg       TrainerConfig
	save      model.SaveOptions
}

// NewTrainer turns on grads for policy and builds the optimizer. ref is the
// frozen reference of the KL term (when β ≠ 0); nil makes it a frozen copy of
// policy as it is now, which is right at the start of a run but not on
// resume, where the caller loads the initial weights. The trainer owns ref.
// save says how Save writes checkpoints (dtype, tokenizer files). Close frees
// the optimizer and the reference.
//
// With cfg.LoRA.Rank > 0, NewTrainer attaches a fresh adapter to policy
// (seeded by cfg.Seed) and trains only that; ref must be nil, since the
// reference is policy with the adapter off. Close then also detaches and
// frees the adapter. To resume, LoadAdapter the checkpoint's adapter.
func NewTrainer(policy, ref model.CausalLM, cfg TrainerConfig, save model.SaveOptions) (*Trainer, error) {
	if cfg.MicroBatch <= 0 {
		return nil, fmt.Errorf("grpo trainer: micro_batch = %d, want > 0", cfg.MicroBatch)
	}
	if cfg.Loss.Norm == grpo.NormDrGRPO && cfg.Loss.MaxCompletionLen <= 0 {
		return nil, fmt.Errorf("grpo trainer: dr_grpo needs max completion length > 0")
	}
	if cfg.Loss.Norm == grpo.NormPack && cfg.Loss.PackLength <= 0 {
		return nil, fmt.Errorf("grpo trainer: pack normalisation needs pack length > 0")
	}
	if cfg.LoRA.Rank > 0 {
		if cfg.LoRA.Dropout > 0 && cfg.GradCheckpointing {
			return nil, fmt.Errorf("grpo trainer: LoRA dropout %v with gradient checkpointing: the backward recompute would draw new dropout masks", cfg.LoRA.Dropout)
		}
		return newLoRATrainer(policy, ref, cfg, save)
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
	tr, err := train.New[int](policy, train.Config{AdamW: adam, WeightDecay: cfg.WeightDecay, MaxGradNorm: cfg.MaxGradNorm, GradCheckpointing: cfg.GradCheckpointing, DP: cfg.DP})
	if err != nil {
		t.Close()
		return nil, fmt.Errorf("grpo trainer: %w", err)
	}
	t.tr = tr
	return t, nil
}

func newLoRATrainer(policy, ref model.CausalLM, cfg TrainerConfig, save model.SaveOptions) (*Trainer, error) {
	if ref != nil {
		return nil, fmt.Errorf("grpo trainer: with LoRA the reference is the policy with its adapter off; pass no reference model")
	}
	ad, err := lora.New(policy, cfg.LoRA, cfg.Seed)
	if err != nil {
		return nil, fmt.Errorf("grpo trainer: %w", err)
	}
	t := &Trainer{Policy: policy, Adapter: ad, cfg: cfg, save: save}
	adam := optim.DefaultAdamW(cfg.LR)
	tr, err := train.New[int](policy, train.Config{AdamW: adam, WeightDecay: cfg.WeightDecay, MaxGradNorm: cfg.MaxGradNorm, Params: ad.Parameters(), GradCheckpointing: cfg.GradCheckpointing, DP: cfg.DP})
	if err != nil {
		t.Close()
		return nil, fmt.Errorf("grpo trainer: %w", err)
	}
	t.tr = tr
	return t, nil
}

// Optimizer exposes the AdamW state for checkpointing.
func (t *Trainer) Optimizer() *optim.AdamW { return t.tr.Opt }

// SaveOptimizer writes the AdamW state to path (safetensors).
func (t *Trainer) SaveOptimizer(path string) error { return t.tr.Opt.Save(path) }

// LoadOptimizer loads the AdamW state that SaveOptimizer wrote (resume).
func (t *Trainer) LoadOptimizer(path string) error { return t.tr.Opt.Load(path) }

// Close frees the optimizer state, the reference model and the adapter
// (not the policy).
func (t *Trainer) Close() {
	if t.tr != nil {
		t.tr.Close()
	}
	if t.Ref != nil {
		t.Ref.Close()
	}
	if t.Adapter != nil {
		t.Adapter.Close()
		t.Adapter = nil
	}
}

// TrainStep takes one optimizer step on batch. Samples whose completion is
// empty carry no tokens and are skipped; a batch with no tokens at all is an
// error. Reference log-probs missing from the samples are computed with Ref.
// The reference passes and the step run inside one fused.KeepBlocks: they
// reuse each other's large host blocks, within the step's peak.
func (t *Trainer) TrainStep(ctx context.Context, batch []backend.TrainSample) (st backend.TrainStats, err error) {
	err = fused.KeepBlocks(func() error {
		st, err = t.trainStep(ctx, batch)
		return err
	})
	return st, err
}

func (t *Trainer) trainStep(ctx context.Context, batch []backend.TrainSample) (backend.TrainStats, error) {
	var rows []backend.TrainSample
	for _, s := range batch {
		if len(s.CompletionTokenIDs) > 0 {
			rows = append(rows, s)
		}
	}
	if len(rows) == 0 {
		return backend.TrainStats{}, fmt.Errorf("grpo step: no sample has completion tokens")
	}
	var mbs [][]backend.TrainSample
	var packW [][]packWeight // per micro-batch, grpo.NormPack only
	weights := t.packWeights(rows)
	for i := 0; i < len(rows); i += t.cfg.MicroBatch {
		end := min(i+t.cfg.MicroBatch, len(rows))
		mbs = append(mbs, rows[i:end])
		if weights != nil {
			packW = append(packW, weights[i:end])
		}
	}
	if dp := t.cfg.DP; dp != nil {
		// Packing and micro-batching are of the global batch; this rank
		// computes its block of micro-batches only.
		a, b := backend.RankBlock(len(mbs), dp.Group.Rank(), dp.Group.WorldSize())
		mbs = mbs[a:b]
		if packW != nil {
			packW = packW[a:b]
		}
	}
	var refTime time.Duration
	if t.cfg.Loss.Beta != 0 {
		t0 := time.Now()
		for _, mb := range mbs {
			if err := t.fillRef(ctx, mb); err != nil {
				return backend.TrainStats{}, err
			}
		}
		refTime = time.Since(t0)
	}
	if t.Adapter != nil {
		prev := t.Adapter.SetTraining(true) // dropout in the policy's forward passes only
		defer t.Adapter.SetTraining(prev)
		if t.cfg.LoRA.Dropout > 0 {
			torch.ManualSeed(stepSeed(t.cfg.Seed, t.tr.Opt.StepCount()))
		}
	}
	m, err := t.tr.Step(ctx, indices(len(mbs)), func(s *torch.Scope, i int) (train.Loss, error) {
		var w []packWeight
		if packW != nil {
			w = packW[i]
		}
		return t.microLoss(s, mbs[i], w)
	})
	if err != nil {
		return backend.TrainStats{}, fmt.Errorf("grpo step: %w", err)
	}
	st := backend.TrainStats{Step: int(m.Step), GradNorm: m.GradNorm, Skipped: m.Skipped, RefTime: refTime}
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
	var lps [][]float32
	var err error
	if t.Adapter != nil {
		err = t.Adapter.Disabled(func() error {
			lps, _, err = generate.LogProbs(ctx, t.Policy, conts, t.cfg.MicroBatch, false)
			return err
		})
	} else {
		lps, _, err = generate.LogProbs(ctx, t.Ref, conts, t.cfg.MicroBatch, false)
	}
	if err != nil {
		return fmt.Errorf("grpo step: reference log-probs: %w", err)
	}
	for k, i := range need {
		rows[i].RefLogProbs = toF64(lps[k])
	}
	return nil
}

// packWeight is a sequence's share of grpo.NormPack's loss: its token sum is
// weighed by 1/tokens of its pack, and it counts as 1/sequences of a pack.
type packWeight struct{ perToken, count float64 }

// packWeights packs rows (grpo.NormPack; nil otherwise) as the official trainer
// does, in the order the batch arrives.
func (t *Trainer) packWeights(rows []backend.TrainSample) []packWeight {
	if t.cfg.Loss.Norm != grpo.NormPack {
		return nil
	}
	pl, cl := make([]int, len(rows)), make([]int, len(rows))
	for i, r := range rows {
		pl[i], cl[i] = len(r.PromptTokenIDs), len(r.CompletionTokenIDs)
	}
	w := make([]packWeight, len(rows))
	for _, p := range grpo.Packs(pl, cl, t.cfg.Loss.PackLength) {
		for _, i := range p.Seqs {
			w[i] = packWeight{perToken: 1 / float64(p.Tokens), count: 1 / float64(len(p.Seqs))}
		}
	}
	return w
}

// microLoss is the train.LossFn: the micro-batch's loss as a sum over its
// items in the configured normalisation (train divides by ΣCount once), so
// accumulation reproduces the full-batch loss exactly. pw holds the
// micro-batch's pack weights under grpo.NormPack.
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
	if t.cfg.Loss.TISCap > 0 {
		known := func(r backend.TrainSample) bool { return len(r.SamplerLogProbs) == len(r.CompletionTokenIDs) }
		in.SamplerLogProbs = padded(func(r backend.TrainSample) []float64 {
			if !known(r) {
				return nil
			}
			return r.SamplerLogProbs
		})
		in.SamplerMask = padded(func(r backend.TrainSample) []float64 {
			if !known(r) {
				return nil
			}
			ones := make([]float64, len(r.CompletionTokenIDs))
			for i := range ones {
				ones[i] = 1
			}
			return ones
		})
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
	case grpo.NormDAPO:
		count = m.Tokens
	case grpo.NormPack: // Σ over the batch is its number of packs
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

// Save writes the policy as an HF checkpoint to dir and returns dir; with
// LoRA it writes the adapter in PEFT's format instead (adapter_config.json,
// adapter_model.safetensors), which PEFT and vLLM load on the base model.
func (t *Trainer) Save(ctx context.Context, dir string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if t.Adapter != nil {
		if err := t.Adapter.Save(dir, t.BaseModel); err != nil {
			return "", fmt.Errorf("grpo: %w", err)
		}
		return dir, nil
	}
	if err := model.Save(t.Policy, dir, t.save); err != nil {
		return "", fmt.Errorf("grpo: %w", err)
	}
	return dir, nil
}

// LoadAdapter loads the adapter weights that Save wrote to dir into the
// trained adapter, in place (resume; the optimizer state loads separately).
func (t *Trainer) LoadAdapter(dir string) error {
	if t.Adapter == nil {
		return fmt.Errorf("grpo: load adapter %s: the trainer does full fine-tuning", dir)
	}
	if err := t.Adapter.LoadWeights(dir); err != nil {
		return fmt.Errorf("grpo: %w", err)
	}
	return nil
}

// stepSeed is the libtorch seed of optimizer step n's dropout masks
// (splitmix64 of the base seed and the step).
func stepSeed(seed, n int64) int64 {
	z := uint64(seed) + 0x9e3779b97f4a7c15*uint64(n+1)
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return int64((z ^ (z >> 31)) >> 1)
}

func toF64(xs []float32) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = float64(x)
	}
	return out
}
