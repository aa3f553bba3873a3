// Package lora is LoRA (Hu et al. 2021) for the engine's models, computed and
// stored exactly as HF PEFT 0.15 does, so that adapters move between evolm,
// PEFT and vLLM unchanged:
//
//   - A targeted linear layer computes y = base(x) + B(A(dropout(x)))·scaling,
//     with lora_A (r, in) and lora_B (out, r) in float32 whatever the base
//     dtype (x is cast to float32 for the adapter's branch and the sum is cast
//     back to the base output's dtype), scaling = alpha/r (alpha/√r with
//     RSLoRA) and dropout active only in training.
//   - A fresh adapter draws lora_A from kaiming_uniform_(a=√5), that is
//     U(−1/√in, 1/√in), and sets lora_B to zero, so it starts as the base
//     model.
//   - The base model stays frozen; switching the adapters off (Disabled)
//     gives the base model back, which is the KL reference of GRPO with no
//     second copy of the weights.
//   - Save writes adapter_config.json and adapter_model.safetensors with
//     PEFT's tensor names
//     (base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight …);
//     Load reads them, from evolm or from PEFT's save_pretrained.
//   - MergeAndUnload folds the adapters into the base weights
//     (W += scaling·B@A), as PEFT's merge_and_unload.
//
// Ownership: an Adapter owns its tensors and occupies the adapter slots of
// the model's linear layers until Close (or MergeAndUnload), which empties
// the slots and frees them. The model must outlive the Adapter.
package lora

import (
	"fmt"
	"math"
	"sync/atomic"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/torch"
)

// Layer is the adapter of one linear layer.
type Layer struct {
	// Module is the HF module name, e.g. model.layers.0.self_attn.q_proj.
	Module string
	// A is lora_A (r, in) and B is lora_B (out, r), float32 on the model's
	// device.
	A, B *torch.Tensor

	ad   *Adapter
	slot *model.LinearAdapter
	base model.AdaptableLinear
}

var _ model.LinearAdapter = (*Layer)(nil)

// Adapter is a set of LoRA layers attached to one model.
type Adapter struct {
	cfg      Config
	scaling  float64
	dev      torch.Device
	layers   []*Layer
	disabled atomic.Bool
	training atomic.Bool
}

// PEFTPrefix is the prefix PEFT's state-dict names put before the HF module
// name (PeftModel.base_model is the LoraModel, whose .model is the HF model).
const PEFTPrefix = "base_model.model."

// New attaches a fresh adapter to m's targeted linear layers: lora_A from
// kaiming_uniform_(a=√5), drawn on the CPU from libtorch's generator seeded
// with seed, and lora_B = 0. The adapter's tensors do not require grad until
// a trainer asks for it (model/train with Params).
func New(m model.CausalLM, cfg Config, seed int64) (*Adapter, error) {
	a, err := attach(m, cfg)
	if err != nil {
		return nil, err
	}
	torch.ManualSeed(seed)
	err = a.eachLayer(func(ls *torch.Scope, l *Layer) {
		bound := 1 / math.Sqrt(float64(l.base.In))
		u := ls.Rand([]int64{int64(cfg.Rank), l.base.In}, torch.Float32, torch.CPU) // U[0, 1)
		ls.Copy_(l.A, ls.MulScalar(ls.AddScalar(u, -0.5), 2*bound))                 // U[-bound, bound)
		ls.Zero_(l.B)
	})
	if err != nil {
		a.Close()
		return nil, fmt.Errorf("lora: init: %w", err)
	}
	return a, nil
}

// eachLayer runs f on every layer in order, without grad, each in a scope of
// its own that is closed after it; the first layer whose scope has an error
// stops it with that error, named by the layer's module.
func (a *Adapter) eachLayer(f func(ls *torch.Scope, l *Layer)) error {
	return torch.NoGrad(func() error {
		s := torch.NewScope()
		defer s.Close()
		for _, l := range a.layers {
			ls := s.Child()
			f(ls, l)
			err := ls.Err()
			ls.Close()
			if err != nil {
				return fmt.Errorf("%s: %w", l.Module, err)
			}
		}
		return nil
	})
}

// attach allocates uninitialized adapters on m's targets and puts them in
// the layers' slots.
func attach(m model.CausalLM, cfg Config) (*Adapter, error) {
	a, err := prepare(m, cfg)
	if err != nil {
		return nil, err
	}
	if err := a.occupy(); err != nil {
		a.free()
		return nil, err
	}
	return a, nil
}

// occupy puts a's layers in their slots, which must be empty.
func (a *Adapter) occupy() error {
	var taken []string
	for _, l := range a.layers {
		if *l.slot != nil && *l.slot != model.LinearAdapter(l) {
			taken = append(taken, l.Module)
		}
	}
	if len(taken) > 0 {
		return fmt.Errorf("lora: %d layers already carry an adapter (%s …)", len(taken), taken[0])
	}
	for _, l := range a.layers {
		*l.slot = l
	}
	return nil
}

// vacate empties the slots that hold a's layers.
func (a *Adapter) vacate() {
	for _, l := range a.layers {
		if *l.slot == model.LinearAdapter(l) {
			*l.slot = nil
		}
	}
}

// prepare allocates uninitialized adapters on m's targets, outside the
// layers' slots.
func prepare(m model.CausalLM, cfg Config) (*Adapter, error) {
	cfg, err := cfg.Normalize()
	if err != nil {
		return nil, err
	}
	am, ok := m.(model.Adaptable)
	if !ok {
		return nil, fmt.Errorf("lora: %s has no adaptable linear layers", m.Config().Architectures[0])
	}
	match := cfg.matcher()
	a := &Adapter{cfg: cfg, scaling: cfg.Scaling(), dev: m.Device()}
	for _, lin := range am.Linears() {
		if !match(lin.Name) {
			continue
		}
		if lin.In <= 0 || lin.Out <= 0 {
			return nil, fmt.Errorf("lora: %s: shape (%d, %d)", lin.Name, lin.Out, lin.In)
		}
		a.layers = append(a.layers, &Layer{Module: lin.Name, ad: a, slot: lin.Adapter, base: lin})
	}
	if len(a.layers) == 0 {
		return nil, fmt.Errorf("lora: no linear layer of %s matches targets %v%s", m.Config().Architectures[0], cfg.Targets, cfg.TargetPattern)
	}
	s := torch.NewScope()
	defer s.Close()
	for _, l := range a.layers {
		l.A = s.Keep(s.Empty([]int64{int64(cfg.Rank), l.base.In}, torch.Float32, a.dev))
		l.B = s.Keep(s.Empty([]int64{l.base.Out, int64(cfg.Rank)}, torch.Float32, a.dev))
	}
	if err := s.Err(); err != nil {
		a.free()
		return nil, fmt.Errorf("lora: allocate: %w", err)
	}
	return a, nil
}

// Config is the adapter's configuration (targets in HF module names).
func (a *Adapter) Config() Config { return a.cfg }

// Layers lists the adapted layers in the model's state-dict order.
func (a *Adapter) Layers() []*Layer { return a.layers }

// Parameters lists lora_A and lora_B of every layer with PEFT's state-dict
// names (PEFTPrefix + module + .lora_A.weight), in state-dict order.
func (a *Adapter) Parameters() []model.Param {
	ps := make([]model.Param, 0, 2*len(a.layers))
	for _, l := range a.layers {
		ps = append(ps,
			model.Param{Name: PEFTPrefix + l.Module + ".lora_A.weight", Tensor: l.A},
			model.Param{Name: PEFTPrefix + l.Module + ".lora_B.weight", Tensor: l.B})
	}
	return ps
}

// NumParams is the number of adapter weights: Σ r·(in + out).
func (a *Adapter) NumParams() int64 {
	var n int64
	for _, l := range a.layers {
		n += int64(a.cfg.Rank) * (l.base.In + l.base.Out)
	}
	return n
}

// SetEnabled switches the adapters on or off (off: the model computes the
// base model exactly) and returns the previous state. It applies to every
// forward pass of the model, so it must not change while another goroutine
// runs one.
func (a *Adapter) SetEnabled(on bool) (prev bool) { return !a.disabled.Swap(!on) }

// Disabled runs fn with the adapters off (PEFT's disable_adapter()) and
// restores the previous state.
func (a *Adapter) Disabled(fn func() error) error {
	prev := a.SetEnabled(false)
	defer a.SetEnabled(prev)
	return fn()
}

// SetTraining turns dropout on (training) or off (evaluation, the default)
// and returns the previous mode. Dropout masks come from libtorch's default
// generator: seed it (torch.ManualSeed) for reproducible steps.
func (a *Adapter) SetTraining(on bool) (prev bool) { return a.training.Swap(on) }

// Adapt implements model.LinearAdapter: y + B(A(dropout(x)))·scaling.
func (l *Layer) Adapt(s *torch.Scope, x, y *torch.Tensor) *torch.Tensor {
	a := l.ad
	if a.disabled.Load() || s.Err() != nil {
		return y
	}
	x32 := x
	if x.DType() != torch.Float32 {
		x32 = s.Float32(x)
	}
	if p := a.cfg.Dropout; p > 0 && a.training.Load() {
		x32 = dropout(s, x32, p, a.dev)
	}
	d := s.Linear(s.Linear(x32, l.A, nil), l.B, nil) // (…, r) then (…, out)
	out := s.Add(y, s.MulScalar(d, a.scaling))       // float32 when y is narrower
	if out != nil && out.DType() != y.DType() {
		out = s.ToDType(out, y.DType())
	}
	return out
}

// dropout is nn.Dropout(p) in training: x·mask/(1−p), mask ~ Bernoulli(1−p).
func dropout(s *torch.Scope, x *torch.Tensor, p float64, dev torch.Device) *torch.Tensor {
	shape, err := torch.Shape(x)
	if err != nil {
		s.Fail(err)
		return nil
	}
	keep := s.Float32(s.GtScalar(s.Rand(shape, torch.Float32, dev), p)) // 1 with probability 1−p
	return s.Mul(x, s.MulScalar(keep, 1/(1-p)))
}

// Close detaches the adapter from the model and frees its tensors.
func (a *Adapter) Close() {
	a.vacate()
	a.free()
}

func (a *Adapter) free() {
	for _, l := range a.layers {
		torch.Drop(l.A, l.B)
		l.A, l.B = nil, nil
	}
	a.layers = nil
}
