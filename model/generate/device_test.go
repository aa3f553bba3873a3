package generate

import (
	"math/rand"
	"testing"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/modeltest"
	"github.com/evolm/evolm/model/torch"
)

// TestSelectiveBFloat16 runs the chunked selective log-softmax on the
// dtype a CUDA model has, bfloat16 parameters (here on the CPU): chunked
// (3 positions a chunk, the rest recomputed in backward, the lm_head's
// gradient accumulated chunk by chunk in bfloat16) against the whole
// (B, T, V) log-softmax. The log-probs are float32 from the same bfloat16
// logits; the gradients agree within bfloat16 rounding of their largest
// entry.
func TestSelectiveBFloat16(t *testing.T) {
	defer func(v int64) { chunkElems = v }(chunkElems)
	base := torch.Live()
	cfg := &model.Config{
		Architectures: []string{"Qwen3ForCausalLM"}, ModelType: "qwen3", VocabSize: 300, HiddenSize: 32, IntermediateSize: 64,
		NumHiddenLayers: 2, NumAttentionHeads: 4, NumKeyValueHeads: 2, HeadDim: 8, HiddenAct: "silu",
		MaxPositionEmbeddings: 256, InitializerRange: 0.3, RMSNormEps: 1e-6, RopeTheta: 1e6, TieWordEmbeddings: true,
	}
	if err := model.NewConfig(cfg); err != nil {
		t.Fatal(err)
	}
	m, err := model.Build(cfg, model.LoadOptions{DType: torch.BFloat16})
	if err != nil {
		t.Fatal(err)
	}
	if err := model.Randomize(m, 7); err != nil {
		t.Fatal(err)
	}
	if err := model.SetRequiresGrad(m, true); err != nil {
		t.Fatal(err)
	}
	rows := randRows(rand.New(rand.NewSource(1)), 4, cfg.VocabSize)
	chunkElems = 3 * int64(len(rows)) * int64(cfg.VocabSize)
	want := scoreAndGrad(t, m, rows, true, false)
	got := scoreAndGrad(t, m, rows, true, true)
	if got.deferred != 1 || got.recomp == 0 {
		t.Errorf("not chunked: %d deferred stages, %d positions recomputed", got.deferred, got.recomp)
	}
	if d := modeltest.MaxAbsDiff(want.lp, got.lp); d > 1e-5 {
		t.Errorf("log-probs differ by %.3g", d)
	}
	if d := modeltest.MaxAbsDiff(want.ent, got.ent); d > 1e-5 {
		t.Errorf("entropies differ by %.3g", d)
	}
	for _, p := range m.Parameters() {
		d, scale := modeltest.MaxAbsDiff(want.grads[p.Name], got.grads[p.Name]), maxAbs(want.grads[p.Name])
		t.Logf("%-40s max |g| %.3e  max abs diff %.2e", p.Name, scale, d)
		if d > 2e-2*max(scale, 1e-3) {
			t.Errorf("%s: gradient differs by %.3g (max |g| %.3g)", p.Name, d, scale)
		}
	}
	m.Close()
	modeltest.CheckLeaks(t, base)
}
