package model

import "github.com/evolm/evolm/model/torch"

// LinearAdapter adds a learned term to one linear layer's output: LoRA
// (model/lora) implements it. An architecture's linear layer with an adapter
// computes Adapt(x, base(x)).
type LinearAdapter interface {
	// Adapt returns y plus the adapter's term for the layer input x (…, in),
	// where y (…, out) is the base layer's output. The result has y's dtype
	// and is owned by s.
	Adapt(s *torch.Scope, x, y *torch.Tensor) *torch.Tensor
}

// AdaptableLinear is one linear layer of a model that can carry an adapter.
type AdaptableLinear struct {
	// Name is the HF module name, e.g. model.layers.0.self_attn.q_proj.
	Name string
	// In and Out are the layer's input and output features.
	In, Out int64
	// Weight (Out, In) and Bias (Out, or nil) are the model's own tensors.
	Weight, Bias *torch.Tensor
	// Adapter is the layer's adapter slot: setting *Adapter attaches one,
	// setting it to nil detaches it.
	Adapter *LinearAdapter
}

// Adaptable is a CausalLM whose linear layers accept adapters.
type Adaptable interface {
	CausalLM
	// Linears lists the decoder's linear layers (not lm_head) in HF
	// state-dict order.
	Linears() []AdaptableLinear
}
