package learner

import (
	"fmt"

	"github.com/evolm/evolm/method/grpo"
	"github.com/evolm/evolm/model/torch"
)

// LossConfig holds the hyperparameters of the clipped surrogate.
type LossConfig struct {
	// Beta weights the k3 KL penalty against the reference (0.001; 0 disables it).
	Beta float64
	// Epsilon is the lower clip range, ρ ≥ 1 − Epsilon (0.2).
	Epsilon float64
	// EpsilonHigh is the upper clip range, ρ ≤ 1 + EpsilonHigh; 0 means Epsilon.
	EpsilonHigh float64
	// Norm is the loss normalisation.
	Norm grpo.LossNorm
	// MaxCompletionLen is the dr_grpo denominator's length (tokens).
	MaxCompletionLen int
	// PackLength is the pack normalisation's row length in tokens (the
	// official PACK_LENGTH, 18500).
	PackLength int
	// TISCap, when > 0, turns on truncated importance sampling (verl's
	// tis_imp_ratio_cap, TRL's vllm_importance_sampling_cap): each token's
	// policy-gradient term is weighted by min(exp(logπ_old − logπ_sampler),
	// TISCap), a constant, correcting for a sampler (an inference server)
	// whose log-probs differ from the learner's.
	TISCap float64
}

// LossInput is one micro-batch. All per-token tensors are (B, T) float32 and
// aligned with the completion tokens; Mask is 1 on real completion tokens and
// 0 on padding.
type LossInput struct {
	LogProbs *torch.Tensor // (B, T) log π_θ, requires grad
	// OldLogProbs are the sampling policy's log-probs (B, T); nil means the
	// update is on-policy and they equal LogProbs detached (ratio 1, TRL's
	// num_iterations = 1).
	OldLogProbs *torch.Tensor
	// RefLogProbs are the frozen reference's log-probs (B, T); nil when Beta = 0.
	RefLogProbs *torch.Tensor
	Advantages  *torch.Tensor // (B,) float32
	Mask        *torch.Tensor // (B, T) float32 0/1
	// SamplerLogProbs are the sampler's log-probs of the completion tokens
	// (B, T) and SamplerMask (B, T) is 1 where they are known; with
	// LossConfig.TISCap > 0 they give the importance weights (1 where
	// unknown). nil: no correction.
	SamplerLogProbs, SamplerMask *torch.Tensor
	// TotalSeqs and TotalTokens are the whole accumulated batch's sequence and
	// token counts, so that micro-batch losses sum to the full-batch loss. Zero
	// means this micro-batch is the whole batch.
	TotalSeqs, TotalTokens float64
	// PackWeights (B,) float32 weighs each sequence's token sum by one over
	// the completion tokens of its pack, and TotalPacks is the batch's pack
	// count (grpo.NormPack only; see grpo.Packs).
	PackWeights *torch.Tensor
	TotalPacks  float64
}

// LossMetrics are the detached statistics of one micro-batch, as token-level
// sums so callers can aggregate over micro-batches exactly.
type LossMetrics struct {
	// KLSum is Σ mask·k3 over tokens.
	KLSum float64
	// ClippedTokens counts masked tokens whose ratio was clipped in the
	// direction that stops the gradient (ρ < 1−ε with A < 0, or ρ > 1+ε with A > 0).
	ClippedTokens float64
	// Tokens is Σ mask.
	Tokens float64
}

// Loss builds the GRPO loss of one micro-batch in s and returns it as a scalar
// tensor that requires grad (owned by s), with its detached metrics:
//
//	ρ = exp(logπ − logπ_old)
//	L_t = −w_t·min(ρ·A, clip(ρ, 1−ε, 1+ε_high)·A) + β·(exp(ref − logπ) − (ref − logπ) − 1)
//
// where w_t = min(exp(logπ_old − logπ_sampler), TISCap) with truncated
// importance sampling on (TISCap > 0), else 1 — TRL's and verl's form: the
// weight multiplies the policy-gradient term only, not the KL term.
//
// normalised as cfg.Norm says. Errors are the scope's sticky error.
func Loss(s *torch.Scope, in LossInput, cfg LossConfig) (*torch.Tensor, LossMetrics, error) {
	if in.LogProbs == nil || in.Advantages == nil || in.Mask == nil {
		return nil, LossMetrics{}, fmt.Errorf("grpo loss: LogProbs, Advantages and Mask are required")
	}
	if cfg.Beta != 0 && in.RefLogProbs == nil {
		return nil, LossMetrics{}, fmt.Errorf("grpo loss: beta = %g needs reference log-probs", cfg.Beta)
	}
	epsHigh := cfg.EpsilonHigh
	if epsHigh == 0 {
		epsHigh = cfg.Epsilon
	}
	shape, err := torch.Shape(in.LogProbs)
	if err != nil {
		return nil, LossMetrics{}, fmt.Errorf("grpo loss: %w", err)
	}
	if len(shape) != 2 {
		return nil, LossMetrics{}, fmt.Errorf("grpo loss: log-probs have shape %v, want (B, T)", shape)
	}
	b := float64(shape[0])
	old := in.OldLogProbs
	if old == nil {
		old = s.Detach(in.LogProbs)
	}
	adv := s.Unsqueeze(in.Advantages, 1) // (B, 1)
	ratio := s.Exp(s.Sub(in.LogProbs, old))
	clipped := s.Clamp(ratio, 1-cfg.Epsilon, 1+epsHigh)
	perTok := s.Neg(s.Minimum(s.Mul(ratio, adv), s.Mul(clipped, adv))) // (B, T)
	if cfg.TISCap > 0 && in.SamplerLogProbs != nil {
		// w = min(exp(old − sampler), cap) where the sampler's log-prob is
		// known, 1 elsewhere; old is detached, so w is a constant.
		w := s.ClampMax(s.Exp(s.Sub(s.Detach(old), in.SamplerLogProbs)), cfg.TISCap)
		w = s.Add(s.Mul(w, in.SamplerMask), s.AddScalar(s.Neg(in.SamplerMask), 1))
		perTok = s.Mul(perTok, w)
	}
	var kl *torch.Tensor
	if in.RefLogProbs != nil {
		d := s.Sub(in.RefLogProbs, in.LogProbs)
		kl = s.AddScalar(s.Sub(s.Exp(d), d), -1) // k3, (B, T)
		if cfg.Beta != 0 {
			perTok = s.Add(perTok, s.MulScalar(kl, cfg.Beta))
		}
	}
	masked := s.Mul(perTok, in.Mask)
	var loss *torch.Tensor
	switch cfg.Norm {
	case grpo.NormGRPO, "":
		seqLen := s.ClampMin(s.SumDim(in.Mask, []int64{1}, false), 1) // (B,)
		seqMean := s.Div(s.SumDim(masked, []int64{1}, false), seqLen)
		denom := in.TotalSeqs
		if denom == 0 {
			denom = b
		}
		loss = s.DivScalar(s.Sum(seqMean), denom)
	case grpo.NormDAPO:
		denom := in.TotalTokens
		if denom == 0 {
			n, err := torch.Item(s.Sum(in.Mask))
			if err != nil {
				return nil, LossMetrics{}, fmt.Errorf("grpo loss: %w", err)
			}
			denom = max(n, 1)
		}
		loss = s.DivScalar(s.Sum(masked), denom)
	case grpo.NormDrGRPO:
		if cfg.MaxCompletionLen <= 0 {
			return nil, LossMetrics{}, fmt.Errorf("grpo loss: dr_grpo needs max completion length > 0")
		}
		seqs := in.TotalSeqs
		if seqs == 0 {
			seqs = b
		}
		loss = s.DivScalar(s.Sum(masked), seqs*float64(cfg.MaxCompletionLen))
	case grpo.NormPack:
		if in.PackWeights == nil || !(in.TotalPacks > 0) {
			return nil, LossMetrics{}, fmt.Errorf("grpo loss: pack normalisation needs pack weights and a pack count > 0")
		}
		seqSum := s.SumDim(masked, []int64{1}, false) // (B,)
		loss = s.DivScalar(s.Sum(s.Mul(seqSum, in.PackWeights)), in.TotalPacks)
	default:
		return nil, LossMetrics{}, fmt.Errorf("grpo loss: unknown normalisation %q", cfg.Norm)
	}
	if err := s.Err(); err != nil {
		return nil, LossMetrics{}, fmt.Errorf("grpo loss: %w", err)
	}

	var m LossMetrics
	err = torch.NoGrad(func() error {
		ms := s.Child()
		defer ms.Close()
		r := ms.Detach(ratio)
		low := ms.LogicalAnd(ms.LtScalar(r, 1-cfg.Epsilon), ms.LtScalar(adv, 0))
		high := ms.LogicalAnd(ms.GtScalar(r, 1+epsHigh), ms.GtScalar(adv, 0))
		isClipped := ms.ToDType(ms.Add(ms.ToDType(low, torch.Float32), ms.ToDType(high, torch.Float32)), torch.Float32)
		var err error
		if m.ClippedTokens, err = torch.Item(ms.Sum(ms.Mul(isClipped, in.Mask))); err != nil {
			return err
		}
		if m.Tokens, err = torch.Item(ms.Sum(in.Mask)); err != nil {
			return err
		}
		if kl != nil {
			if m.KLSum, err = torch.Item(ms.Sum(ms.Mul(ms.Detach(kl), in.Mask))); err != nil {
				return err
			}
		}
		return ms.Err()
	})
	if err != nil {
		return nil, LossMetrics{}, fmt.Errorf("grpo loss metrics: %w", err)
	}
	return loss, m, nil
}
