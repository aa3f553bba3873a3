package llama_test

import (
	"math"
	"math/rand"
	"testing"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/generate"
	"github.com/evolm/evolm/model/modeltest"
	"github.com/evolm/evolm/model/torch"
)

// ckptGrads backpropagates a fixed random linear function of the model's
// log-softmax over a padded batch and returns the loss and every parameter's
// gradient. With score set, the loss goes through generate.Score (chunked
// selective log-softmax) instead of the full logits. It also returns the
// number of deferred backward stages the forward registered.
func ckptGrads(t *testing.T, m model.CausalLM, score bool) (float64, int, map[string][]float32) {
	t.Helper()
	modeltest.ZeroGrads(t, m)
	defer torch.SetGrad(true)()
	s := torch.NewScope()
	defer s.Close()
	r := rand.New(rand.NewSource(5))
	V := m.Config().VocabSize
	const B, T = 3, 11
	var loss *torch.Tensor
	if score {
		// 4 positions per chunk: the chunked path, recomputed in backward
		// (one chunk for all positions is kept by autograd instead).
		defer generate.SetLogitChunkElems(4 * B * int64(V))()
		rows := make([]generate.Continuation, B)
		for i := range rows {
			rows[i].Prompt = []int{r.Intn(V), r.Intn(V)}[:1+i%2]
			for j := 0; j < T-i; j++ {
				rows[i].Completion = append(rows[i].Completion, r.Intn(V))
			}
		}
		sc, err := generate.Score(s, m, rows, true)
		if err != nil {
			t.Fatal(err)
		}
		loss = s.Add(s.Sum(sc.LogProbs), s.MulScalar(s.Sum(sc.Entropy), 0.3))
	} else {
		ids := make([]int64, B*T)
		mask := make([]int64, B*T)
		w := make([]float32, B*T*V)
		for i := range ids {
			ids[i], mask[i] = int64(r.Intn(V)), 1
		}
		mask[0], mask[1] = 0, 0 // left padding in row 0
		for i := range w {
			w[i] = float32(r.NormFloat64())
		}
		lg, err := m.Forward(s, model.Batch{IDs: s.FromInt64(ids, B, T), Mask: s.FromInt64(mask, B, T)})
		if err != nil {
			t.Fatal(err)
		}
		loss = s.Sum(s.Mul(s.LogSoftmax(lg, -1, torch.Float32), s.FromFloat32(w, B, T, int64(V))))
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	stages := torch.Deferred()
	if err := torch.Backward(loss); err != nil {
		t.Fatal(err)
	}
	v, err := torch.Item(loss)
	if err != nil {
		t.Fatal(err)
	}
	grads := map[string][]float32{}
	for _, p := range m.Parameters() {
		g := s.Grad(p.Tensor)
		if g == nil {
			t.Fatalf("%s: no gradient", p.Name)
		}
		if grads[p.Name], err = torch.Float32s(g); err != nil {
			t.Fatal(err)
		}
	}
	return v, stages, grads
}

// TestGradCheckpointing: with activation checkpointing the loss and every
// parameter gradient equal those without it (float32, ≤ 1e-6), through the
// full logits and through chunked log-probs, and nothing leaks.
func TestGradCheckpointing(t *testing.T) {
	base := torch.Live()
	for _, arch := range []string{"Qwen3ForCausalLM", "LlamaForCausalLM"} {
		a, err := model.Lookup(arch)
		if err != nil {
			t.Fatal(err)
		}
		cfg := &model.Config{
			Architectures: []string{arch}, ModelType: a.ModelType, VocabSize: 97, HiddenSize: 32,
			IntermediateSize: 48, NumHiddenLayers: 3, NumAttentionHeads: 4, NumKeyValueHeads: 2,
			HeadDim: 8, HiddenAct: "silu", MaxPositionEmbeddings: 128, InitializerRange: 0.2,
			RMSNormEps: 1e-6, RopeTheta: 1e6, TieWordEmbeddings: arch == "Qwen3ForCausalLM",
		}
		m := modeltest.RandomTrainable(t, cfg, 3)
		gc := m.(model.GradCheckpointer)
		for _, score := range []bool{false, true} {
			gc.SetGradCheckpointing(false)
			wantLoss, _, want := ckptGrads(t, m, score)
			gc.SetGradCheckpointing(true)
			gotLoss, stages, got := ckptGrads(t, m, score)
			// One recomputation stage for the layers, one for the chunked
			// log-probs: the checkpointed path really ran.
			if wantStages := map[bool]int{false: 1, true: 2}[score]; stages != wantStages {
				t.Errorf("%s score=%v: %d deferred backward stages, want %d", arch, score, stages, wantStages)
			}
			if torch.Deferred() != 0 {
				t.Errorf("%d backward stages left over", torch.Deferred())
			}
			if math.Abs(wantLoss-gotLoss) > 1e-6*max(1, math.Abs(wantLoss)) {
				t.Errorf("%s score=%v: loss %v, checkpointed %v", arch, score, wantLoss, gotLoss)
			}
			for _, p := range m.Parameters() {
				d := 0.0
				for i := range want[p.Name] {
					d = max(d, math.Abs(float64(want[p.Name][i])-float64(got[p.Name][i])))
				}
				if d > 1e-6 {
					t.Errorf("%s score=%v %s: gradient differs by %.3g", arch, score, p.Name, d)
				}
			}
		}
		m.Close()
	}
	modeltest.CheckLeaks(t, base)
}
