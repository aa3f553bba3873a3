package learner

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/method/grpo"
	"github.com/evolm/evolm/model/modeltest"
	"github.com/evolm/evolm/model/torch"
)

type lossCase struct {
	B        int       `json:"B"`
	T        int       `json:"T"`
	LogPs    []float32 `json:"logps"`
	OldLogPs []float32 `json:"old_logps,omitempty"`
	RefLogPs []float32 `json:"ref_logps"`
	Adv      []float32 `json:"adv"`
	Mask     []float32 `json:"mask"`
	Beta     float64   `json:"beta"`
	Eps      float64   `json:"eps"`
	EpsHigh  float64   `json:"eps_high"`
	Norm     string    `json:"norm"`
	MaxLen   int       `json:"max_len"`
	// pack only: each sequence's prompt length and the row length
	PromptLens []int `json:"prompt_lens,omitempty"`
	PackLen    int   `json:"pack_length,omitempty"`
}

type lossRef struct {
	Loss    float64   `json:"loss"`
	KLSum   float64   `json:"kl_sum"`
	Clipped float64   `json:"clipped"`
	Tokens  float64   `json:"tokens"`
	Grad    []float64 `json:"grad"`
}

func makeCase(r *rand.Rand, b, t int, offPolicy bool, beta float64, norm string) lossCase {
	c := lossCase{B: b, T: t, Beta: beta, Eps: 0.2, EpsHigh: 0.28, Norm: norm, MaxLen: t + 3}
	for i := 0; i < b*t; i++ {
		lp := float32(-4 * r.Float64())
		c.LogPs = append(c.LogPs, lp)
		c.RefLogPs = append(c.RefLogPs, lp+float32(r.NormFloat64()*0.3))
		if offPolicy {
			// wide enough that some ratios leave [0.8, 1.28]
			c.OldLogPs = append(c.OldLogPs, lp+float32(r.NormFloat64()*0.4))
		}
	}
	for i := 0; i < b; i++ {
		c.Adv = append(c.Adv, float32(r.NormFloat64()))
		n := 1 + r.IntN(t) // each row has ≥1 real token, padded on the right
		for j := 0; j < t; j++ {
			c.Mask = append(c.Mask, map[bool]float32{true: 1, false: 0}[j < n])
		}
		if norm == string(grpo.NormPack) {
			c.PromptLens = append(c.PromptLens, 1+r.IntN(5))
		}
	}
	if norm == string(grpo.NormPack) {
		c.PackLen = 14 // rows of one to three sequences
	}
	return c
}

// packInputs returns c's pack weights (B,) and pack count.
func packInputs(c lossCase) ([]float32, float64) {
	comp := make([]int, c.B)
	for i := 0; i < c.B; i++ {
		for j := 0; j < c.T; j++ {
			comp[i] += int(c.Mask[i*c.T+j])
		}
	}
	packs := grpo.Packs(c.PromptLens, comp, c.PackLen)
	w := make([]float32, c.B)
	for _, p := range packs {
		for _, i := range p.Seqs {
			w[i] = 1 / float32(p.Tokens)
		}
	}
	return w, float64(len(packs))
}

// TestLossMatchesTRLFormulas compares loss, KL, clip count and d loss/d logπ
// with a torch implementation written from TRL's GRPO formulas.
func TestLossMatchesTRLFormulas(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var cases []lossCase
	for _, norm := range []string{"grpo", "dapo", "dr_grpo", "pack"} {
		for _, off := range []bool{false, true} {
			for _, beta := range []float64{0, 0.001, 0.5} {
				cases = append(cases, makeCase(r, 6, 7, off, beta, norm))
			}
		}
	}
	dir := t.TempDir()
	in := filepath.Join(dir, "batch.json")
	buf, err := json.Marshal(map[string]any{"cases": cases})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(in, buf, 0o644); err != nil {
		t.Fatal(err)
	}
	var refs []lossRef
	if err := json.Unmarshal(testutil.RunPython(t, "grpo_reference.py", in), &refs); err != nil {
		t.Fatal(err)
	}
	base := torch.Live()
	for i, c := range cases {
		t.Run(fmt.Sprintf("%s/beta=%g/off=%v", c.Norm, c.Beta, c.OldLogPs != nil), func(t *testing.T) {
			got, m, grad := runLoss(t, c)
			ref := refs[i]
			const tol = 1e-5
			if d := math.Abs(got - ref.Loss); d > tol {
				t.Errorf("loss = %.8f, ref %.8f (|diff| %.2e)", got, ref.Loss, d)
			}
			if d := math.Abs(m.KLSum - ref.KLSum); d > tol*m.Tokens {
				t.Errorf("KL sum = %.8f, ref %.8f", m.KLSum, ref.KLSum)
			}
			if m.ClippedTokens != ref.Clipped || m.Tokens != ref.Tokens {
				t.Errorf("clipped/tokens = %v/%v, ref %v/%v", m.ClippedTokens, m.Tokens, ref.Clipped, ref.Tokens)
			}
			maxd := 0.0
			for j := range grad {
				maxd = math.Max(maxd, math.Abs(float64(grad[j])-ref.Grad[j]))
			}
			t.Logf("max |grad diff| = %.2e", maxd)
			if maxd > tol {
				t.Errorf("d loss/d logπ differs from reference by %.2e > %g", maxd, tol)
			}
		})
	}
	modeltest.CheckLeaks(t, base)
	// The off-policy cases must actually exercise clipping, or the clip
	// comparison above proves nothing.
	total := 0.0
	for _, r := range refs {
		total += r.Clipped
	}
	if total == 0 {
		t.Error("no case clipped any token; widen the old-policy noise")
	}
}

func runLoss(t *testing.T, c lossCase) (float64, LossMetrics, []float32) {
	t.Helper()
	defer torch.SetGrad(true)()
	s := torch.NewScope()
	defer s.Close()
	lp := s.FromFloat32(c.LogPs, int64(c.B), int64(c.T))
	if err := torch.SetRequiresGrad(lp, true); err != nil {
		t.Fatal(err)
	}
	in := LossInput{
		LogProbs:    lp,
		RefLogProbs: s.FromFloat32(c.RefLogPs, int64(c.B), int64(c.T)),
		Advantages:  s.FromFloat32(c.Adv, int64(c.B)),
		Mask:        s.FromFloat32(c.Mask, int64(c.B), int64(c.T)),
	}
	if c.OldLogPs != nil {
		in.OldLogProbs = s.FromFloat32(c.OldLogPs, int64(c.B), int64(c.T))
	}
	if c.Norm == string(grpo.NormPack) {
		w, n := packInputs(c)
		in.PackWeights, in.TotalPacks = s.FromFloat32(w, int64(c.B)), n
	}
	loss, m, err := Loss(s, in, LossConfig{Beta: c.Beta, Epsilon: c.Eps, EpsilonHigh: c.EpsHigh, Norm: grpo.LossNorm(c.Norm), MaxCompletionLen: c.MaxLen})
	if err != nil {
		t.Fatal(err)
	}
	v := modeltest.BackwardItem(t, loss)
	return v, m, modeltest.Float32s(t, s.Grad(lp))
}

// TestLossAccumulationEqualsFullBatch checks that micro-batch losses with the
// full batch's totals add up to the full-batch loss, for every normalisation.
func TestLossAccumulationEqualsFullBatch(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, norm := range []string{"grpo", "dapo", "dr_grpo", "pack"} {
		c := makeCase(r, 6, 5, true, 0.001, norm)
		full, _, _ := runLoss(t, c)
		var totalTok float64
		for _, m := range c.Mask {
			totalTok += float64(m)
		}
		var w []float32
		var packs float64
		if norm == string(grpo.NormPack) {
			w, packs = packInputs(c)
		}
		sum := 0.0
		for _, rows := range [][2]int{{0, 2}, {2, 6}} {
			sub := sliceCase(c, rows[0], rows[1])
			var sw []float32
			if w != nil {
				sw = w[rows[0]:rows[1]]
			}
			sum += microLoss(t, sub, float64(c.B), totalTok, sw, packs)
		}
		if d := math.Abs(sum - full); d > 1e-6 {
			t.Errorf("%s: Σ micro-batch losses = %.8f, full batch %.8f", norm, sum, full)
		}
	}
}

func sliceCase(c lossCase, lo, hi int) lossCase {
	s := c
	s.B = hi - lo
	cut := func(x []float32, w int) []float32 { return append([]float32(nil), x[lo*w:hi*w]...) }
	s.LogPs, s.RefLogPs, s.OldLogPs, s.Mask = cut(c.LogPs, c.T), cut(c.RefLogPs, c.T), cut(c.OldLogPs, c.T), cut(c.Mask, c.T)
	s.Adv = cut(c.Adv, 1)
	if c.PromptLens != nil {
		s.PromptLens = append([]int(nil), c.PromptLens[lo:hi]...)
	}
	return s
}

func microLoss(t *testing.T, c lossCase, seqs, toks float64, packWeights []float32, packs float64) float64 {
	t.Helper()
	s := torch.NewScope()
	defer s.Close()
	in := LossInput{
		LogProbs:    s.FromFloat32(c.LogPs, int64(c.B), int64(c.T)),
		OldLogProbs: s.FromFloat32(c.OldLogPs, int64(c.B), int64(c.T)),
		RefLogProbs: s.FromFloat32(c.RefLogPs, int64(c.B), int64(c.T)),
		Advantages:  s.FromFloat32(c.Adv, int64(c.B)),
		Mask:        s.FromFloat32(c.Mask, int64(c.B), int64(c.T)),
		TotalSeqs:   seqs, TotalTokens: toks,
	}
	if packWeights != nil {
		in.PackWeights, in.TotalPacks = s.FromFloat32(packWeights, int64(c.B)), packs
	}
	loss, _, err := Loss(s, in, LossConfig{Beta: c.Beta, Epsilon: c.Eps, EpsilonHigh: c.EpsHigh, Norm: grpo.LossNorm(c.Norm), MaxCompletionLen: c.MaxLen})
	if err != nil {
		t.Fatal(err)
	}
	v, err := torch.Item(loss)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestTruncatedImportanceSampling checks the TIS weight against the formula
// computed here in float64: w_t = min(exp(old − sampler), cap) on the
// policy-gradient term where the sampler's log-prob is known, 1 elsewhere,
// and never on the KL term.
func TestTruncatedImportanceSampling(t *testing.T) {
	// One sequence of 3 tokens, on-policy (old = logπ detached, ratio 1, so
	// the PG term is −A per token), β = 0.5 and a reference.
	lp := []float32{-1.0, -2.0, -0.5}
	ref := []float32{-1.2, -1.5, -0.5}
	sampler := []float32{-1.1, -0.5, 0} // w = e^0.1, min(e^-1.5,·), unknown → 1
	known := []float32{1, 1, 0}
	const adv, beta, tisCap = 0.7, 0.5, 1.05
	s := torch.NewScope()
	defer s.Close()
	in := LossInput{
		LogProbs:        s.FromFloat32(lp, 1, 3),
		RefLogProbs:     s.FromFloat32(ref, 1, 3),
		Advantages:      s.FromFloat32([]float32{adv}, 1),
		Mask:            s.FromFloat32([]float32{1, 1, 1}, 1, 3),
		SamplerLogProbs: s.FromFloat32(sampler, 1, 3),
		SamplerMask:     s.FromFloat32(known, 1, 3),
	}
	loss, _, err := Loss(s, in, LossConfig{Beta: beta, Epsilon: 0.2, Norm: grpo.NormGRPO, TISCap: tisCap})
	if err != nil {
		t.Fatal(err)
	}
	got, err := torch.Item(loss)
	if err != nil {
		t.Fatal(err)
	}
	want := 0.0
	for i := range lp {
		w := 1.0
		if known[i] == 1 {
			w = math.Min(math.Exp(float64(lp[i])-float64(sampler[i])), tisCap)
		}
		d := float64(ref[i]) - float64(lp[i])
		want += -w*adv + beta*(math.Exp(d)-d-1)
	}
	want /= 3
	if math.Abs(got-want) > 1e-6 {
		t.Errorf("loss with TIS = %.8f, want %.8f", got, want)
	}
	// Off: the same input without TISCap is the plain loss.
	plain, _, err := Loss(s, in, LossConfig{Beta: beta, Epsilon: 0.2, Norm: grpo.NormGRPO})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := torch.Item(plain)
	wantPlain := 0.0
	for i := range lp {
		d := float64(ref[i]) - float64(lp[i])
		wantPlain += -adv + beta*(math.Exp(d)-d-1)
	}
	if wantPlain /= 3; math.Abs(p-wantPlain) > 1e-6 {
		t.Errorf("loss without TIS = %.8f, want %.8f", p, wantPlain)
	}
}
