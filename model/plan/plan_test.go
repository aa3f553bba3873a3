package plan

import (
	"fmt"
	"strings"
	"testing"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/generate"
	_ "github.com/evolm/evolm/model/llama"
	"github.com/evolm/evolm/model/torch"
)

// TestPresetParams: the plan counts each preset's parameters as the engine
// does, and the qwen3 shapes have their published sizes.
func TestPresetParams(t *testing.T) {
	published := map[string]int64{
		"qwen3-0.6b": 596_049_920, "qwen3-1.7b": 1_720_574_976, "qwen3-4b": 4_022_468_096, "qwen3-8b": 8_190_735_360,
	}
	for _, name := range model.PresetNames() {
		cfg, err := model.PresetConfig("qwen3", name, model.QwenVocabSize)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := ShapeOf(cfg).Params(), cfg.NumParams(); got != want {
			t.Errorf("%s: plan counts %d parameters, the engine %d", name, got, want)
		}
		if want, ok := published[name]; ok && cfg.NumParams() != want {
			t.Errorf("%s: %d parameters, published %d", name, cfg.NumParams(), want)
		}
	}
}

// TestLoRAParams: rank·(in+out) per targeted Linear and layer.
func TestLoRAParams(t *testing.T) {
	s := Shape{Layers: 2, Hidden: 8, Intermediate: 16, Heads: 2, KVHeads: 1, HeadDim: 4, Vocab: 10}
	// q 8→8, k 8→4, v 8→4, o 8→8, gate 8→16, up 8→16, down 16→8
	all := int64(2 * 3 * (16 + 12 + 12 + 16 + 24 + 24 + 24))
	if got := (LoRA{Rank: 3}).Params(s); got != all {
		t.Errorf("all targets: %d, want %d", got, all)
	}
	if got := (LoRA{Rank: 3, Targets: []string{"q_proj", "v"}}).Params(s); got != 2*3*(16+12) {
		t.Errorf("q, v: %d, want %d", got, 2*3*(16+12))
	}
	// Saved per layer: the inputs of the adapted Linears (8·6 + 16) in
	// float32, once over a bf16 base, twice more with dropout.
	if got := (LoRA{Rank: 3}).saved(s, 2, 5, 4); got != 0 {
		t.Errorf("fp32, no dropout: saved %d, want 0", got)
	}
	if got, want := (LoRA{Rank: 3, Dropout: 0.1}).saved(s, 2, 5, 2), int64(3*2*5*64*4); got != want {
		t.Errorf("bf16 with dropout: saved %d, want %d", got, want)
	}
}

// TestLogitChunkMatchesEngine: the plan's logits chunk uses the engine's.
func TestLogitChunkMatchesEngine(t *testing.T) {
	if LogitChunkElems != generate.LogitChunkElems {
		t.Fatalf("plan assumes %d logits per chunk, the engine uses %d", LogitChunkElems, generate.LogitChunkElems)
	}
}

// TestEstimate: LoRA drops the reference and most optimizer state,
// checkpointing lowers activations, bf16 adds master weights, and the
// largest micro-batch that fits is monotone in the capacity.
func TestEstimate(t *testing.T) {
	cfg, err := model.PresetConfig("qwen3", "qwen3-8b", model.QwenVocabSize)
	if err != nil {
		t.Fatal(err)
	}
	in := Input{Policy: ShapeOf(cfg), ParamBytes: 2, Beta: 0.001, GenRows: 64, GenTokens: 4096, MicroBatch: 4, SeqLen: 4096, CUDA: true}
	full := Estimate(in)
	in.LoRA = LoRA{Rank: 16}
	lora := Estimate(in)
	static := func(p Plan) (n int64) {
		for _, l := range p.Static {
			n += l.Bytes
		}
		return n
	}
	if static(lora) >= static(full)/4 {
		t.Errorf("LoRA holds %s, not well under full FT's %s", GiB(static(lora)), GiB(static(full)))
	}
	in.LoRA = LoRA{}
	in.GradCheckpointing = true
	ck := Estimate(in)
	if ck.Parts[0].Bytes >= full.Parts[0].Bytes/4 {
		t.Errorf("checkpointed activations %s, plain %s", GiB(ck.Parts[0].Bytes), GiB(full.Parts[0].Bytes))
	}
	line := func(p Plan, name string) int64 {
		for _, l := range p.Static {
			if l.Name == name {
				return l.Bytes
			}
		}
		t.Fatalf("no line %q", name)
		return 0
	}
	if got, want := line(full, "policy master weights"), cfg.NumParams()*4; got != want {
		t.Errorf("bf16 master weights %d, want %d", got, want)
	}
	if got := line(lora, "policy reference model"); got != 0 {
		t.Errorf("LoRA reference %d, want 0", got)
	}
	in.WorldSize, in.ZeROStage = 8, 1
	if z := Estimate(in); line(z, "policy optimizer state") != line(ck, "policy optimizer state")/8 {
		t.Errorf("ZeRO-1 over 8 does not divide the optimizer state by 8")
	}
	prev := 0
	for _, gib := range []int64{80, 141, 400} {
		p := Estimate(Input{Policy: ShapeOf(cfg), ParamBytes: 2, LoRA: LoRA{Rank: 16}, GenRows: 8, GenTokens: 1024, MicroBatch: 1, SeqLen: 2048, GradCheckpointing: true, CUDA: true}).Check(gib << 30)
		if p.MaxMicroBatch < prev {
			t.Errorf("%d GiB: largest micro-batch %d < %d at less memory", gib, p.MaxMicroBatch, prev)
		}
		prev = p.MaxMicroBatch
	}
}

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{"80GiB": 80 << 30, "141GB": 141e9, "80G": 80 << 30, "512MiB": 512 << 20, "1024": 1024} {
		got, err := ParseBytes(in)
		if err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	if _, err := ParseBytes("lots"); err == nil {
		t.Error("ParseBytes(lots): no error")
	}
}

// TestActivationCounts: the activation model on a hand-sized shape, term by
// term (package doc): 6·C + 4·I + 8·q + 4·kv elements per token and layer,
// the float32 softmax B·heads·T², the embedding and final norm 3·C per
// token; with checkpointing each layer keeps its input and one layer is
// recomputed.
func TestActivationCounts(t *testing.T) {
	s := Shape{Layers: 3, Hidden: 8, Intermediate: 16, Heads: 2, KVHeads: 1, HeadDim: 4, Vocab: 10}
	B, T, b := int64(2), int64(5), int64(4)
	layer := B*T*(6*8+4*16+8*8+4*4)*b + B*2*T*T*4
	emb := B * T * 8 * b * 3
	if got, want := Activations(s, 2, 5, 4, false), 3*layer+emb; got != want {
		t.Errorf("activations %d, want %d", got, want)
	}
	if got, want := Activations(s, 2, 5, 4, true), 3*B*T*8*b+layer+emb; got != want {
		t.Errorf("checkpointed activations %d, want %d", got, want)
	}
}

// TestTotal: the peak is the held lines, the largest phase and the
// runtime; the micro-batch phase is its activations plus the larger of the
// logits chunk and a layer's backward; full fine-tuning's logits chunk
// carries a temporary lm_head gradient, LoRA's does not.
func TestTotal(t *testing.T) {
	cfg, err := model.PresetConfig("qwen3", "qwen3-0.6b", model.QwenVocabSize)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range []Input{
		{Policy: ShapeOf(cfg), ParamBytes: 4, Beta: 0.001, MicroBatch: 2, SeqLen: 1024},
		{Policy: ShapeOf(cfg), ParamBytes: 4, Beta: 0.001, MicroBatch: 2, SeqLen: 1024, FullLogits: true},
		{Policy: ShapeOf(cfg), ParamBytes: 2, LoRA: LoRA{Rank: 16}, MicroBatch: 2, SeqLen: 1024, GradCheckpointing: true, GenRows: 64, GenTokens: 4096, CUDA: true},
	} {
		p := Estimate(in)
		var static, phase int64
		for _, l := range p.Static {
			static += l.Bytes
		}
		for _, l := range p.Phases {
			phase = max(phase, l.Bytes)
		}
		if p.Total != static+phase+p.Runtime.Bytes {
			t.Errorf("%+v: total %d, want %d", in, p.Total, static+phase+p.Runtime.Bytes)
		}
		if got, want := p.Phases[1].Bytes, p.Parts[0].Bytes+max(p.Parts[1].Bytes, p.Parts[2].Bytes); got != want {
			t.Errorf("micro-batch %d, want %d", got, want)
		}
		head := int64(cfg.VocabSize) * int64(cfg.HiddenSize) * 4
		chunk := LogitsChunk(ShapeOf(cfg), in.MicroBatch, in.SeqLen)
		if in.FullLogits {
			chunk = logitsLive * int64(in.MicroBatch) * int64(in.SeqLen) * int64(cfg.VocabSize) * 4
		}
		if in.LoRA.Rank == 0 {
			chunk += head
		}
		if p.Parts[1].Bytes != chunk {
			t.Errorf("%+v: logits chunk %d, want %d", in, p.Parts[1].Bytes, chunk)
		}
	}
}

// TestPackedHead: a CPU plan with fp32 weights holds oneDNN's packed copy
// of each lm_head that inference passes use (model/fused.PackedLinear): the
// policy's, the reference's with full fine-tuning and β ≠ 0, and an
// in-process judge's; a CUDA plan or bf16 weights hold none.
func TestPackedHead(t *testing.T) {
	cfg, err := model.PresetConfig("qwen3", "qwen3-0.6b", model.QwenVocabSize)
	if err != nil {
		t.Fatal(err)
	}
	s := ShapeOf(cfg)
	head := int64(s.Vocab) * int64(s.Hidden) * 4
	packed := func(in Input) (n int64) {
		for _, l := range Estimate(in).Static {
			if strings.HasSuffix(l.Name, "packed lm_head") {
				n += l.Bytes
			}
		}
		return n
	}
	base := Input{Policy: s, ParamBytes: 4, Beta: 0.001, GenRows: 2, GenTokens: 1024, MicroBatch: 2, SeqLen: 1024}
	lora := base
	lora.LoRA = LoRA{Rank: 16}
	judged := lora
	judged.Judge, judged.JudgeBytes = &s, 4
	cuda := base
	cuda.CUDA = true
	bf16 := base
	bf16.ParamBytes = 2
	for _, c := range []struct {
		name string
		in   Input
		want int64
	}{
		{"full FT, β ≠ 0", base, 2 * head},
		{"LoRA", lora, head},
		{"LoRA + fp32 judge", judged, 2 * head},
		{"CUDA", cuda, 0},
		{"bf16", bf16, 0},
	} {
		if got := packed(c.in); got != c.want {
			t.Errorf("%s: packed lm_head %d bytes, want %d", c.name, got, c.want)
		}
	}
}

// TestCUDATerms: what a CUDA plan counts differently from the CPU's, term
// by term: SDPA keeps a (B, T, T) mask of the parameter dtype per layer
// where eager attention keeps the (B, heads, T, T) float32 softmax, the
// runtime is a CUDA context's, and no oneDNN lm_head copy is held. (The
// CUDA figures against a measured peak: scripts/gpu-check.sh.)
func TestCUDATerms(t *testing.T) {
	cfg, err := model.PresetConfig("qwen3", "qwen3-0.6b", model.QwenVocabSize)
	if err != nil {
		t.Fatal(err)
	}
	s := ShapeOf(cfg)
	const B, T = 2, 1024
	in := Input{Policy: s, ParamBytes: 4, MicroBatch: B, SeqLen: T}
	cpu := Estimate(in)
	in.CUDA = true
	cuda := Estimate(in)
	perLayer := int64(B)*int64(s.Heads)*T*T*4 - int64(B)*T*T*4 // eager's softmax − SDPA's mask
	if got := cpu.Parts[0].Bytes - cuda.Parts[0].Bytes; got != int64(s.Layers)*perLayer {
		t.Errorf("activations: CPU − CUDA = %d, want %d layers × %d", got, s.Layers, perLayer)
	}
	if cpu.Runtime.Bytes != RuntimeCPU || cuda.Runtime.Bytes != RuntimeCUDA {
		t.Errorf("runtime: CPU %d, CUDA %d", cpu.Runtime.Bytes, cuda.Runtime.Bytes)
	}
	for _, l := range cuda.Static {
		if strings.Contains(l.Name, "packed lm_head") {
			t.Errorf("CUDA plan holds %q", l.Name)
		}
	}
}

// TestAvailableNamesAMissingDevice: the free memory of a CUDA device this
// process cannot use is an error naming it; the CPU's is MemAvailable.
func TestAvailableNamesAMissingDevice(t *testing.T) {
	devs, _ := torch.CUDADevices()
	name := fmt.Sprintf("cuda:%d", len(devs))
	if _, err := Available(name); err == nil || !strings.Contains(err.Error(), "device "+name+": ") {
		t.Errorf("Available(%s) with %d device(s): %v, want an error naming it", name, len(devs), err)
	}
	if n, err := Available("cpu"); err != nil || n <= 0 {
		t.Errorf("Available(cpu) = %d, %v", n, err)
	}
	if len(devs) > 0 {
		if n, err := Available("cuda:0"); err != nil || n <= 0 || n > devs[0].Memory {
			t.Errorf("Available(cuda:0) = %d, %v (device memory %d)", n, err, devs[0].Memory)
		}
	}
}
