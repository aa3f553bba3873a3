package plan

import (
	"math"
	"testing"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/optim"
)

// tensorSizes lists the element counts of a model's parameter tensors, as
// the checkpoint stores them (embedding, per layer q, k, v, o, gate, up,
// down, two norms and the q/k norms, the final norm, an untied lm_head).
func tensorSizes(s Shape) []int64 {
	emb := int64(s.Vocab) * int64(s.Hidden)
	out := []int64{emb}
	for range s.Layers {
		for _, l := range s.Linears() {
			out = append(out, int64(l.In)*int64(l.Out))
		}
		out = append(out, int64(s.Hidden), int64(s.Hidden))
		if s.QKNorm {
			out = append(out, int64(s.HeadDim), int64(s.HeadDim))
		}
	}
	out = append(out, int64(s.Hidden))
	if !s.Tied {
		out = append(out, emb)
	}
	return out
}

// TestZeRO1HalvesOptimizerState builds the ZeRO-1 sharding the learner
// uses (optim.ShardByTensor, whole tensors) for the qwen3-0.6b shapes on 2
// ranks and counts the AdamW state each rank allocates (exp_avg and
// exp_avg_sq, fp32, for its tensors): each holds half of ZeRO-0's within
// 0.1%, and the plan's optimizer line says the same.
func TestZeRO1HalvesOptimizerState(t *testing.T) {
	cfg, err := model.PresetConfig("qwen3", "qwen3-0.6b", model.QwenVocabSize)
	if err != nil {
		t.Fatal(err)
	}
	s := ShapeOf(cfg)
	sizes := tensorSizes(s)
	var total int64
	for _, n := range sizes {
		total += n
	}
	if total != s.Params() {
		t.Fatalf("tensors hold %d parameters, the plan counts %d", total, s.Params())
	}
	zero0 := 2 * 4 * total // every rank holds m and v for every tensor
	loads := optim.ShardLoads(sizes, optim.ShardByTensor(sizes, 2), 2)
	for r, n := range loads {
		ratio := float64(2*4*n) / float64(zero0)
		t.Logf("rank %d: %.1f MiB of AdamW state at ZeRO-1, ZeRO-0 %.1f MiB: ratio %.4f", r, float64(2*4*n)/(1<<20), float64(zero0)/(1<<20), ratio)
		if math.Abs(ratio-0.5) > 0.001 {
			t.Errorf("rank %d holds %.4f of ZeRO-0's optimizer state, want 0.5", r, ratio)
		}
	}
	optLine := func(p Plan) int64 {
		for _, l := range p.Static {
			if l.Name == "policy optimizer state" {
				return l.Bytes
			}
		}
		t.Fatalf("no optimizer line in %+v", p.Static)
		return 0
	}
	in := Input{Policy: s, ParamBytes: 2, MicroBatch: 1, SeqLen: 1024, GenRows: 1, GenTokens: 1024}
	p0 := optLine(Estimate(in))
	in.WorldSize, in.ZeROStage = 2, 1
	p1 := optLine(Estimate(in))
	if p1 != (p0+1)/2 {
		t.Errorf("plan: optimizer state %d at ZeRO-1 on 2 ranks, %d at ZeRO-0", p1, p0)
	}
}
