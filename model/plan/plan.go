// Package plan estimates the device memory of an evolm run before any of it
// is spent (README.md, "Paper scale"): `evolm plan` prints the estimate and `evolm run`
// refuses a configuration whose estimate exceeds the device.
//
// The estimate is per device (one learner process). Bytes are counted from
// the model shapes and the config, not measured:
//
//	weights        P·b  (b = 2 bf16/fp16, 4 fp32); with LoRA also A·4 (fp32 adapters)
//	gradients      trainable·b (full FT) or A·4 (LoRA); ÷ world with ZeRO ≥ 2
//	optimizer      AdamW exp_avg + exp_avg_sq, 2·trainable·4;  ÷ world with ZeRO ≥ 1
//	master         fp32 copy of non-fp32 trainable parameters, trainable·4; ÷ world with ZeRO ≥ 1
//	reference      a frozen copy P·b when β ≠ 0 in full FT; none with LoRA (adapters off)
//	judge          in-process judge weights Pj·bj; none when served remotely
//	KV cache       rows·tokens·layers·2·kv_heads·head_dim·b of the generation batch
//	activations    per micro-batch, see Activations
//	logits chunk   the chunked selective log-softmax's live logits, see LogitsChunk
//	optimizer step AdamW's temporaries: a few copies of the largest trainable tensor
//	runtime        libtorch and the process itself (CPU), or the CUDA context
//
// where P counts every parameter (an untied lm_head included) and A the LoRA
// parameters, rank·(in+out) per targeted Linear. Generation and training do
// not overlap in a step, so the peak is
//
//	static + max(KV cache, activations + logits chunk, optimizer step) + runtime
//
// with static the sum of the first six lines. ZeRO stage 3 also divides the
// weights by world. The activation model is documented on Activations, with
// its calibration.
package plan

import (
	"fmt"
	"io"
	"strings"

	"github.com/evolm/evolm/model"
)

// Shape is what the estimate needs of a decoder-only model.
type Shape struct {
	Layers, Hidden, Intermediate   int
	Heads, KVHeads, HeadDim, Vocab int
	Tied                           bool // lm_head shares the embedding
	QKNorm, QKVBias, OBias         bool // Qwen3 q/k norms; Qwen2 q/k/v biases; attention_bias
}

// ShapeOf reads a model config.
func ShapeOf(c *model.Config) Shape {
	return Shape{
		Layers: c.NumHiddenLayers, Hidden: c.HiddenSize, Intermediate: c.IntermediateSize,
		Heads: c.NumAttentionHeads, KVHeads: c.NumKeyValueHeads, HeadDim: c.HeadDim, Vocab: c.VocabSize,
		Tied: c.TieWordEmbeddings, QKNorm: c.QKNorm, QKVBias: c.QKVBias, OBias: c.OBias,
	}
}

// Linear is one projection of a decoder layer, named as LoRA targets it.
type Linear struct {
	Name    string // q, k, v, o, gate, up, down
	In, Out int
}

// Linears lists one decoder layer's projections.
func (s Shape) Linears() []Linear {
	q, kv := s.Heads*s.HeadDim, s.KVHeads*s.HeadDim
	return []Linear{
		{"q", s.Hidden, q}, {"k", s.Hidden, kv}, {"v", s.Hidden, kv}, {"o", q, s.Hidden},
		{"gate", s.Hidden, s.Intermediate}, {"up", s.Hidden, s.Intermediate}, {"down", s.Intermediate, s.Hidden},
	}
}

// Params counts every parameter, as the checkpoint stores them plus an
// untied lm_head.
func (s Shape) Params() int64 {
	var layer int64
	for _, l := range s.Linears() {
		layer += int64(l.In) * int64(l.Out)
	}
	layer += 2 * int64(s.Hidden) // two RMSNorms
	if s.QKNorm {
		layer += 2 * int64(s.HeadDim)
	}
	if s.QKVBias {
		layer += int64(s.Heads*s.HeadDim + 2*s.KVHeads*s.HeadDim)
	}
	if s.OBias {
		layer += int64(s.Hidden)
	}
	emb := int64(s.Vocab) * int64(s.Hidden)
	n := emb + int64(s.Layers)*layer + int64(s.Hidden)
	if !s.Tied {
		n += emb
	}
	return n
}

// LoRA configures adapters; Rank 0 means full fine-tuning.
type LoRA struct {
	Rank    int
	Targets []string // Linear names; empty: all seven
}

// Params counts the adapter parameters of s: rank·(in+out) per targeted
// Linear of every layer.
func (l LoRA) Params(s Shape) int64 {
	if l.Rank <= 0 {
		return 0
	}
	want := map[string]bool{}
	for _, t := range l.Targets {
		want[strings.TrimSuffix(t, "_proj")] = true
	}
	var n int64
	for _, lin := range s.Linears() {
		if len(want) == 0 || want[lin.Name] {
			n += int64(l.Rank) * int64(lin.In+lin.Out)
		}
	}
	return n * int64(s.Layers)
}

// Input is one learner's configuration as the estimate sees it.
type Input struct {
	Policy     Shape
	ParamBytes int  // bytes per parameter element of the policy: 2 (bf16) or 4 (fp32)
	LoRA       LoRA // Rank 0: full fine-tuning
	Beta       float64
	// RubricGenerator is a second trained model on this device (the
	// two-model ablation); nil when the policy plays both roles.
	RubricGenerator *Shape
	// Judge is an in-process judge on this device; nil when it is served
	// remotely (or on another device).
	Judge      *Shape
	JudgeBytes int

	GenRows   int // sequences decoded together (the engine's max_batch)
	GenTokens int // prompt + new tokens of one generated sequence
	JudgeRows int // judge sequences decoded together (0: GenRows)
	JudgeTok  int // prompt + new tokens of one judge sequence

	MicroBatch        int // sequences per forward/backward
	SeqLen            int // tokens per training sequence (prompt + completion)
	GradCheckpointing bool
	// FullLogits models the engine with chunking off (generate.FullLogits,
	// the benchmark baseline): the (B, T, V) logits live through backward.
	FullLogits bool

	CUDA      bool // runtime overhead of a CUDA context instead of a CPU process
	WorldSize int  // data-parallel learners (default 1)
	ZeROStage int  // 0 (none) … 3
}

// Line is one item of a plan.
type Line struct {
	Name  string
	Bytes int64
	Note  string
}

// Plan is an estimate.
type Plan struct {
	Input    Input
	Static   []Line // held for the whole run
	Phases   []Line // alive one at a time: generation, training micro-batch, optimizer step
	Other    []Line // for information (activations with the other checkpointing choice)
	Runtime  Line
	Total    int64 // peak: Σ Static + max(Phases) + Runtime
	Capacity int64 // device bytes it was checked against (0: not checked)
	// MaxMicroBatch is the largest micro_batch whose total fits Capacity
	// (0 if none does, -1 when not checked).
	MaxMicroBatch int
}

// Fits reports whether the estimate fits the capacity (true when unchecked).
func (p Plan) Fits() bool { return p.Capacity <= 0 || p.Total <= p.Capacity }

// Activation constants, counted from the engine's saved tensors (eager
// attention), NOT yet calibrated: the one measurement so far (bench/memory,
// qwen3-0.6b widths cut to 2 layers, fp32 CPU, 2 × 1,024 tokens, chunked)
// peaked at 12.2–12.8 GB RSS against an estimate of 6.7 GB, so the estimate
// is currently low by about 2× on CPU. Each is a count of (B·T)-sized tensors
// of the named width that one decoder layer keeps for backward.
const (
	actHidden  = 6 // (B, T, C): residual stream, two norms' inputs and outputs
	actInter   = 4 // (B, T, I): gate, silu(gate), up, their product
	actQ       = 8 // (B, T, heads·hd): q, its norm, RoPE pieces, attention output, repeated k and v
	actKV      = 6 // (B, T, kv·hd): k, v, k's norm and RoPE pieces
	actScores  = 2 // (B, heads, T, T) float32: softmax probabilities, and one transient in backward
	logitsLive = 4 // (B, chunk, V) float32 copies alive in a logits chunk: logits, softmax, their gradients
	adamTemps  = 3 // float32 copies of the largest trainable tensor in one AdamW update
)

// RuntimeCPU and RuntimeCUDA are the process overheads: libtorch's CPU
// libraries, the Go runtime and the tokenizer (measured on an idle CPU
// process), or a CUDA context with cuBLAS workspaces (estimated).
const (
	RuntimeCPU  int64 = 600 << 20
	RuntimeCUDA int64 = 1 << 30
)

// Activations estimates the activation bytes of one micro-batch of B
// sequences of T tokens kept between forward and backward, excluding the
// logits (LogitsChunk). Without checkpointing every layer keeps
//
//	B·T·(6·C + 4·I + 8·heads·hd + 6·kv·hd)·b + 2·B·heads·T²·4
//
// (b the parameter element size; attention scores are float32). With
// checkpointing the layers keep only their inputs, B·T·C·b each, and one
// layer at a time is recomputed in backward with its full activations.
func Activations(s Shape, B, T, b int, checkpointing bool) int64 {
	bt := int64(B) * int64(T)
	perLayer := bt*int64(actHidden*s.Hidden+actInter*s.Intermediate+actQ*s.Heads*s.HeadDim+actKV*s.KVHeads*s.HeadDim)*int64(b) +
		actScores*int64(B)*int64(s.Heads)*int64(T)*int64(T)*4
	emb := bt * int64(s.Hidden) * int64(b) * 2 // embedding output and final norm
	if checkpointing {
		return int64(s.Layers)*bt*int64(s.Hidden)*int64(b) + perLayer + emb
	}
	return int64(s.Layers)*perLayer + emb
}

// LogitChunkElems mirrors generate.LogitChunkElems (kept equal by a test).
const LogitChunkElems = 1 << 26

// LogitsChunk is the float32 logits of one chunk of the selective
// log-softmax (B·chunk·V, chunk = min(T, 2²⁶/(B·V))), times the copies alive
// in its backward.
func LogitsChunk(s Shape, B, T int) int64 {
	chunk := max(1, min(int64(T), LogitChunkElems/max(1, int64(B)*int64(s.Vocab))))
	return logitsLive * int64(B) * chunk * int64(s.Vocab) * 4
}

// KVCache is the cache of rows sequences of tokens positions.
func KVCache(s Shape, rows, tokens, b int) int64 {
	return int64(rows) * int64(tokens) * int64(s.Layers) * 2 * int64(s.KVHeads) * int64(s.HeadDim) * int64(b)
}

// largestTensor is the largest trainable tensor's element count.
func largestTensor(s Shape, lora LoRA) int64 {
	if lora.Rank > 0 {
		var n int64
		for _, l := range s.Linears() {
			n = max(n, int64(lora.Rank)*int64(max(l.In, l.Out)))
		}
		return n
	}
	n := int64(s.Vocab) * int64(s.Hidden)
	for _, l := range s.Linears() {
		n = max(n, int64(l.In)*int64(l.Out))
	}
	return n
}

// Estimate computes the plan of in without a capacity.
func Estimate(in Input) Plan {
	if in.WorldSize <= 0 {
		in.WorldSize = 1
	}
	if in.ParamBytes <= 0 {
		in.ParamBytes = 4
	}
	if in.JudgeBytes <= 0 {
		in.JudgeBytes = in.ParamBytes
	}
	if in.JudgeRows <= 0 {
		in.JudgeRows = in.GenRows
	}
	p := Plan{Input: in, MaxMicroBatch: -1}
	w := int64(in.WorldSize)
	shard := func(n int64, stage int) int64 {
		if in.ZeROStage >= stage {
			return (n + w - 1) / w
		}
		return n
	}
	b := int64(in.ParamBytes)
	learner := func(role string, s Shape) {
		P := s.Params()
		A := in.LoRA.Params(s)
		if A > 0 {
			p.Static = append(p.Static,
				Line{role + " weights", shard(P*b, 3), fmt.Sprintf("%.2fB frozen base parameters × %d B", float64(P)/1e9, b)},
				Line{role + " LoRA adapters", A * 4, fmt.Sprintf("%.1fM fp32 parameters, rank %d", float64(A)/1e6, in.LoRA.Rank)},
				Line{role + " gradients", shard(A*4, 2), "adapters only"},
				Line{role + " optimizer state", shard(2*A*4, 1), "AdamW exp_avg + exp_avg_sq, fp32, adapters only"},
				Line{role + " master weights", 0, "adapters are fp32"},
				Line{role + " reference model", 0, "the base with adapters off"},
			)
			return
		}
		master, mnote := int64(0), "parameters are fp32"
		if b != 4 {
			master, mnote = shard(P*4, 1), "fp32 copy of the bf16 parameters"
		}
		ref, rnote := int64(0), "β = 0: none"
		if in.Beta != 0 {
			ref, rnote = P*b, "frozen copy for the KL term"
		}
		p.Static = append(p.Static,
			Line{role + " weights", shard(P*b, 3), fmt.Sprintf("%.2fB parameters × %d B", float64(P)/1e9, b)},
			Line{role + " gradients", shard(P*b, 2), "full fine-tuning"},
			Line{role + " optimizer state", shard(2*P*4, 1), "AdamW exp_avg + exp_avg_sq, fp32"},
			Line{role + " master weights", master, mnote},
			Line{role + " reference model", ref, rnote},
		)
	}
	learner("policy", in.Policy)
	if in.RubricGenerator != nil {
		learner("rubric generator", *in.RubricGenerator)
	}
	jb := int64(in.JudgeBytes)
	if in.Judge != nil {
		p.Static = append(p.Static, Line{"judge", in.Judge.Params() * jb, fmt.Sprintf("%.2fB parameters × %d B, in process", float64(in.Judge.Params())/1e9, jb)})
	} else {
		p.Static = append(p.Static, Line{"judge", 0, "served remotely"})
	}

	kv := KVCache(in.Policy, in.GenRows, in.GenTokens, in.ParamBytes)
	kvNote := fmt.Sprintf("%d rows × %d tokens", in.GenRows, in.GenTokens)
	if in.Judge != nil {
		kv = max(kv, KVCache(*in.Judge, in.JudgeRows, in.JudgeTok, in.JudgeBytes))
		kvNote += fmt.Sprintf("; judge %d rows × %d tokens (the larger)", in.JudgeRows, in.JudgeTok)
	}
	act := Activations(in.Policy, in.MicroBatch, in.SeqLen, in.ParamBytes, in.GradCheckpointing)
	other := Activations(in.Policy, in.MicroBatch, in.SeqLen, in.ParamBytes, !in.GradCheckpointing)
	logits := LogitsChunk(in.Policy, in.MicroBatch, in.SeqLen)
	lnote := "chunked selective log-softmax, with backward"
	if in.FullLogits {
		logits = logitsLive * int64(in.MicroBatch) * int64(in.SeqLen) * int64(in.Policy.Vocab) * 4
		lnote = "unchunked (B, T, V) logits, with backward"
	}
	ck := map[bool]string{true: "with checkpointing", false: "without checkpointing"}
	step := adamTemps * largestTensor(in.Policy, in.LoRA) * 4
	p.Phases = []Line{
		{"KV cache (generation)", kv, kvNote},
		{"activations per micro-batch", act, fmt.Sprintf("%d × %d tokens, %s", in.MicroBatch, in.SeqLen, ck[in.GradCheckpointing])},
		{"logits chunk", logits, lnote},
		{"optimizer step", step, "AdamW temporaries of the largest tensor"},
	}
	p.Other = []Line{{"activations " + ck[!in.GradCheckpointing], other, "for comparison"}}
	p.Runtime = Line{"runtime", RuntimeCPU, "libtorch CPU libraries and the process"}
	if in.CUDA {
		p.Runtime = Line{"runtime", RuntimeCUDA, "CUDA context and workspaces"}
	}
	var static int64
	for _, l := range p.Static {
		static += l.Bytes
	}
	p.Total = static + max(kv, act+logits, step) + p.Runtime.Bytes
	return p
}

// Check sets the plan's capacity and finds the largest micro-batch that
// fits it.
func (p Plan) Check(capacity int64) Plan {
	p.Capacity = capacity
	p.MaxMicroBatch = 0
	for mb := 1; mb <= 4096; mb *= 2 {
		in := p.Input
		in.MicroBatch = mb
		if Estimate(in).Total > capacity {
			break
		}
		p.MaxMicroBatch = mb
	}
	if p.MaxMicroBatch > 0 {
		// Refine between the last power of two that fits and the next.
		for mb := p.MaxMicroBatch + 1; mb < 2*p.MaxMicroBatch; mb++ {
			in := p.Input
			in.MicroBatch = mb
			if Estimate(in).Total > capacity {
				break
			}
			p.MaxMicroBatch = mb
		}
	}
	return p
}

// GiB formats bytes in GiB.
func GiB(n int64) string { return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30)) }

// Fprint writes the plan as a table.
func (p Plan) Fprint(w io.Writer) {
	in := p.Input
	mode := "full fine-tuning"
	if in.LoRA.Rank > 0 {
		mode = fmt.Sprintf("LoRA rank %d", in.LoRA.Rank)
	}
	dt := map[int]string{2: "bf16", 4: "fp32"}[in.ParamBytes]
	fmt.Fprintf(w, "memory plan per device (estimate): %s, %s, world %d, ZeRO %d\n", mode, dt, in.WorldSize, in.ZeROStage)
	row := func(l Line) { fmt.Fprintf(w, "  %-34s %12s  %s\n", l.Name, GiB(l.Bytes), l.Note) }
	fmt.Fprintln(w, "held for the run:")
	for _, l := range p.Static {
		row(l)
	}
	fmt.Fprintln(w, "one at a time (the largest counts):")
	for _, l := range p.Phases {
		row(l)
	}
	for _, l := range p.Other {
		row(l)
	}
	row(p.Runtime)
	fmt.Fprintf(w, "  %-34s %12s\n", "total (peak)", GiB(p.Total))
	if p.Capacity > 0 {
		verdict := "fits"
		if !p.Fits() {
			verdict = "does NOT fit"
		}
		fmt.Fprintf(w, "device memory %s: %s; largest micro_batch that fits: %d\n", GiB(p.Capacity), verdict, p.MaxMicroBatch)
	}
}
