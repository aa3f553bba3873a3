// Package optim holds the optimizer side of training: AdamW with parameter
// groups, gradient clipping by global norm, and optimizer state that saves
// and loads so a run resumes exactly.
//
// Semantics are torch.optim.AdamW's (foreach=False, amsgrad=False), step by
// step for each parameter p with gradient g at step t:
//
//	p   ← p · (1 − lr·wd)                      decoupled weight decay
//	m   ← m + (g − m)(1 − β1)                  exp_avg (torch's lerp_)
//	v   ← β2·v + (1 − β2)·g²                   exp_avg_sq
//	p   ← p − lr/(1 − β1ᵗ) · m / (√v/√(1 − β2ᵗ) + ε)   eps outside the sqrt
//
// Precision: m, v and the update are float32. A parameter whose dtype is not
// float32 (bfloat16 on CUDA) gets a float32 master copy that the update is
// applied to; the parameter is then overwritten by the master rounded to its
// dtype, so small updates are not lost to bf16 rounding. On CPU parameters are
// float32 and are updated directly.
//
// Groups: DefaultGroups applies weight decay only to tensors with ≥ 2 dims
// (matrices and embeddings), never to norms and biases, as nanoGPT does.
//
// Memory: the optimizer owns its state tensors; Close frees them. Step
// allocates temporaries per parameter in a child scope, so its peak extra
// memory is a few copies of the largest parameter.
package optim

import (
	"fmt"
	"math"

	"github.com/evolm/evolm/model/torch"
)

// Param is a named trainable tensor (a leaf with requires_grad). The name is
// its HF checkpoint key; it keys the optimizer state.
type Param struct {
	Name   string
	Tensor *torch.Tensor
}

// Group is a set of parameters sharing a weight decay.
type Group struct {
	Name        string
	Params      []Param
	WeightDecay float64
}

// DefaultGroups splits params into "decay" (≥ 2 dims, weight decay wd) and
// "no_decay" (0 or 1 dims: norms, biases; no weight decay).
func DefaultGroups(params []Param, wd float64) ([]Group, error) {
	decay := Group{Name: "decay", WeightDecay: wd}
	none := Group{Name: "no_decay"}
	for _, p := range params {
		sh, err := torch.Shape(p.Tensor)
		if err != nil {
			return nil, fmt.Errorf("optim: param %s: %w", p.Name, err)
		}
		if len(sh) >= 2 {
			decay.Params = append(decay.Params, p)
		} else {
			none.Params = append(none.Params, p)
		}
	}
	return []Group{decay, none}, nil
}

// AdamWConfig holds the hyperparameters (torch's defaults in comments).
type AdamWConfig struct {
	LR    float64 // learning rate (1e-3)
	Beta1 float64 // first-moment decay (0.9)
	Beta2 float64 // second-moment decay (0.999)
	Eps   float64 // added to the bias-corrected √v, outside the sqrt (1e-8)
}

// DefaultAdamW is torch.optim.AdamW's defaults, lr apart.
func DefaultAdamW(lr float64) AdamWConfig {
	return AdamWConfig{LR: lr, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}
}

func (c AdamWConfig) validate() error {
	switch {
	case !(c.LR >= 0):
		return fmt.Errorf("optim: lr = %v, want >= 0", c.LR)
	case !(c.Beta1 >= 0 && c.Beta1 < 1):
		return fmt.Errorf("optim: beta1 = %v, want in [0, 1)", c.Beta1)
	case !(c.Beta2 >= 0 && c.Beta2 < 1):
		return fmt.Errorf("optim: beta2 = %v, want in [0, 1)", c.Beta2)
	case !(c.Eps >= 0):
		return fmt.Errorf("optim: eps = %v, want >= 0", c.Eps)
	}
	return nil
}

type slot struct {
	Param
	wd     float64
	expAvg *torch.Tensor // float32, p's shape and device
	expSq  *torch.Tensor // float32
	master *torch.Tensor // float32 copy when p is not float32; nil otherwise
}

// AdamW is the optimizer. Not safe for concurrent use.
type AdamW struct {
	cfg   AdamWConfig
	slots []*slot
	byKey map[string]*slot
	step  int64
}

// NewAdamW builds an optimizer over groups with zeroed state. Parameter
// names must be unique across groups.
func NewAdamW(groups []Group, cfg AdamWConfig) (*AdamW, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	o := &AdamW{cfg: cfg, byKey: map[string]*slot{}}
	s := torch.NewScope()
	defer s.Close()
	defer torch.SetGrad(false)()
	for _, g := range groups {
		if !(g.WeightDecay >= 0) {
			return nil, fmt.Errorf("optim: group %s: weight decay %v, want >= 0", g.Name, g.WeightDecay)
		}
		for _, p := range g.Params {
			if _, dup := o.byKey[p.Name]; dup {
				o.Close()
				return nil, fmt.Errorf("optim: param %s listed twice", p.Name)
			}
			sh, err := torch.Shape(p.Tensor)
			if err != nil {
				o.Close()
				return nil, fmt.Errorf("optim: param %s: %w", p.Name, err)
			}
			dev, err := torch.DeviceOf(p.Tensor)
			if err != nil {
				o.Close()
				return nil, fmt.Errorf("optim: param %s: %w", p.Name, err)
			}
			sl := &slot{Param: p, wd: g.WeightDecay}
			sl.expAvg = s.Keep(s.Zeros(sh, torch.Float32, dev))
			sl.expSq = s.Keep(s.Zeros(sh, torch.Float32, dev))
			if torch.DTypeOf(p.Tensor) != torch.Float32 {
				sl.master = s.Keep(s.Float32(s.Detach(p.Tensor)))
			}
			o.slots = append(o.slots, sl)
			o.byKey[p.Name] = sl
			if err := s.Err(); err != nil {
				o.Close()
				return nil, fmt.Errorf("optim: param %s: %w", p.Name, err)
			}
		}
	}
	return o, nil
}

// Close frees the optimizer state.
func (o *AdamW) Close() {
	for _, sl := range o.slots {
		torch.Drop(sl.expAvg, sl.expSq, sl.master)
		sl.expAvg, sl.expSq, sl.master = nil, nil, nil
	}
}

// StepCount is the number of optimizer steps taken.
func (o *AdamW) StepCount() int64 { return o.step }

// LR is the current learning rate.
func (o *AdamW) LR() float64 { return o.cfg.LR }

// SetLR changes the learning rate (for schedules).
func (o *AdamW) SetLR(lr float64) { o.cfg.LR = lr }

// StateBytes is the memory of the optimizer's own tensors: exp_avg,
// exp_avg_sq and the fp32 master copies, as allocated.
func (o *AdamW) StateBytes() (int64, error) {
	var n int64
	for _, sl := range o.slots {
		for _, t := range []*torch.Tensor{sl.expAvg, sl.expSq, sl.master} {
			if t == nil {
				continue
			}
			sh, err := torch.Shape(t)
			if err != nil {
				return 0, err
			}
			n += torch.Numel(sh) * int64(torch.DTypeOf(t).Size())
		}
	}
	return n, nil
}

// Params lists the parameters in optimizer order.
func (o *AdamW) Params() []Param {
	out := make([]Param, len(o.slots))
	for i, sl := range o.slots {
		out[i] = sl.Param
	}
	return out
}

// Step applies one AdamW update to every parameter that has a gradient
// (parameters without one are skipped, as torch does) and advances the step
// count. It runs without grad tracking.
func (o *AdamW) Step() error {
	defer torch.SetGrad(false)()
	t := o.step + 1
	lr := o.cfg.LR
	bc1 := 1 - math.Pow(o.cfg.Beta1, float64(t))
	bc2sqrt := math.Sqrt(1 - math.Pow(o.cfg.Beta2, float64(t)))
	stepSize := lr / bc1
	for _, sl := range o.slots {
		if err := o.update(sl, lr, bc2sqrt, stepSize); err != nil {
			return fmt.Errorf("optim: step %d: param %s: %w", t, sl.Name, err)
		}
	}
	o.step = t
	return nil
}

func (o *AdamW) update(sl *slot, lr, bc2sqrt, stepSize float64) error {
	s := torch.NewScope()
	defer s.Close()
	g := s.Grad(sl.Tensor)
	if err := s.Err(); err != nil {
		return err
	}
	if g == nil {
		return nil
	}
	g = s.Float32(g)
	p := sl.master
	if p == nil {
		p = sl.Tensor
	}
	// In place, as torch's AdamW: the only temporaries are g², the
	// denominator and the update, one at a time but for the last two, so
	// the step needs at most two copies of the largest tensor beyond its
	// state (the embedding's are the largest: keeping every intermediate
	// cost 13 copies).
	if sl.wd != 0 {
		s.MulScalar_(p, 1-lr*sl.wd)
	}
	s.Lerp_(sl.expAvg, g, 1-o.cfg.Beta1) // m ← m + (1−β1)(g − m)
	s.MulScalar_(sl.expSq, o.cfg.Beta2)
	c := s.Child()
	gg := c.Mul(g, g)
	c.MulScalar_(gg, 1-o.cfg.Beta2)
	c.Add_(sl.expSq, gg) // v ← β2·v + (1−β2)·g²
	c.Close()
	c = s.Child()
	denom := c.Sqrt(sl.expSq)
	c.DivScalar_(denom, bc2sqrt)
	c.AddScalar_(denom, o.cfg.Eps) // √v / √(1−β2ᵗ) + ε
	upd := c.Div(sl.expAvg, denom)
	c.MulScalar_(upd, -stepSize)
	c.Add_(p, upd) // p ← p − stepSize · m / denom
	c.Close()
	if sl.master != nil {
		s.Copy_(sl.Tensor, sl.master) // rounds to the parameter's dtype
	}
	return s.Err()
}

// ZeroGrad zeroes every parameter's gradient in place.
func (o *AdamW) ZeroGrad() error {
	for _, sl := range o.slots {
		if err := torch.ZeroGrad(sl.Tensor); err != nil {
			return fmt.Errorf("optim: zero grad %s: %w", sl.Name, err)
		}
	}
	return nil
}
