package llama

import (
	"os"
	"sync"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/fused"
	"github.com/evolm/evolm/model/torch"
)

// fusedOn says whether forward passes with grad off run their decoder
// layers through model/fused, the same ops in one C++ call (the same bits:
// TestFusedEqualsPlain). EVOLM_FUSED=0 turns it off, to rule it out when
// debugging; SetFused does the same for a test.
var fusedOn = os.Getenv("EVOLM_FUSED") != "0"

// packedOn says whether the lm_head may run over its packed weight
// (packedHead); EVOLM_PACKED=0 turns that off, SetPacked does the same for
// a test.
var packedOn = os.Getenv("EVOLM_PACKED") != "0"

// SetPacked turns the packed lm_head on or off and returns the previous
// setting. Not safe to call while a forward pass runs.
func SetPacked(on bool) (prev bool) {
	prev, packedOn = packedOn, on
	return prev
}

// oneRowPacked reports whether lm_head(h) for one row of a head narrower
// than 128, at one intra-op thread, runs over the packed weight. The
// faster form depends on the CPU: there F.linear is MKL's gemv, which MKL
// runs with its own kernels on Intel CPUs, as fast as oneDNN's packed form,
// and with generic code on AMD's, 2× slower than the packed form on an AMD
// EPYC host (docs/engine.md, "The lm_head"). Other CPUs keep
// F.linear: none was measured. The answer is a property of the host, not
// of a timing, so every process on it, and Logits and WriteLogits, take
// the same form and give the same bits.
var oneRowPacked = sync.OnceValue(func() bool { return fused.CPUVendor() == "amd" })

// SetFused turns the fused inference path on or off and returns the
// previous setting. Not safe to call while a forward pass runs.
func SetFused(on bool) (prev bool) {
	prev, fusedOn = fusedOn, on
	return prev
}

// fusable reports whether this pass may take the fused path: inference
// (grad off), no adapter on any projection, one epsilon for every norm.
func (m *ForCausalLM) fusable() bool {
	if !fusedOn || torch.GradEnabled() {
		return false
	}
	eps := m.Model.Norm.Eps
	for i := range m.Model.Layers {
		l := &m.Model.Layers[i]
		a, f := &l.SelfAttn, &l.MLP
		for _, p := range [...]*Linear{&a.QProj, &a.KProj, &a.VProj, &a.OProj, &f.GateProj, &f.UpProj, &f.DownProj} {
			if p.Adapter != nil {
				return false
			}
		}
		if l.InputLayernorm.Eps != eps || l.PostAttentionLayernorm.Eps != eps ||
			(l.SelfAttn.QNorm != nil && (l.SelfAttn.QNorm.Eps != eps || l.SelfAttn.KNorm.Eps != eps)) {
			return false
		}
	}
	return true
}

// fusedLayers is the decoder layers and the final norm on x (B, T, C) in
// one call into model/fused: what hidden's loop and Norm.Forward compute.
func (m *ForCausalLM) fusedLayers(s *torch.Scope, x *torch.Tensor, r rope, mk mask, cache *model.Cache, past, T int64) *torch.Tensor {
	L := len(m.Model.Layers)
	w := make([]*torch.Tensor, 0, L*fused.PerLayer+1)
	for i := range m.Model.Layers {
		l := &m.Model.Layers[i]
		a := &l.SelfAttn
		var qn, kn *torch.Tensor
		if a.QNorm != nil {
			qn, kn = a.QNorm.Weight, a.KNorm.Weight
		}
		// In the order of fused's slot constants.
		w = append(w, l.InputLayernorm.Weight,
			a.QProj.Weight, a.QProj.Bias, a.KProj.Weight, a.KProj.Bias,
			a.VProj.Weight, a.VProj.Bias, a.OProj.Weight, a.OProj.Bias,
			qn, kn, l.PostAttentionLayernorm.Weight,
			l.MLP.GateProj.Weight, l.MLP.UpProj.Weight, l.MLP.DownProj.Weight)
	}
	w = append(w, m.Model.Norm.Weight)
	var k, v []*torch.Tensor
	if cache != nil {
		if past+T > int64(cache.MaxLen()) {
			s.Failf("kv cache full: %d cached + %d new positions > capacity %d", past, T, cache.MaxLen())
			return nil
		}
		k, v = cache.Buffers()
	}
	cfg := fused.Config{
		Layers: int64(L), Heads: int64(m.cfg.NumAttentionHeads), KVHeads: int64(m.cfg.NumKeyValueHeads),
		HeadDim: int64(m.cfg.HeadDim), NormEps: m.Model.Norm.Eps, AttnScale: m.cfg.AttnScale,
		SDPA: m.cfg.AttnImplementation == model.AttnSDPA, AttnBlock: AttnBlock,
	}
	return fused.Forward(s, cfg, w, x, r.cos, r.sin, fused.Mask{Bias: mk.bias, Blocked: mk.blocked, Pad: mk.pad, Branches: mk.branches}, k, v, past)
}
