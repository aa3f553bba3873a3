// Package train is the generic optimizer step of the engine: gradient
// accumulation over micro-batches, gradient clipping and an AdamW update.
// Stages (GRPO) supply the loss; this package owns the bookkeeping.
//
// One Step is one optimizer step over a batch split into micro-batches:
//
//	zero grads
//	for each micro-batch: loss_sum = LossFn(mb); backward(loss_sum)
//	grads /= Σ count                       (exact: the step's loss is Σ loss_sum / Σ count)
//	norm = clip_grad_norm_(max_norm)        (fp32 global norm, before clipping)
//	AdamW step                              (skipped when the loss or norm is NaN or Inf)
//
// Micro-batch losses are sums over their items, not means, and the scaling
// by the total count happens once after accumulation, so the gradient equals
// that of the whole batch's mean loss however the batch is split (the GRPO
// default "mean over each sequence's tokens, then mean over the batch" is a
// sum of per-sequence means divided by the number of sequences).
//
// Each micro-batch runs in its own scope with grad on and the OS thread
// locked; torch.Backward also runs the deferred recomputation of chunked
// log-probs and activation checkpointing (torch.Scope.DeferBackward), and
// the micro-batch's activations are freed right after.
//
// The frozen reference model of GRPO is model.FrozenCopy, or with LoRA the
// same model with its adapters off (model/lora).
package train

import (
	"context"
	"fmt"
	"math"
	"sort"

	"github.com/evolm/evolm/internal/failpoint"
	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/dist"
	"github.com/evolm/evolm/model/fused"
	"github.com/evolm/evolm/model/optim"
	"github.com/evolm/evolm/model/torch"
)

// Loss is one micro-batch's contribution to a step.
type Loss struct {
	// Sum is a scalar tensor (owned by the scope given to LossFn): the sum
	// over the micro-batch's items of their losses, with the autograd graph.
	Sum *torch.Tensor
	// Count is the number of items Sum covers (sequences, tokens …); the
	// step's loss is ΣSum / ΣCount over micro-batches.
	Count float64
	// Metrics are sums over the items (for example the k3 KL summed over
	// sequences); Step reports each as ΣMetric / ΣCount.
	Metrics map[string]float64
}

// LossFn computes the loss of one micro-batch. It runs with grad on, on a
// locked OS thread; everything it allocates in s is freed after backward.
type LossFn[M any] func(s *torch.Scope, mb M) (Loss, error)

// Config sets a trainer up.
type Config struct {
	AdamW       optim.AdamWConfig // lr, betas, eps
	WeightDecay float64           // applied to parameters with ≥ 2 dims only
	MaxGradNorm float64           // clip the global norm to this; ≤ 0: no clipping
	// Params are the tensors to train (a LoRA adapter's lora_A and lora_B);
	// nil trains every parameter of the model (full fine-tuning). With
	// Params the model's own parameters are frozen: no grad, no optimizer
	// state.
	Params []model.Param
	// GradCheckpointing recomputes each decoder layer in backward instead of
	// keeping its activations; the model must be a model.GradCheckpointer.
	GradCheckpointing bool
	// DP, when set, makes the trainer one rank of a data-parallel group
	// (see DataParallel); nil: one process.
	DP *DataParallel
}

// DataParallel is a trainer's data-parallel group. Every rank calls Step
// with its own micro-batches (possibly none) at the same time. The step is
// then the single-process step over the concatenation of every rank's
// micro-batches in rank order:
//
//	local: zero grads; backward each micro-batch (sums, as above)
//	gather every rank's per-micro-batch (loss, count, metrics); sum them in
//	  global order                          (Σ loss_sum / Σ count: global)
//	all-reduce (sum) every gradient         (c10d; before any scaling;
//	                                         ZeRO-2: reduced during backward)
//	grads /= Σ count (global)
//	norm: the global norm (ZeRO-2: each rank's shard's terms, summed)
//	clip; AdamW on this rank's parameters (all, or its shard at ZeRO ≥ 1)
//	ZeRO ≥ 1: broadcast every parameter from its owner
//
// ZeRO sharding is by whole tensors (optim.ShardByTensor): at ZeRO-1 a
// rank keeps AdamW state (m, v, fp32 master) for its tensors only. At
// ZeRO-2 it also keeps only its tensors' gradients: instead of the
// all-reduce above, dist.Zero2's hooks reduce each gradient to its owner
// while backward runs and free it on the other ranks (every rank runs as
// many reduction passes as the rank with the most micro-batches; see
// dist.Zero2), and Finish hands each owner its sums before the division.
type DataParallel struct {
	Group  *dist.Group
	ZeRO   int          // 0, 1 or 2
	Device torch.Device // where the byte gathers run: CPU for Gloo, the rank's GPU for NCCL
}

// Owner returns the owning rank of each trained parameter (all -1 at ZeRO-0
// or without DP).
func (t *Trainer[M]) Owner() []int { return t.owner }

// Metrics reports one step.
type Metrics struct {
	Step         int64              // optimizer steps taken, this one included
	Loss         float64            // ΣSum / ΣCount
	GradNorm     float64            // global gradient norm before clipping
	LR           float64            // learning rate used
	Count        float64            // ΣCount
	MicroBatches int                // micro-batches accumulated
	Extra        map[string]float64 // ΣMetric / ΣCount per LossFn metric
	// Skipped says why the update was not applied ("loss is NaN",
	// "gradient norm is +Inf"); "" when it was. A skipped step changes
	// neither the weights nor the optimizer state, and Step does not count it.
	Skipped string
}

// Trainer trains a model in place. Not safe for concurrent use.
type Trainer[M any] struct {
	Model model.CausalLM
	Opt   *optim.AdamW
	cfg   Config
	param []optim.Param
	owner []int       // ZeRO ≥ 1: each param's owning rank; nil otherwise
	z2    *dist.Zero2 // ZeRO-2: the gradient hooks; nil otherwise
}

// New turns on requires_grad for the trained tensors (cfg.Params, or every
// parameter of m), off for the rest of m, and builds AdamW over the trained
// ones (optim.DefaultGroups). Close frees the optimizer state (not m).
func New[M any](m model.CausalLM, cfg Config) (*Trainer[M], error) {
	if cfg.GradCheckpointing {
		gc, ok := m.(model.GradCheckpointer)
		if !ok {
			return nil, fmt.Errorf("train: grad checkpointing: %T cannot recompute its layers", m)
		}
		gc.SetGradCheckpointing(true)
	}
	train := cfg.Params
	if train == nil {
		train = m.Parameters()
	} else if err := model.SetRequiresGrad(m, false); err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	if len(train) == 0 {
		return nil, fmt.Errorf("train: no parameters to train")
	}
	var ps []optim.Param
	for _, p := range train {
		if err := torch.SetRequiresGrad(p.Tensor, true); err != nil {
			return nil, fmt.Errorf("train: %s: %w", p.Name, err)
		}
		ps = append(ps, optim.Param{Name: p.Name, Tensor: p.Tensor})
	}
	var owner []int
	mine := ps
	if dp := cfg.DP; dp != nil && dp.ZeRO > 0 {
		if dp.ZeRO > 2 {
			return nil, fmt.Errorf("train: zero stage %d, want 0, 1 or 2", dp.ZeRO)
		}
		sizes := make([]int64, len(ps))
		for i, p := range ps {
			sh, err := torch.Shape(p.Tensor)
			if err != nil {
				return nil, fmt.Errorf("train: %s: %w", p.Name, err)
			}
			sizes[i] = torch.Numel(sh)
		}
		owner = optim.ShardByTensor(sizes, dp.Group.WorldSize())
		mine = nil
		for i, p := range ps {
			if owner[i] == dp.Group.Rank() {
				mine = append(mine, p)
			}
		}
	}
	groups, err := optim.DefaultGroups(mine, cfg.WeightDecay)
	if err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	opt, err := optim.NewAdamW(groups, cfg.AdamW)
	if err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	t := &Trainer[M]{Model: m, Opt: opt, cfg: cfg, param: ps, owner: owner}
	if dp := cfg.DP; dp != nil && dp.ZeRO == 2 {
		// Backward reaches a decoder's parameters last to first: reduce
		// them in that order.
		rev := make([]*torch.Tensor, len(ps))
		own := make([]int, len(ps))
		for i, p := range ps {
			rev[len(ps)-1-i] = p.Tensor
			own[len(ps)-1-i] = owner[i]
		}
		if t.z2, err = dp.Group.AttachZeRO2(rev, own); err != nil {
			opt.Close()
			return nil, fmt.Errorf("train: %w", err)
		}
	}
	return t, nil
}

// Close frees the optimizer state and removes ZeRO-2's hooks.
func (t *Trainer[M]) Close() {
	if t.z2 != nil {
		t.z2.Detach()
	}
	t.Opt.Close()
}

// PeakGradBytes is the most gradient memory this rank held at once during
// its last step at ZeRO-2 (its own parameters' sums and the gradients not
// yet reduced); 0 at other stages.
func (t *Trainer[M]) PeakGradBytes() int64 {
	if t.z2 == nil {
		return 0
	}
	return t.z2.PeakGradBytes()
}

// Step runs one optimizer step over microbatches (see the package doc). On
// error no update is applied and the gradients are zeroed. A non-finite
// loss or gradient norm is no error: the update is skipped (gradients
// zeroed, no optimizer step) and Metrics.Skipped says why; the caller
// counts and limits such steps.
//
// The step runs inside fused.KeepBlocks: its micro-batches reuse each
// other's large host blocks instead of mapping them afresh, and resident
// memory peaks no higher than without.
func (t *Trainer[M]) Step(ctx context.Context, microbatches []M, lossFn LossFn[M]) (m Metrics, err error) {
	err = fused.KeepBlocks(func() error {
		m, err = t.step(ctx, microbatches, lossFn)
		return err
	})
	return m, err
}

func (t *Trainer[M]) step(ctx context.Context, microbatches []M, lossFn LossFn[M]) (Metrics, error) {
	dp := t.cfg.DP
	if len(microbatches) == 0 && dp == nil {
		return Metrics{}, fmt.Errorf("train: step with no micro-batches")
	}
	if err := t.zeroGrads(); err != nil {
		return Metrics{}, fmt.Errorf("train: %w", err)
	}
	passes := len(microbatches)
	if t.z2 != nil {
		// Every rank runs as many reduction passes as the rank with the
		// most micro-batches.
		var err error
		if passes, err = maxOverRanks(dp, passes); err != nil {
			return Metrics{}, t.abort(err)
		}
	}
	var local []microStat
	for i, mb := range microbatches {
		if err := ctx.Err(); err != nil {
			return Metrics{}, t.abort(err)
		}
		l, err := t.micro(mb, lossFn)
		if err == nil && t.z2 != nil {
			err = t.z2.EndPass()
		}
		if err != nil {
			return Metrics{}, t.abort(fmt.Errorf("train: micro-batch %d: %w", i, err))
		}
		local = append(local, microStat{Loss: l.loss, Count: l.Count, Metrics: l.Metrics})
	}
	for range passes - len(microbatches) {
		if err := t.z2.EndPass(); err != nil {
			return Metrics{}, t.abort(fmt.Errorf("train: data-parallel step: %w", err))
		}
	}
	all := local
	if dp != nil {
		var err error
		if all, err = gatherStats(dp, local); err != nil {
			return Metrics{}, t.abort(err)
		}
	}
	var sum, count float64
	extra := map[string]float64{}
	for _, l := range all {
		sum += l.Loss
		count += l.Count
		for k, v := range l.Metrics {
			extra[k] += v
		}
	}
	micro := len(all)
	if !(count > 0) {
		return Metrics{}, t.abort(fmt.Errorf("train: micro-batches cover %v items, want > 0", count))
	}
	if failpoint.Active("train-nan-loss") {
		sum = math.NaN() // fault injection for the reliability tests
	}
	if !finite(sum) {
		return t.skip(fmt.Sprintf("loss is %v", sum/count), sum/count, math.NaN(), count, micro)
	}
	if t.z2 != nil {
		if err := t.z2.Finish(); err != nil {
			return Metrics{}, t.abort(err)
		}
	} else if dp != nil {
		if err := t.allReduceGrads(dp); err != nil {
			return Metrics{}, t.abort(err)
		}
	}
	if err := t.scaleGrads(1 / count); err != nil {
		return Metrics{}, t.abort(err)
	}
	norm, err := t.clip()
	if err != nil {
		return Metrics{}, t.abort(err)
	}
	if !finite(norm) {
		return t.skip(fmt.Sprintf("gradient norm is %v", norm), sum/count, norm, count, micro)
	}
	lr := t.Opt.LR()
	if err := t.Opt.Step(); err != nil {
		return Metrics{}, t.abort(err)
	}
	if t.owner != nil {
		if err := t.broadcastParams(dp); err != nil {
			return Metrics{}, err
		}
	}
	for k := range extra {
		extra[k] /= count
	}
	return Metrics{
		Step: t.Opt.StepCount(), Loss: sum / count, GradNorm: norm, LR: lr,
		Count: count, MicroBatches: micro, Extra: extra,
	}, nil
}

type microLoss struct {
	Loss
	loss float64
}

func (t *Trainer[M]) micro(mb M, lossFn LossFn[M]) (microLoss, error) {
	defer torch.SetGrad(true)()
	s := torch.NewScope()
	defer s.Close()
	l, err := lossFn(s, mb)
	if err != nil {
		return microLoss{}, err
	}
	if err := s.Err(); err != nil {
		return microLoss{}, err
	}
	if l.Sum == nil {
		return microLoss{}, fmt.Errorf("loss function returned no loss tensor")
	}
	v, err := torch.Item(l.Sum)
	if err != nil {
		return microLoss{}, fmt.Errorf("loss: %w", err)
	}
	if err := torch.Backward(l.Sum); err != nil {
		return microLoss{}, err
	}
	return microLoss{Loss: l, loss: v}, nil
}

// scaleGrads multiplies every gradient by f in place.
func (t *Trainer[M]) scaleGrads(f float64) error {
	defer torch.SetGrad(false)()
	s := torch.NewScope()
	defer s.Close()
	for _, p := range t.param {
		c := s.Child()
		if g := c.Grad(p.Tensor); g != nil {
			c.Copy_(g, c.MulScalar(g, f))
		}
		err := c.Err()
		c.Close()
		if err != nil {
			return fmt.Errorf("train: scale grad of %s: %w", p.Name, err)
		}
	}
	return nil
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// skip zeroes the gradients and reports a step whose update was not
// applied: the weights and the optimizer state are unchanged.
func (t *Trainer[M]) skip(why string, loss, norm, count float64, micro int) (Metrics, error) {
	if err := t.zeroGrads(); err != nil {
		return Metrics{}, fmt.Errorf("train: %s, and zeroing grads: %w", why, err)
	}
	return Metrics{Step: t.Opt.StepCount(), Loss: loss, GradNorm: norm, LR: t.Opt.LR(), Count: count,
		MicroBatches: micro, Extra: map[string]float64{}, Skipped: why}, nil
}

func (t *Trainer[M]) abort(err error) error {
	if t.z2 != nil {
		t.z2.MarkFailed()
	}
	if zerr := t.zeroGrads(); zerr != nil {
		return fmt.Errorf("%w (and zeroing grads: %v)", err, zerr)
	}
	return err
}

// Names lists metric keys sorted, for stable logging.
func (m Metrics) Names() []string {
	ks := make([]string, 0, len(m.Extra))
	for k := range m.Extra {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
