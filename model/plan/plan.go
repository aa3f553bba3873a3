// Package plan estimates the memory of an evolm run on one device before
// any of it is spent (docs/gpus-and-scale.md, "The memory plan"): `evolm plan` prints
// the estimate and `evolm run` refuses a configuration whose estimate exceeds
// the device (stages/runplan builds the Input from a config).
//
// # What is counted
//
// The estimate is per device (one learner process) and counted from the
// model shapes and the config, never measured. P counts every parameter (an
// untied lm_head included), A the LoRA parameters (rank·(in+out) per
// targeted Linear and layer), b is the parameters' element size (2 for
// bf16/fp16, 4 for fp32), B the micro-batch, T the training sequence, C, I,
// q = heads·head_dim and kv = kv_heads·head_dim the widths, V the
// vocabulary, L the layers.
//
// Held for the whole run (Plan.Static):
//
//	weights        P·b, with LoRA also A·4 (adapters are fp32)
//	gradients      P·b in full fine-tuning (allocated by the first backward
//	               and zeroed in place after), A·4 with LoRA; with ZeRO ≥ 2
//	               ÷ world plus what is in flight in full fine-tuning: the
//	               lm_head's V·C·b (its log-prob chunks reach it in several
//	               backward stages, so it is held until the micro-batch ends)
//	               and one decoder layer's (model/train reduces gradients to
//	               their owners during backward, dist.Zero2)
//	optimizer      AdamW exp_avg and exp_avg_sq in fp32: 2·trainable·4; ÷ world with ZeRO ≥ 1
//	master         fp32 copy of non-fp32 trainable parameters: trainable·4; ÷ world with ZeRO ≥ 1
//	reference      a frozen copy P·b for the KL term when β ≠ 0 in full
//	               fine-tuning; none with LoRA (the base with adapters off)
//	inferrer       a frozen copy of the initial policy P·b when it, not the
//	               trained policy, infers back-translated questions
//	judge          an in-process judge's weights on this device
//	packed lm_head on the CPU with fp32 weights, the oneDNN copy of each
//	               lm_head that inference passes keep (V·C·4; the policy's
//	               and, with full fine-tuning and β ≠ 0, the reference's)
//
// One at a time (Plan.Phases: generation, a training micro-batch and the
// optimizer step never overlap, so only the largest counts):
//
//	KV cache       rows·tokens·L·2·kv·b for the generation batch (max_batch
//	               rows of prompt + new tokens; the cache is allocated whole
//	               for the longest row), or the judge's, whichever is larger
//	micro-batch    activations + max(logits chunk, one layer's backward)
//	optimizer      AdamW's temporaries: two fp32 copies of the largest
//	               trainable tensor (the update runs in place; √v and m/√v
//	               are the temporaries), plus the fp32 gradient with bf16
//
// and the runtime: the libtorch CPU libraries, the Go runtime and the
// tokenizer (CPU, measured), or a CUDA context with cuBLAS workspaces (an
// estimate).
//
// Activations (Activations) are the tensors autograd saves for backward,
// counted op by op from model/llama's forward: per layer the two RMSNorms'
// inputs, normalized values and outputs (6·B·T·C), the SwiGLU's gate,
// silu(gate), up and their product (4·B·T·I), q before and after its norm
// and RoPE, the rotated half, the repeated k and v and the attention output
// (8·B·T·q), k before and after its norm and the rotated half (4·B·T·kv),
// all of b bytes, and the attention probabilities: eager attention keeps
// the float32 softmax (B·heads·T²·4); SDPA on CUDA keeps only its additive
// mask (B·T²·b). LoRA adapters compute in float32: over a bf16 base each
// keeps a float32 copy of its input, and with lora_dropout the mask and the
// dropped input too. With activation checkpointing a layer keeps only its input
// (B·T·C·b) and one layer's activations are alive again while it is
// recomputed in backward. A layer's backward needs two score-sized
// temporaries (the softmax's and the scores' gradients) or three B·T·I ones.
//
// The logits chunk is the chunked selective log-softmax (model/generate):
// its backward recomputes chunk = min(T, 2²⁶/(B·V)) positions at a time
// and keeps at most four float32 (B, chunk, V) tensors alive (the logits,
// their log-softmax, the gathered one-hot gradient and the logits'
// gradient: 4·B·chunk·V·4), plus a temporary
// lm_head gradient (V·C·4) when lm_head trains. With chunking off
// (Input.FullLogits, the benchmark's baseline) the chunk is the whole
// sequence and the logits stay alive through the layers' backward.
//
// # Calibration
//
// The counts above are structural; the CPU figures were checked against
// measured peak RSS (scripts/bench_memory.sh: one GRPO step, fp32, qwen3-0.6b
// widths with 4 and all 28 layers, 2 × 1,024 tokens) and agree within 15%
// (the README's table), with host allocations of 1 MiB and more mapped on
// their own as evolm sets them (torch.mmap_threshold). Under glibc's
// adaptive threshold the process keeps freed heap the plan does not count
// (LoRA: 36–67% above it). The GPU figures (bf16, SDPA, the CUDA context)
// are unproven: no GPU has measured them yet. scripts/gpu-check.sh compares
// the plan (less its runtime line) with torch.cuda.max_memory_allocated for
// a LoRA step of qwen3-0.6b shapes and fails beyond 15%; on the CPU,
// TestCUDATerms checks only that a CUDA plan counts what it should.
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
	Dropout float64  // lora_dropout: > 0 saves the dropped input and its mask
}

// targeted lists the Linears of s that l adapts.
func (l LoRA) targeted(s Shape) []Linear {
	if l.Rank <= 0 {
		return nil
	}
	want := map[string]bool{}
	for _, t := range l.Targets {
		want[strings.TrimSuffix(t, "_proj")] = true
	}
	var out []Linear
	for _, lin := range s.Linears() {
		if len(want) == 0 || want[lin.Name] {
			out = append(out, lin)
		}
	}
	return out
}

// saved is what the adapters of one layer add to its saved tensors: each
// adapter computes in float32, so over a narrower base it keeps a float32
// copy of its input, and with dropout also the mask and the dropped input
// (model/lora's Adapt); lora_A(x) and the rank-wide values are negligible.
func (l LoRA) saved(s Shape, B, T, b int) int64 {
	copies := int64(0)
	if b != 4 {
		copies++
	}
	if l.Dropout > 0 {
		copies += 2
	}
	var n int64
	for _, lin := range l.targeted(s) {
		n += int64(lin.In)
	}
	return copies * int64(B) * int64(T) * n * 4
}

// Params counts the adapter parameters of s: rank·(in+out) per targeted
// Linear of every layer.
func (l LoRA) Params(s Shape) int64 {
	var n int64
	for _, lin := range l.targeted(s) {
		n += int64(l.Rank) * int64(lin.In+lin.Out)
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
	// Inferrer is a frozen copy of the initial policy on this device that
	// infers back-translated questions (stages.run.backtranslate_source
	// frozen_initial); nil when the trained policy infers them.
	Inferrer *Shape
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
	Parts    []Line // what the training micro-batch is made of
	Other    []Line // for information (activations with the other checkpointing choice)
	Runtime  Line
	Total    int64 // peak: Σ Static + max(Phases) + Runtime
	Capacity int64 // device bytes it was checked against (0: not checked)
	// MaxMicroBatch is the largest micro_batch whose total fits Capacity
	// (0 if none does, -1 when not checked).
	MaxMicroBatch int
	// MaxGenRows is the largest generation batch (the engine's max_batch)
	// whose total fits Capacity, the micro-batch as given (0 if none does).
	MaxGenRows int
}

// Fits reports whether the estimate fits the capacity (true when unchecked).
func (p Plan) Fits() bool { return p.Capacity <= 0 || p.Total <= p.Capacity }

// Saved-tensor counts of one decoder layer (see the package doc), each a
// count of (B·T)-sized tensors of the named width.
const (
	actHidden = 6 // (B, T, C): two RMSNorms' inputs, normalized values, outputs
	actInter  = 4 // (B, T, I): gate, silu(gate), up, their product
	actQ      = 8 // (B, T, q): q, its norm, RoPE'd q and rotated half, repeated k and v, attention output
	actKV     = 4 // (B, T, kv): k, its norm, RoPE'd k's rotated half, v
	bwdScores = 2 // score-sized temporaries of a layer's backward (eager)
	bwdInter  = 3 // (B, T, I) temporaries of the MLP's backward
	// logitsLive bounds the float32 (B, chunk, V) tensors alive in a
	// chunk's backward: logits, log-softmax, the gathered gradient, the
	// logits' gradient.
	logitsLive = 4
	// adamTemps is the fp32 copies of the largest trainable tensor alive
	// in one AdamW update (√v, then m/√v).
	adamTemps = 2
)

// RuntimeCPU and RuntimeCUDA are the process overheads: libtorch's CPU
// libraries, the Go runtime, the tokenizer and the per-tensor bookkeeping
// (measured: VmRSS of the benchmark after the model is built, minus its
// weights), or a CUDA context with cuBLAS workspaces (estimated).
const (
	RuntimeCPU  int64 = 360 << 20
	RuntimeCUDA int64 = 1 << 30
)

// layerSaved is what one decoder layer keeps for backward, B sequences of
// T tokens, b-byte elements; sdpa for CUDA's scaled-dot-product attention.
func layerSaved(s Shape, B, T, b int, sdpa bool, lora LoRA) int64 {
	bt := int64(B) * int64(T)
	n := bt*int64(actHidden*s.Hidden+actInter*s.Intermediate+actQ*s.Heads*s.HeadDim+actKV*s.KVHeads*s.HeadDim)*int64(b) +
		lora.saved(s, B, T, b)
	if sdpa {
		return n + int64(B)*int64(T)*int64(T)*int64(b)
	}
	return n + int64(B)*int64(s.Heads)*int64(T)*int64(T)*4
}

// layerBackward is the temporaries of one layer's backward.
func layerBackward(s Shape, B, T, b int, sdpa bool) int64 {
	mlp := bwdInter * int64(B) * int64(T) * int64(s.Intermediate) * int64(b)
	if sdpa {
		return mlp
	}
	return max(mlp, bwdScores*int64(B)*int64(s.Heads)*int64(T)*int64(T)*4)
}

// Activations estimates the activation bytes of one micro-batch of B
// sequences of T tokens kept between forward and backward, excluding the
// logits (LogitsChunk): every layer's saved tensors, or with checkpointing
// every layer's input and one layer's saved tensors (recomputed in
// backward); plus the embedding output and the final norm's.
func Activations(s Shape, B, T, b int, checkpointing bool) int64 {
	return activations(s, B, T, b, checkpointing, false, LoRA{})
}

func activations(s Shape, B, T, b int, checkpointing, sdpa bool, lora LoRA) int64 {
	bt := int64(B) * int64(T)
	emb := bt * int64(s.Hidden) * int64(b) * 3 // embedding output, final norm's normalized value and output
	if checkpointing {
		return int64(s.Layers)*bt*int64(s.Hidden)*int64(b) + layerSaved(s, B, T, b, sdpa, lora) + emb
	}
	return int64(s.Layers)*layerSaved(s, B, T, b, sdpa, lora) + emb
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

// Check sets the plan's capacity and finds the largest micro-batch and the
// largest generation batch that fit it.
func (p Plan) Check(capacity int64) Plan {
	p.Capacity = capacity
	p.MaxMicroBatch = largest(func(n int) bool {
		in := p.Input
		in.MicroBatch = n
		return Estimate(in).Total <= capacity
	})
	p.MaxGenRows = largest(func(n int) bool {
		in := p.Input
		in.GenRows = n
		return Estimate(in).Total <= capacity
	})
	return p
}

// largest is the largest n ≤ 65536 for which fits(n) holds (0 if none),
// fits monotone.
func largest(fits func(int) bool) int {
	lo, hi := 0, 65536 // fits(lo), or lo = 0
	if fits(hi) {
		return hi
	}
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if fits(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
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
		if l.Name == "training micro-batch" {
			for _, part := range p.Parts {
				fmt.Fprintf(w, "    %-32s %12s  %s\n", part.Name, GiB(part.Bytes), part.Note)
			}
		}
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
		fmt.Fprintf(w, "device memory %s: %s; largest micro_batch that fits: %d; largest max_batch (generation rows) that fits: %d\n",
			GiB(p.Capacity), verdict, p.MaxMicroBatch, p.MaxGenRows)
	}
}
