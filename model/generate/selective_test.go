package generate

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/modeltest"
	"github.com/evolm/evolm/model/torch"
)

// tinyLM is a random Qwen3 (or Llama with an untied head) with a small
// vocabulary, built in process.
func tinyLM(t *testing.T, arch string, tied bool) model.CausalLM {
	t.Helper()
	cfg := &model.Config{
		Architectures: []string{arch}, VocabSize: 300, HiddenSize: 32, IntermediateSize: 64,
		NumHiddenLayers: 2, NumAttentionHeads: 4, NumKeyValueHeads: 2, HeadDim: 8, HiddenAct: "silu",
		MaxPositionEmbeddings: 256, InitializerRange: 0.3, RMSNormEps: 1e-6, RopeTheta: 1e6,
		TieWordEmbeddings: tied,
	}
	a, err := model.Lookup(arch)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ModelType = a.ModelType
	return modeltest.RandomTrainable(t, cfg, 7)
}

func randRows(r *rand.Rand, n, vocab int) []Continuation {
	rows := make([]Continuation, n)
	for i := range rows {
		p, c := make([]int, 1+r.Intn(9)), make([]int, r.Intn(14))
		for j := range p {
			p[j] = r.Intn(vocab)
		}
		for j := range c {
			c[j] = r.Intn(vocab)
		}
		rows[i] = Continuation{Prompt: p, Completion: c}
	}
	rows[0].Completion = append(rows[0].Completion, 1, 2, 3) // T ≥ 3
	return rows
}

// fullScore is the reference: the whole (B, T, V) log-softmax, kept for
// autograd, as Score computed it before chunking.
func fullScore(s *torch.Scope, m model.CausalLM, rows []Continuation) (lp, ent, mask *torch.Tensor) {
	P, T := 0, 0
	for _, r := range rows {
		P, T = max(P, len(r.Prompt)), max(T, len(r.Completion))
	}
	B, L := int64(len(rows)), int64(P+T)
	var ids, am, pos, tg []int64
	var cm []float32
	for _, r := range rows {
		for j := 0; j < P-len(r.Prompt); j++ {
			ids, am, pos = append(ids, 0), append(am, 0), append(pos, 0)
		}
		n := int64(0)
		for _, id := range r.Prompt {
			ids, am, pos = append(ids, int64(id)), append(am, 1), append(pos, n)
			n++
		}
		for j := 0; j < T; j++ {
			if j < len(r.Completion) {
				id := int64(r.Completion[j])
				ids, am, pos, tg, cm = append(ids, id), append(am, 1), append(pos, n), append(tg, id), append(cm, 1)
				n++
			} else {
				ids, am, pos, tg, cm = append(ids, 0), append(am, 0), append(pos, n), append(tg, 0), append(cm, 0)
			}
		}
	}
	lg, err := m.Forward(s, model.Batch{IDs: s.FromInt64(ids, B, L), Positions: s.FromInt64(pos, B, L), Mask: s.FromInt64(am, B, L)})
	if err != nil {
		s.Fail(err)
		return nil, nil, nil
	}
	lsm := s.LogSoftmax(s.Narrow(lg, 1, int64(P-1), int64(T)), -1, torch.Float32) // (B, T, V)
	mask = s.FromFloat32(cm, B, int64(T))
	lp = s.Mul(s.Squeeze(s.Gather(lsm, 2, s.Unsqueeze(s.FromInt64(tg, B, int64(T)), 2)), 2), mask)
	ent = s.Mul(s.Neg(s.SumDim(s.Mul(s.Exp(lsm), lsm), []int64{2}, false)), mask)
	return lp, ent, mask
}

type scored struct {
	lp, ent  []float32
	grads    map[string][]float32
	deferred int // backward stages Score deferred (1: the chunks are recomputed in backward)
	T        int64
	recomp   int64 // positions whose logits backward recomputed
}

// scoreAndGrad scores rows (chunked Score, or the reference) and
// backpropagates Σ wl·lp + Σ we·ent with fixed random weights.
func scoreAndGrad(t *testing.T, m model.CausalLM, rows []Continuation, entropy, chunked bool) scored {
	t.Helper()
	modeltest.ZeroGrads(t, m)
	defer torch.SetGrad(true)()
	s := torch.NewScope()
	defer s.Close()
	var lp, ent *torch.Tensor
	deferred := torch.Deferred()
	if chunked {
		sc, err := Score(s, m, rows, entropy)
		if err != nil {
			t.Fatal(err)
		}
		lp, ent = sc.LogProbs, sc.Entropy
		deferred = torch.Deferred() - deferred
	} else {
		lp, ent, _ = fullScore(s, m, rows)
	}
	sh, err := torch.Shape(lp)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewSource(3))
	w := func() *torch.Tensor {
		v := make([]float32, sh[0]*sh[1])
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		return s.FromFloat32(v, sh...)
	}
	loss := s.Sum(s.Mul(lp, w()))
	if entropy {
		loss = s.Add(loss, s.Sum(s.Mul(ent, w())))
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	recomp := recomputedPositions.Load()
	if err := torch.Backward(loss); err != nil {
		t.Fatal(err)
	}
	out := scored{grads: map[string][]float32{}, deferred: deferred, T: sh[1], recomp: recomputedPositions.Load() - recomp}
	if out.lp, err = torch.Float32s(s.Detach(lp)); err != nil {
		t.Fatal(err)
	}
	if entropy {
		if out.ent, err = torch.Float32s(s.Detach(ent)); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range m.Parameters() {
		g := s.Grad(p.Tensor)
		if g == nil {
			t.Fatalf("%s: no gradient", p.Name)
		}
		if out.grads[p.Name], err = torch.Float32s(g); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func maxAbs(a []float32) float64 {
	m := 0.0
	for _, v := range a {
		m = max(m, math.Abs(float64(v)))
	}
	return m
}

// TestSelectiveMatchesFull: the chunked selective log-softmax (3 positions
// per chunk, all but the first recomputed in backward, or one chunk for all
// positions, kept by autograd) gives the full computation's log-probs,
// entropies and parameter gradients within 1e-6 in float32, tied and
// untied heads, with and without entropy, and frees every tensor.
func TestSelectiveMatchesFull(t *testing.T) {
	defer func(v int64) { chunkElems = v }(chunkElems)
	base := torch.Live()
	for _, tc := range []struct {
		arch string
		tied bool
	}{{"Qwen3ForCausalLM", true}, {"LlamaForCausalLM", false}} {
		m := tinyLM(t, tc.arch, tc.tied)
		rows := randRows(rand.New(rand.NewSource(1)), 4, m.Config().VocabSize)
		for _, c := range []struct {
			positions int64 // per chunk
			deferred  int
		}{{3, 1}, {1 << 20, 0}} {
			chunkElems = c.positions * int64(len(rows)) * int64(m.Config().VocabSize)
			for _, entropy := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/chunk=%d/entropy=%v", tc.arch, c.positions, entropy), func(t *testing.T) {
					want := scoreAndGrad(t, m, rows, entropy, false)
					got := scoreAndGrad(t, m, rows, entropy, true)
					if got.deferred != c.deferred {
						t.Errorf("Score deferred %d backward stages, want %d", got.deferred, c.deferred)
					}
					if want := max(0, got.T-c.positions); got.recomp != want {
						t.Errorf("backward recomputed the logits of %d positions of %d, want %d: all but the first chunk", got.recomp, got.T, want)
					}
					checkScored(t, m, want, got, entropy)
				})
			}
		}
		m.Close()
	}
	modeltest.CheckLeaks(t, base)
}

// checkScored compares Score's log-probs, entropies and gradients with the
// full computation's.
func checkScored(t *testing.T, m model.CausalLM, want, got scored, entropy bool) {
	t.Helper()
	if torch.Deferred() != 0 {
		t.Errorf("%d backward stages left over", torch.Deferred())
	}
	if d := modeltest.MaxAbsDiff(want.lp, got.lp); d > 1e-6 {
		t.Errorf("log-probs differ by %.3g", d)
	}
	if entropy {
		if d := modeltest.MaxAbsDiff(want.ent, got.ent); d > 1e-6 {
			t.Errorf("entropies differ by %.3g", d)
		}
	}
	for _, p := range m.Parameters() {
		d, scale := modeltest.MaxAbsDiff(want.grads[p.Name], got.grads[p.Name]), maxAbs(want.grads[p.Name])
		t.Logf("%-40s max |g| %.3e  max abs diff %.2e", p.Name, scale, d)
		if d > 1e-6*max(1, scale) {
			t.Errorf("%s: gradient differs by %.3g (max |g| %.3g)", p.Name, d, scale)
		}
	}
}

// TestSelectiveFreesEverything: after the loss's backward and the scope's
// close, nothing Selective allocated stays alive, chunked (its boundary
// leaves and deferred stage) or not. The hidden states are 1 MiB, so the
// caching allocator's count of live large blocks sees them
// (modeltest.CheckFreesBlocks);
// gotch's RequiresGrad_ once kept every boundary leaf's storage alive
// (model/torch), one hidden state per training micro-batch.
func TestSelectiveFreesEverything(t *testing.T) {
	defer func(v int64) { chunkElems = v }(chunkElems)
	m := tinyLM(t, "Qwen3ForCausalLM", true)
	B, T, C := int64(64), int64(128), int64(m.Config().HiddenSize) // h: B × T × C floats, 1 MiB
	V := int64(m.Config().VocabSize)
	for _, chunk := range []int64{T, 48} {
		chunkElems = chunk * B * V
		modeltest.CheckFreesBlocks(t, fmt.Sprintf("chunk %d", chunk), 3, func(s *torch.Scope) error {
			x := s.Full([]int64{B, T, C}, 0.1, torch.Float32, torch.CPU)
			if err := torch.SetRequiresGrad(x, true); err != nil {
				return err
			}
			lp, ent, err := Selective(s, m, s.MulScalar(x, 2), s.Zeros([]int64{B, T}, torch.Int64, torch.CPU), true)
			if err != nil {
				return err
			}
			return torch.Backward(s.Add(s.Sum(lp), s.Sum(ent)))
		})
	}
}
