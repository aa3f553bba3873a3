package llama

import (
	"fmt"
	"math"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/torch"
)

// Linear is nn.Linear: y = x @ Weight.T + Bias. Weight (out, in); Bias (out)
// or nil. Adapter, when set (LoRA), adds its term to y.
type Linear struct {
	Weight, Bias *torch.Tensor
	Adapter      model.LinearAdapter
}

// Forward maps x (…, in) to (…, out).
func (l *Linear) Forward(s *torch.Scope, x *torch.Tensor) *torch.Tensor {
	y := s.Linear(x, l.Weight, l.Bias)
	if l.Adapter != nil {
		y = l.Adapter.Adapt(s, x, y)
	}
	return y
}

// RMSNorm is HF's LlamaRMSNorm: x / sqrt(mean(x²) + eps) in float32, cast back
// to x's dtype, times Weight.
type RMSNorm struct {
	Weight *torch.Tensor // (C)
	Eps    float64
}

// Forward normalizes x (…, C) over its last dimension.
func (n *RMSNorm) Forward(s *torch.Scope, x *torch.Tensor) *torch.Tensor {
	x32 := s.Float32(x)
	variance := s.MeanDim(s.Square(x32), []int64{-1}, true) // (…, 1)
	y := s.Mul(x32, s.Rsqrt(s.AddScalar(variance, n.Eps)))
	return s.Mul(n.Weight, s.ToDType(y, s.DType(x)))
}

// Embedding is nn.Embedding.
type Embedding struct {
	Weight *torch.Tensor // (V, C)
}

// Forward looks up ids (B, T) and returns (B, T, C).
func (e *Embedding) Forward(s *torch.Scope, ids *torch.Tensor) *torch.Tensor {
	return s.Embedding(e.Weight, ids)
}

// Attention is the self-attention block (LlamaAttention / Qwen2Attention /
// Qwen3Attention). QNorm and KNorm are nil except in Qwen3.
type Attention struct {
	QProj, KProj, VProj, OProj Linear
	QNorm, KNorm               *RMSNorm
	cfg                        *model.Config
	layer                      int
}

// MLP is the SwiGLU feed-forward block: down(silu(gate(x)) * up(x)).
type MLP struct {
	GateProj, UpProj, DownProj Linear
}

// Forward maps x (B, T, C) to (B, T, C).
func (m *MLP) Forward(s *torch.Scope, x *torch.Tensor) *torch.Tensor {
	return m.DownProj.Forward(s, s.Mul(s.Silu(m.GateProj.Forward(s, x)), m.UpProj.Forward(s, x)))
}

// DecoderLayer is one pre-norm transformer block.
type DecoderLayer struct {
	SelfAttn               Attention
	MLP                    MLP
	InputLayernorm         RMSNorm
	PostAttentionLayernorm RMSNorm
}

// Model is the decoder stack without the LM head (LlamaModel).
type Model struct {
	EmbedTokens Embedding
	Layers      []DecoderLayer
	Norm        RMSNorm
}

// ForCausalLM is the decoder plus the LM head; it implements model.CausalLM.
// When the config ties embeddings, LMHead.Weight is EmbedTokens.Weight.
type ForCausalLM struct {
	Model  Model
	LMHead Linear

	cfg     *model.Config
	dev     torch.Device
	dtype   torch.DType
	invFreq *torch.Tensor // (hs/2) float32 RoPE inverse frequencies, a buffer
	// checkpoint recomputes each decoder layer in backward instead of
	// keeping its activations (SetGradCheckpointing).
	checkpoint bool
}

var _ model.Adaptable = (*ForCausalLM)(nil)
var _ model.TokenLogitser = (*ForCausalLM)(nil)

// New allocates a model for cfg (already checked by model.NewConfig) with
// uninitialized parameters on dev in dtype. model.Load and model.Randomize
// fill them.
func New(cfg *model.Config, dev torch.Device, dtype torch.DType) (*ForCausalLM, error) {
	s := torch.NewScope()
	defer s.Close()
	param := func(shape ...int64) *torch.Tensor { return s.Keep(s.Empty(shape, dtype, dev)) }
	C, I, V := int64(cfg.HiddenSize), int64(cfg.IntermediateSize), int64(cfg.VocabSize)
	hs := int64(cfg.HeadDim)
	q, kv := int64(cfg.NumAttentionHeads)*hs, int64(cfg.NumKeyValueHeads)*hs
	linear := func(out, in int64, bias bool) Linear {
		l := Linear{Weight: param(out, in)}
		if bias {
			l.Bias = param(out)
		}
		return l
	}
	norm := func(n int64) RMSNorm { return RMSNorm{Weight: param(n), Eps: cfg.RMSNormEps} }

	m := &ForCausalLM{cfg: cfg, dev: dev, dtype: dtype}
	m.Model.EmbedTokens = Embedding{Weight: param(V, C)}
	for i := 0; i < cfg.NumHiddenLayers; i++ {
		l := DecoderLayer{
			SelfAttn: Attention{
				QProj: linear(q, C, cfg.QKVBias), KProj: linear(kv, C, cfg.QKVBias),
				VProj: linear(kv, C, cfg.QKVBias), OProj: linear(C, q, cfg.OBias),
				cfg: cfg, layer: i,
			},
			MLP:                    MLP{GateProj: linear(I, C, false), UpProj: linear(I, C, false), DownProj: linear(C, I, false)},
			InputLayernorm:         norm(C),
			PostAttentionLayernorm: norm(C),
		}
		if cfg.QKNorm {
			qn, kn := norm(hs), norm(hs)
			l.SelfAttn.QNorm, l.SelfAttn.KNorm = &qn, &kn
		}
		m.Model.Layers = append(m.Model.Layers, l)
	}
	m.Model.Norm = norm(C)
	if cfg.TieWordEmbeddings {
		m.LMHead.Weight = m.Model.EmbedTokens.Weight
	} else {
		m.LMHead = linear(V, C, false)
	}
	// inv_freq = 1 / theta^(2i/hs), computed in float32 as HF does.
	inv := make([]float32, hs/2)
	for i := range inv {
		e := float32(2*i) / float32(hs)
		inv[i] = 1 / float32(math.Pow(cfg.RopeTheta, float64(e)))
	}
	m.invFreq = s.Keep(s.To(s.FromFloat32(inv, hs/2), dev, torch.Float32))
	if err := s.Err(); err != nil {
		m.Close()
		return nil, fmt.Errorf("llama: allocate %s: %w", cfg.Architectures[0], err)
	}
	return m, nil
}

// SetGradCheckpointing implements model.GradCheckpointer: with grad on and no
// KV cache, Hidden keeps only each decoder layer's input and the backward
// recomputes the layer (torch.Scope.Checkpoint); the loss must then be
// backpropagated with torch.Backward, which runs the recomputation.
func (m *ForCausalLM) SetGradCheckpointing(on bool) { m.checkpoint = on }

// Config implements model.CausalLM.
func (m *ForCausalLM) Config() *model.Config { return m.cfg }

// Device implements model.CausalLM.
func (m *ForCausalLM) Device() torch.Device { return m.dev }

// DType implements model.CausalLM.
func (m *ForCausalLM) DType() torch.DType { return m.dtype }

// Parameters implements model.CausalLM: HF state-dict order and names.
func (m *ForCausalLM) Parameters() []model.Param {
	var ps []model.Param
	add := func(name string, t *torch.Tensor) {
		if t != nil {
			ps = append(ps, model.Param{Name: name, Tensor: t})
		}
	}
	lin := func(prefix string, l *Linear) {
		add(prefix+".weight", l.Weight)
		add(prefix+".bias", l.Bias)
	}
	add("model.embed_tokens.weight", m.Model.EmbedTokens.Weight)
	for i := range m.Model.Layers {
		l := &m.Model.Layers[i]
		p := fmt.Sprintf("model.layers.%d.", i)
		attn, mlp := l.projections(p)
		for _, pr := range attn {
			lin(pr.name, pr.l)
		}
		if l.SelfAttn.QNorm != nil {
			add(p+"self_attn.q_norm.weight", l.SelfAttn.QNorm.Weight)
			add(p+"self_attn.k_norm.weight", l.SelfAttn.KNorm.Weight)
		}
		for _, pr := range mlp {
			lin(pr.name, pr.l)
		}
		add(p+"input_layernorm.weight", l.InputLayernorm.Weight)
		add(p+"post_attention_layernorm.weight", l.PostAttentionLayernorm.Weight)
	}
	add("model.norm.weight", m.Model.Norm.Weight)
	if !m.cfg.TieWordEmbeddings {
		add("lm_head.weight", m.LMHead.Weight)
	}
	return ps
}

// Linears implements model.Adaptable: the attention and MLP projections of
// every layer, in state-dict order.
func (m *ForCausalLM) Linears() []model.AdaptableLinear {
	var ls []model.AdaptableLinear
	add := func(name string, l *Linear) {
		a := model.AdaptableLinear{Name: name, Weight: l.Weight, Bias: l.Bias, Adapter: &l.Adapter}
		if sh, err := torch.Shape(l.Weight); err == nil && len(sh) == 2 {
			a.Out, a.In = sh[0], sh[1]
		}
		ls = append(ls, a)
	}
	for i := range m.Model.Layers {
		attn, mlp := m.Model.Layers[i].projections(fmt.Sprintf("model.layers.%d.", i))
		for _, pr := range append(attn, mlp...) {
			add(pr.name, pr.l)
		}
	}
	return ls
}

// projection is a linear layer with its state-dict name (no .weight).
type projection struct {
	name string
	l    *Linear
}

// projections are the layer's attention and MLP projections, named under
// prefix, each group in state-dict order.
func (l *DecoderLayer) projections(prefix string) (attn, mlp []projection) {
	attn = []projection{
		{prefix + "self_attn.q_proj", &l.SelfAttn.QProj},
		{prefix + "self_attn.k_proj", &l.SelfAttn.KProj},
		{prefix + "self_attn.v_proj", &l.SelfAttn.VProj},
		{prefix + "self_attn.o_proj", &l.SelfAttn.OProj},
	}
	mlp = []projection{
		{prefix + "mlp.gate_proj", &l.MLP.GateProj},
		{prefix + "mlp.up_proj", &l.MLP.UpProj},
		{prefix + "mlp.down_proj", &l.MLP.DownProj},
	}
	return attn, mlp
}

// Close implements model.CausalLM.
func (m *ForCausalLM) Close() {
	for _, p := range m.Parameters() {
		torch.Drop(p.Tensor)
	}
	torch.Drop(m.invFreq)
	m.Model.Layers = nil
}
