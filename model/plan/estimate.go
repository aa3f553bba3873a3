package plan

import "fmt"

// Estimate computes the plan of in without a capacity.
func Estimate(in Input) Plan {
	in = in.withDefaults()
	p := Plan{Input: in, MaxMicroBatch: -1, Static: staticLines(in)}
	kv, kvNote := generationKV(in)
	train := trainingPhase(in)
	p.Phases = []Line{
		{"KV cache (generation)", kv, kvNote},
		{"training micro-batch", train.micro, "activations + the larger of the logits chunk and a layer's backward"},
		{"optimizer step", train.step, train.stepNote},
	}
	p.Parts, p.Other = train.parts, train.other
	p.Runtime = Line{"runtime", RuntimeCPU, "libtorch CPU libraries, Go runtime, tokenizer"}
	if in.CUDA {
		p.Runtime = Line{"runtime", RuntimeCUDA, "CUDA context and workspaces"}
	}
	var static int64
	for _, l := range p.Static {
		static += l.Bytes
	}
	p.Total = static + max(kv, train.micro, train.step) + p.Runtime.Bytes
	return p
}

// withDefaults fills the inputs left zero.
func (in Input) withDefaults() Input {
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
	return in
}

// shard is n bytes divided among the ranks from ZeRO stage on.
func (in Input) shard(n int64, stage int) int64 {
	if w := int64(in.WorldSize); in.ZeROStage >= stage {
		return (n + w - 1) / w
	}
	return n
}

// learnerLines are what a trained model holds for the run.
func (in Input) learnerLines(role string, s Shape) []Line {
	b := int64(in.ParamBytes)
	P := s.Params()
	if A := in.LoRA.Params(s); A > 0 {
		return []Line{
			{role + " weights", in.shard(P*b, 3), fmt.Sprintf("%.2fB frozen base parameters × %d B", float64(P)/1e9, b)},
			{role + " LoRA adapters", A * 4, fmt.Sprintf("%.1fM fp32 parameters, rank %d", float64(A)/1e6, in.LoRA.Rank)},
			{role + " gradients", in.shard(A*4, 2), "adapters only"},
			{role + " optimizer state", in.shard(2*A*4, 1), "AdamW exp_avg + exp_avg_sq, fp32, adapters only"},
			{role + " master weights", 0, "adapters are fp32"},
			{role + " reference model", 0, "the base with adapters off"},
		}
	}
	master, mnote := int64(0), "parameters are fp32"
	if b != 4 {
		master, mnote = in.shard(P*4, 1), "fp32 copy of the bf16 parameters"
	}
	grads, gnote := P*b, "full fine-tuning"
	if w := int64(in.WorldSize); in.ZeROStage >= 2 && w > 1 {
		flight := (int64(s.Vocab)*int64(s.Hidden) + (P-2*int64(s.Vocab)*int64(s.Hidden))/int64(max(s.Layers, 1))) * b
		grads, gnote = in.shard(P*b, 2)+flight, "this rank's share, plus the lm_head's and about one layer's in flight"
	}
	ref, rnote := int64(0), "β = 0: none"
	if in.Beta != 0 {
		ref, rnote = P*b, "frozen copy for the KL term"
	}
	return []Line{
		{role + " weights", in.shard(P*b, 3), fmt.Sprintf("%.2fB parameters × %d B", float64(P)/1e9, b)},
		{role + " gradients", grads, gnote},
		{role + " optimizer state", in.shard(2*P*4, 1), "AdamW exp_avg + exp_avg_sq, fp32"},
		{role + " master weights", master, mnote},
		{role + " reference model", ref, rnote},
	}
}

// packedHead is the oneDNN copy of a float32 lm_head that inference passes
// on the CPU keep (model/fused.PackedLinear, model/llama's packedHead): V·C·4
// for as long as the weight is unchanged; nothing on CUDA or in bf16.
func (in Input) packedHead(role string, s Shape, bytes int64, copies int64, why string) []Line {
	if in.CUDA || bytes != 4 {
		return nil
	}
	return []Line{{role + " packed lm_head", copies * int64(s.Vocab) * int64(s.Hidden) * 4, why}}
}

// staticLines are what is held for the whole run.
func staticLines(in Input) []Line {
	b := int64(in.ParamBytes)
	out := in.learnerLines("policy", in.Policy)
	heads, hnote := int64(1), "oneDNN's packed fp32 copy for inference passes on the CPU"
	if in.LoRA.Rank <= 0 && in.Beta != 0 {
		heads, hnote = 2, hnote+", the policy's and the reference's"
	}
	out = append(out, in.packedHead("policy", in.Policy, b, heads, hnote)...)
	if in.RubricGenerator != nil {
		out = append(out, in.learnerLines("rubric generator", *in.RubricGenerator)...)
		out = append(out, in.packedHead("rubric generator", *in.RubricGenerator, b, heads, hnote)...)
	}
	if in.Inferrer != nil {
		out = append(out, Line{"question inferrer", in.Inferrer.Params() * b,
			fmt.Sprintf("%.2fB parameters × %d B: the frozen initial policy that infers back-translated questions", float64(in.Inferrer.Params())/1e9, b)})
		out = append(out, in.packedHead("question inferrer", *in.Inferrer, b, 1, "oneDNN's packed fp32 copy for inference passes on the CPU")...)
	}
	jb := int64(in.JudgeBytes)
	if in.Judge == nil {
		return append(out, Line{"judge", 0, "not on this device (served, or on another device)"})
	}
	out = append(out, Line{"judge", in.Judge.Params() * jb, fmt.Sprintf("%.2fB parameters × %d B, in process", float64(in.Judge.Params())/1e9, jb)})
	return append(out, in.packedHead("judge", *in.Judge, jb, 1, "oneDNN's packed fp32 copy for inference passes on the CPU")...)
}

// generationKV is the generation batch's KV cache, or the judge's when
// larger.
func generationKV(in Input) (int64, string) {
	kv := KVCache(in.Policy, in.GenRows, in.GenTokens, in.ParamBytes)
	note := fmt.Sprintf("%d rows × %d tokens", in.GenRows, in.GenTokens)
	if in.Judge != nil {
		kv = max(kv, KVCache(*in.Judge, in.JudgeRows, in.JudgeTok, in.JudgeBytes))
		note += fmt.Sprintf("; judge %d rows × %d tokens (the larger)", in.JudgeRows, in.JudgeTok)
	}
	return kv, note
}

// training is a training step's memory: a micro-batch and the optimizer
// step, with what the micro-batch is made of.
type training struct {
	micro, step  int64
	stepNote     string
	parts, other []Line
}

func trainingPhase(in Input) training {
	sdpa := in.CUDA
	B, T, pb := in.MicroBatch, in.SeqLen, in.ParamBytes
	act := activations(in.Policy, B, T, pb, in.GradCheckpointing, sdpa, in.LoRA)
	other := activations(in.Policy, B, T, pb, !in.GradCheckpointing, sdpa, in.LoRA)
	logits := LogitsChunk(in.Policy, B, T)
	lnote := fmt.Sprintf("chunked selective log-softmax, %d positions at a time", max(1, min(int64(T), LogitChunkElems/max(1, int64(B)*int64(in.Policy.Vocab)))))
	full := int64(B) * int64(T) * int64(in.Policy.Vocab) * 4
	if in.FullLogits {
		logits, lnote = logitsLive*full, "unchunked (B, T, V) logits"
	}
	if in.LoRA.Rank <= 0 {
		logits += int64(in.Policy.Vocab) * int64(in.Policy.Hidden) * 4
		lnote += ", and a temporary lm_head gradient"
	}
	bwd := layerBackward(in.Policy, B, T, pb, sdpa)
	if in.FullLogits {
		bwd += full // the logits stay alive through the layers' backward
	}
	ck := map[bool]string{true: "with checkpointing", false: "without checkpointing"}
	t := training{micro: act + max(logits, bwd), step: adamTemps * largestTensor(in.Policy, in.LoRA) * 4,
		stepNote: "AdamW temporaries: 2 fp32 copies of the largest trainable tensor"}
	if pb != 4 && in.LoRA.Rank <= 0 {
		t.step += largestTensor(in.Policy, in.LoRA) * 4
		t.stepNote += " and its fp32 gradient"
	}
	t.parts = []Line{
		{"activations per micro-batch", act, fmt.Sprintf("%d × %d tokens, %s", B, T, ck[in.GradCheckpointing])},
		{"logits chunk", logits, lnote},
		{"layer backward", bwd, "temporaries of one decoder layer's backward"},
	}
	t.other = []Line{{"activations " + ck[!in.GradCheckpointing], other, "for comparison"}}
	return t
}
