package llama

import (
	"fmt"
	"math"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/fused"
	"github.com/evolm/evolm/model/torch"
)

// rope holds cos and sin (B, 1, T, hs) in float32 for one forward pass.
type rope struct{ cos, sin *torch.Tensor }

// newRope computes HF's rotary embedding for positions (B, T).
func (m *ForCausalLM) newRope(s *torch.Scope, pos *torch.Tensor) rope {
	freqs := s.Mul(s.Unsqueeze(s.Float32(pos), -1), m.invFreq)                    // (B, T, hs/2)
	emb := s.Cat([]*torch.Tensor{freqs, freqs}, -1)                               // (B, T, hs)
	return rope{cos: s.Unsqueeze(s.Cos(emb), 1), sin: s.Unsqueeze(s.Sin(emb), 1)} // (B, 1, T, hs)
}

// apply rotates x (B, h, T, hs) in float32: x*cos + rotate_half(x)*sin.
func (r rope) apply(s *torch.Scope, x *torch.Tensor, hs int64) *torch.Tensor {
	x32 := s.Float32(x)
	x1 := s.Narrow(x32, -1, 0, hs/2)                 // (B, h, T, hs/2)
	x2 := s.Narrow(x32, -1, hs/2, hs/2)              // (B, h, T, hs/2)
	rot := s.Cat([]*torch.Tensor{s.Neg(x2), x1}, -1) // (B, h, T, hs)
	y := s.Add(s.Mul(x32, r.cos), s.Mul(rot, r.sin)) // (B, h, T, hs)
	return s.ToDType(y, s.DType(x))
}

// repeatKV expands (B, nkv, Tk, hs) to (B, nkv*groups, Tk, hs) for GQA.
func repeatKV(s *torch.Scope, x *torch.Tensor, groups int64) *torch.Tensor {
	if groups == 1 {
		return x
	}
	sh, err := torch.Shape(x)
	if err != nil {
		s.Fail(err)
		return nil
	}
	B, nkv, Tk, hs := sh[0], sh[1], sh[2], sh[3]
	x = s.Expand(s.Unsqueeze(x, 2), B, nkv, groups, Tk, hs) // (B, nkv, groups, Tk, hs)
	return s.Reshape(x, B, nkv*groups, Tk, hs)              // (B, nh, Tk, hs)
}

// mask says which keys each query may not attend, once per forward pass:
// blocked (B or 1, 1, T, Tk) is true there (nil where nothing reads it:
// eager attention on the CPU, see attnMask), and bias, for eager attention,
// is the same as a float32 additive mask: 0 where a key is visible and
// −MaxFloat32 where it is blocked. Adding bias to float32 scores gives
// exactly what masked_fill(blocked, −MaxFloat32) gives (a score plus
// −MaxFloat32 rounds to −MaxFloat32 for any score below 2^103), and the add
// is vectorized where libtorch 2.1's CPU masked_fill is a scalar loop: 9% of
// a `small` prefill (docs/engine.md, "The attention mask").
type mask struct {
	blocked, bias *torch.Tensor
	// lazy: eager attention on the CPU, whose bias fused.AttnBias builds
	// from pad (B, Tk) and branches (B, T) (either may be nil) only where a
	// path needs it stored (stored); the fused path writes it row by row.
	lazy          bool
	pad, branches *torch.Tensor
	B, T, past    int64
}

// stored returns mk with its bias built, for the paths that read it whole.
func (mk mask) stored(s *torch.Scope) mask {
	if mk.lazy && mk.bias == nil {
		mk.bias = fused.AttnBias(s, mk.B, mk.T, mk.past, mk.pad, mk.branches)
	}
	return mk
}

// Forward maps x (B, T, C) to (B, T, C).
func (a *Attention) Forward(s *torch.Scope, x *torch.Tensor, r rope, mk mask, cache *model.Cache) *torch.Tensor {
	sh, err := torch.Shape(x)
	if err != nil {
		s.Fail(err)
		return nil
	}
	B, T := sh[0], sh[1]
	nh, nkv, hs := int64(a.cfg.NumAttentionHeads), int64(a.cfg.NumKeyValueHeads), int64(a.cfg.HeadDim)

	q := s.View(a.QProj.Forward(s, x), B, T, nh, hs)  // (B, T, nh, hs)
	k := s.View(a.KProj.Forward(s, x), B, T, nkv, hs) // (B, T, nkv, hs)
	v := s.View(a.VProj.Forward(s, x), B, T, nkv, hs) // (B, T, nkv, hs)
	if a.QNorm != nil {
		q, k = a.QNorm.Forward(s, q), a.KNorm.Forward(s, k)
	}
	q = r.apply(s, s.Transpose(q, 1, 2), hs) // (B, nh, T, hs)
	k = r.apply(s, s.Transpose(k, 1, 2), hs) // (B, nkv, T, hs)
	v = s.Transpose(v, 1, 2)                 // (B, nkv, T, hs)
	if cache != nil {
		k, v = cache.Update(s, a.layer, k, v) // (B, nkv, Tk, hs)
	}
	k = repeatKV(s, k, int64(a.cfg.KVGroups)) // (B, nh, Tk, hs)
	v = repeatKV(s, v, int64(a.cfg.KVGroups)) // (B, nh, Tk, hs)

	var y *torch.Tensor
	if a.cfg.AttnImplementation == model.AttnSDPA {
		bias := s.MaskedFill(s.Zeros([]int64{1}, s.DType(q), devOf(s, q)), mk.blocked, minValue(s.DType(q))) // (B or 1, 1, T, Tk)
		y = s.ScaledDotProductAttention(q, k, v, bias, a.cfg.AttnScale)                                      // (B, nh, T, hs)
	} else {
		y = eagerAttention(s, q, k, v, mk.bias, a.cfg.AttnScale, T) // (B, nh, T, hs)
	}
	y = s.Reshape(s.Transpose(y, 1, 2), B, T, nh*hs) // (B, T, nh*hs)
	return a.OProj.Forward(s, y)                     // (B, T, C)
}

// AttnBlock is the query block of eager attention: a forward pass over
// more queries than this runs attention one block of AttnBlock queries at a
// time, each against the keys up to its last query only.
const AttnBlock = 128

// eagerAttention is HF's eager attention, softmax(q·kᵀ·scale + bias)·v, for
// q (B, nh, T, hs), k and v (B, nh, Tk, hs) and the additive mask bias
// (B or 1, 1, T, Tk), in which key j is blocked for query i whenever
// j > Tk − T + i (the mask is causal: see hidden). For T > AttnBlock it
// runs query blocks of AttnBlock: the keys after a block's last query are
// blocked for every query in it, their softmax weights are exactly 0, and
// leaving them out skips almost half the scores of a long prompt (their
// products' sums change only in rounding: the weights' sum order in MKL's
// GEMM follows the number of keys). The fused path (fused.cc) runs the
// same blocks and the same GEMMs, reading the KV cache's nkv heads in place
// where k and v arrive here repeated to nh (grouped_bmm), so the two stay
// bit for bit equal.
func eagerAttention(s *torch.Scope, q, k, v, bias *torch.Tensor, scale float64, T int64) *torch.Tensor {
	block := func(q, k, v, bias *torch.Tensor) *torch.Tensor {
		// Scaled and masked in place (autograd needs neither the matmul's
		// output nor the product's), so one (B, nh, n, keys) float32 tensor
		// and the softmax are alive, not four.
		att := s.Matmul(q, s.Transpose(k, 2, 3)) // (B, nh, n, keys)
		s.MulScalar_(att, scale)
		att = s.Float32(att)
		s.Add_(att, bias)                                              // = masked_fill_(blocked, −MaxFloat32), see mask
		att = s.ToDType(s.Softmax(att, -1, torch.Float32), s.DType(v)) // (B, nh, n, keys)
		return s.Matmul(att, v)                                        // (B, nh, n, hs)
	}
	if T <= AttnBlock {
		return block(q, k, v, bias)
	}
	sh, err := torch.Shape(k)
	if err != nil {
		s.Fail(err)
		return nil
	}
	past := sh[2] - T
	var ys []*torch.Tensor
	for q0 := int64(0); q0 < T; q0 += AttnBlock {
		n := min(AttnBlock, T-q0)
		keys := past + q0 + n
		ys = append(ys, block(s.Narrow(q, 2, q0, n), s.Narrow(k, 2, 0, keys), s.Narrow(v, 2, 0, keys),
			s.Narrow(s.Narrow(bias, 2, q0, n), 3, 0, keys)))
	}
	return s.Cat(ys, 2) // (B, nh, T, hs)
}

// minValue is the most negative finite value of a float dtype: an additive
// mask of it blocks a key without turning a fully blocked row into NaN.
func minValue(dt torch.DType) float64 {
	switch dt {
	case torch.BFloat16:
		return -3.3895313892515355e38
	case torch.Float16:
		return -65504
	}
	return -math.MaxFloat32
}

func devOf(s *torch.Scope, x *torch.Tensor) torch.Device {
	if x == nil { // an earlier op failed (s holds why)
		s.Fail(fmt.Errorf("torch device: input is nil"))
		return torch.CPU
	}
	d, err := torch.DeviceOf(x)
	if err != nil {
		s.Fail(err)
	}
	return d
}

// Forward is one pre-norm block on x (B, T, C).
func (l *DecoderLayer) Forward(s *torch.Scope, x *torch.Tensor, r rope, mk mask, cache *model.Cache) *torch.Tensor {
	h := s.Add(x, l.SelfAttn.Forward(s, l.InputLayernorm.Forward(s, x), r, mk, cache))
	return s.Add(h, l.MLP.Forward(s, l.PostAttentionLayernorm.Forward(s, h)))
}

// Hidden implements model.CausalLM: final-norm hidden states (B, T, C).
func (m *ForCausalLM) Hidden(s *torch.Scope, b model.Batch) (*torch.Tensor, error) {
	if s.Err() != nil {
		return nil, s.Err()
	}
	h, err := m.hidden(s, b)
	if err != nil {
		err = fmt.Errorf("%s forward: %w", m.cfg.Architectures[0], err)
		s.Fail(err)
		return nil, err
	}
	return h, nil
}

func (m *ForCausalLM) hidden(parent *torch.Scope, b model.Batch) (*torch.Tensor, error) {
	sh, err := torch.Shape(b.IDs)
	if err != nil {
		return nil, fmt.Errorf("ids: %w", err)
	}
	if len(sh) != 2 || b.IDs.DType() != torch.Int64 {
		return nil, fmt.Errorf("ids: shape %v %s, want (B, T) int64", sh, torch.DTypeName(b.IDs.DType()))
	}
	B, T := sh[0], sh[1]
	past := int64(0)
	if b.Cache != nil {
		past = int64(b.Cache.Len())
		if int64(b.Cache.Batch()) != B {
			return nil, fmt.Errorf("cache has %d rows, ids %d", b.Cache.Batch(), B)
		}
	}
	Tk := past + T
	if err := checkShape("positions", b.Positions, B, T); err != nil {
		return nil, err
	}
	if err := checkShape("mask", b.Mask, B, Tk); err != nil {
		return nil, err
	}
	if err := checkShape("branches", b.Branches, B, T); err != nil {
		return nil, err
	}
	if b.Branches != nil && b.Positions == nil {
		return nil, fmt.Errorf("branches without positions")
	}

	s := parent.Child()
	defer s.Close()
	ids := m.onDevice(s, b.IDs, torch.Int64)
	pos := b.Positions
	if pos == nil {
		pos = s.Expand(s.Unsqueeze(s.Arange(past, Tk, torch.Int64, m.dev), 0), B, T) // (B, T)
	} else {
		pos = m.onDevice(s, pos, torch.Int64)
	}
	r := m.newRope(s, pos)

	mk := m.attnMask(s, b, B, T, past)
	checkpointed := m.checkpoint && b.Cache == nil && torch.GradEnabled()
	fusedPass := !checkpointed && m.fusable()
	if !fusedPass {
		mk = mk.stored(s)
	}

	x := m.Model.EmbedTokens.Forward(s, ids) // (B, T, C)
	if checkpointed {
		// The deferred backward recomputes the layers after this scope is
		// gone: keep what they read.
		s.Hold(r.cos)
		s.Hold(r.sin)
		s.Hold(mk.blocked)
		if mk.bias != nil {
			s.Hold(mk.bias)
		}
		x = s.Checkpoint(x, len(m.Model.Layers), func(ls *torch.Scope, i int, x *torch.Tensor) *torch.Tensor {
			return m.Model.Layers[i].Forward(ls, x, r, mk, nil) // (B, T, C)
		})
		x = m.Model.Norm.Forward(s, x) // (B, T, C)
	} else if fusedPass {
		x = m.fusedLayers(s, x, r, mk, b.Cache, past, T) // (B, T, C), the final norm included
	} else {
		for i := range m.Model.Layers {
			ls := s.Child()
			x = ls.MoveTo(s, m.Model.Layers[i].Forward(ls, x, r, mk, b.Cache)) // (B, T, C)
			ls.Close()
		}
		x = m.Model.Norm.Forward(s, x) // (B, T, C)
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	if b.Cache != nil {
		b.Cache.Advance(int(T))
	}
	return s.MoveTo(parent, x), nil
}

// attnMask builds a pass's mask. Eager attention on the CPU reads only the
// bias, which the shim writes from the padding mask and the branches: in
// one pass where a path reads it stored (fused.AttnBias, mask.stored), or
// row by row as the fused pass's query blocks need it (fused.Mask);
// elsewhere maskOps builds blocked and, for eager attention, the bias from
// it.
// TestAttnBiasEqualsOps checks that the two give the same bias.
func (m *ForCausalLM) attnMask(s *torch.Scope, b model.Batch, B, T, past int64) mask {
	var pad, br *torch.Tensor
	if b.Mask != nil {
		pad = m.onDevice(s, b.Mask, torch.Int64)
	}
	if b.Branches != nil {
		br = m.onDevice(s, b.Branches, torch.Int64)
	}
	eager := m.cfg.AttnImplementation != model.AttnSDPA
	if eager && m.dev == torch.CPU {
		return mask{lazy: true, pad: pad, branches: br, B: B, T: T, past: past}
	}
	return maskOps(s, m.dev, pad, br, B, T, past, eager)
}

// maskOps builds a pass's mask with tensor ops on dev: blocked, and with
// eager the bias from it. pad (B, past+T) and branches (B, T) are the
// batch's int64 mask and branches on dev, or nil.
func maskOps(s *torch.Scope, dev torch.Device, pad, branches *torch.Tensor, B, T, past int64, eager bool) mask {
	Tk := past + T
	// blocked[b, 0, i, j]: key j is in query i's future, or is padding. A
	// padding key is moved to the far future so one comparison does both.
	qpos := s.View(s.Arange(past, Tk, torch.Int64, dev), 1, 1, T, 1) // (1, 1, T, 1)
	kpos := s.View(s.Arange(0, Tk, torch.Int64, dev), 1, 1, 1, Tk)   // (1, 1, 1, Tk)
	if pad != nil {
		far := s.MulScalar(s.EqScalar(pad, 0), 1<<40) // (B, Tk)
		kpos = s.Add(kpos, s.View(far, B, 1, 1, Tk))  // (B, 1, 1, Tk)
	}
	mk := mask{blocked: s.Gt(kpos, qpos)} // (B or 1, 1, T, Tk)
	if branches != nil {
		// Also blocked: a key of a branch other than the trunk and the
		// query's own.
		qb := branches // (B, T)
		kb := qb
		if past > 0 {
			kb = s.Cat([]*torch.Tensor{s.Zeros([]int64{B, past}, torch.Int64, dev), qb}, 1) // (B, Tk): the cache is trunk
		}
		kb = s.View(kb, B, 1, 1, Tk)
		// The full-shape operand first: libtorch 2.1's logical ops size
		// their output like the first and warn when they resize it.
		other := s.LogicalAnd(s.LogicalNot(s.Eq(kb, s.View(qb, B, 1, T, 1))), s.NeScalar(kb, 0)) // (B, 1, T, Tk)
		mk.blocked = s.LogicalOr(other, mk.blocked)
	}
	if eager {
		mk.bias = s.MaskedFill(s.Zeros([]int64{1}, torch.Float32, dev), mk.blocked, -math.MaxFloat32) // (B or 1, 1, T, Tk)
	}
	return mk
}

// onDevice returns x on the model's device in dtype (x itself when it is
// already there).
func (m *ForCausalLM) onDevice(s *torch.Scope, x *torch.Tensor, dtype torch.DType) *torch.Tensor {
	dev, err := torch.DeviceOf(x)
	if err != nil {
		s.Fail(err)
		return nil
	}
	if dev == m.dev && x.DType() == dtype {
		return x
	}
	return s.To(x, m.dev, dtype)
}

func checkShape(what string, x *torch.Tensor, B, T int64) error {
	if x == nil {
		return nil
	}
	sh, err := torch.Shape(x)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if len(sh) != 2 || sh[0] != B || sh[1] != T {
		return fmt.Errorf("%s: shape %v, want [%d %d]", what, sh, B, T)
	}
	return nil
}

// Logits implements model.CausalLM: lm_head(h) in float32, (…, V).
func (m *ForCausalLM) Logits(s *torch.Scope, h *torch.Tensor) (*torch.Tensor, error) {
	var out *torch.Tensor
	if m.packedHead(h) {
		out = fused.PackedLinear(s, h, m.LMHead.Weight, nil)
	} else {
		out = s.Float32(m.LMHead.Forward(s, h))
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("%s lm_head: %w", m.cfg.Architectures[0], err)
	}
	return out, nil
}

// TokenLogits implements model.TokenLogitser: lm_head(h) at the vocabulary
// entries ids only, over their rows of the weight (and bias). With an
// adapter on lm_head it is the full Logits, gathered.
func (m *ForCausalLM) TokenLogits(s *torch.Scope, h, ids *torch.Tensor) (*torch.Tensor, error) {
	var out *torch.Tensor
	if m.LMHead.Adapter != nil {
		full, err := m.Logits(s, h)
		if err != nil {
			return nil, err
		}
		out = s.IndexSelect(full, -1, ids)
	} else {
		var b *torch.Tensor
		if m.LMHead.Bias != nil {
			b = s.IndexSelect(m.LMHead.Bias, 0, ids)
		}
		out = s.Float32(s.Linear(h, s.IndexSelect(m.LMHead.Weight, 0, ids), b))
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("%s lm_head: %w", m.cfg.Architectures[0], err)
	}
	return out, nil
}

// packedHead reports whether lm_head(h) runs over the packed weight. On CPU
// with grad off, for a float32 head without adapter or bias, it is oneDNN's
// linear over the head's weight packed once (fused.PackedLinear;
// EVOLM_PACKED=0 turns it off). For one row of a model narrower than 128
// at one intra-op thread, F.linear's gemv is as fast on Intel CPUs and 2×
// slower on an AMD one, so that case is packed on AMD CPUs only
// (oneRowPacked).
// F.linear (MKL) re-packs the whole (V, C) weight on every call,
// which for the few rows of a decode step costs more than the product:
// with Qwen's 151,936 tokens the packed form measured as fast (within 3%)
// or faster from 2 rows up on both hosts measured, up to 6× at 4 to 32
// rows, level at 512; at one row it measured 2× faster on the AMD host and
// within 10% either way on the Intel one (docs/engine.md, "The lm_head").
//
// Everything else, and grad on, is F.linear. The two forms differ in the
// last bits of a logit (within float32 rounding: TestHeadFormsMatchLinear),
// so Logits and WriteLogits both ask here: for the same h they return
// the same bits.
func (m *ForCausalLM) packedHead(h *torch.Tensor) bool {
	w := m.LMHead.Weight
	if !packedOn || torch.GradEnabled() || torch.IsCUDA(m.dev) || m.LMHead.Adapter != nil || m.LMHead.Bias != nil ||
		w.DType() != torch.Float32 || h.DType() != torch.Float32 || !fused.PackedAvailable() {
		return false
	}
	sh, err := torch.Shape(h)
	if err != nil || len(sh) == 0 {
		return false
	}
	rows, C := int64(1), sh[len(sh)-1]
	for _, d := range sh[:len(sh)-1] {
		rows *= d
	}
	return rows > 1 || C >= 128 || torch.NumThreads() > 1 || oneRowPacked()
}

// WriteLogits implements model.LogitsWriter for a float32 lm_head without
// an adapter or bias.
func (m *ForCausalLM) WriteLogits(s *torch.Scope, h, out *torch.Tensor) (bool, error) {
	w := m.LMHead.Weight
	if m.LMHead.Adapter != nil || m.LMHead.Bias != nil || w.DType() != torch.Float32 || h.DType() != torch.Float32 {
		return false, nil
	}
	if m.packedHead(h) {
		fused.PackedLinear(s, h, w, out)
	} else {
		s.LinearOut(out, h, w)
	}
	if err := s.Err(); err != nil {
		return false, fmt.Errorf("%s lm_head: %w", m.cfg.Architectures[0], err)
	}
	return true, nil
}

// Forward implements model.CausalLM: logits (B, T, V) in float32.
func (m *ForCausalLM) Forward(s *torch.Scope, b model.Batch) (*torch.Tensor, error) {
	h, err := m.Hidden(s, b)
	if err != nil {
		return nil, err
	}
	return m.Logits(s, h)
}
