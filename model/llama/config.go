// Package llama is the Llama family of decoder-only transformers, one package
// for three HF architectures that differ by a few switches:
//
//   - LlamaForCausalLM: RMSNorm, RoPE, SwiGLU MLP, GQA; optional bias on the
//     attention projections (attention_bias).
//   - Qwen2ForCausalLM: Llama with a bias on q/k/v (never on o).
//   - Qwen3ForCausalLM: Llama with RMSNorm on q and k over the head dimension
//     (before RoPE) and a configurable head_dim.
//
// Structs mirror the HF modules and their fields carry the HF names, so the
// parameter list (Parameters) is built from the struct and is exactly HF's
// state-dict: model.layers.{i}.self_attn.q_proj.weight … Forward methods hold
// the math: RMSNorm, softmax and RoPE are computed in float32 and cast back to
// the parameter dtype, as HF does; logits are returned in float32.
//
// Two things change how, not what, is computed:
//
//   - A forward pass with grad off and no adapter runs its decoder layers and
//     final norm through model/fused: the same ATen ops, called from C++ in
//     one cgo call instead of ~95 Go-side ops a layer (fused.go). Its
//     outputs are the plain path's bits (TestFusedEqualsPlain).
//   - On CPU with grad off the lm_head runs through oneDNN over a copy of
//     its weight packed once into oneDNN's layout (fused.PackedLinear;
//     EVOLM_PACKED=0 turns it off; packedHead), where F.linear re-packs
//     the weight on every call. Those logits equal F.linear's within
//     float32 rounding, not bit for bit.
//
// On CUDA the model takes the other side of each device choice: SDPA by
// default (model.LoadOptions), bfloat16 parameters, the attention mask
// built by tensor ops on the device (maskOps, where the CPU's comes from
// fused.AttnBias or row by row in the fused pass), the lm_head through
// F.linear, and the fused pass running ATen's ops where its CPU float32
// kernels decline (model/fused's TestOffCPUTakesTheOps). Each of these runs
// on the CPU in a test (TestHFParitySDPA, TestBFloat16Forward,
// TestAttnBiasEqualsOps, TestHeadFormsMatchLinear). What is unproven
// without a GPU is CUDA's own kernels under them and onDevice's copy of
// the batch's ids, mask and positions to the device: scripts/gpu-check.sh
// checks logits and log-probs against transformers on a GPU.
package llama

import (
	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/torch"
)

func intp(v int) *int { return &v }

func init() {
	model.Register(&model.Arch{
		Name:      "LlamaForCausalLM",
		ModelType: "llama",
		// transformers LlamaConfig defaults.
		Defaults: func() *model.Config {
			return &model.Config{
				Architectures: []string{"LlamaForCausalLM"}, ModelType: "llama",
				VocabSize: 32000, HiddenSize: 4096, IntermediateSize: 11008, NumHiddenLayers: 32,
				NumAttentionHeads: 32, HiddenAct: "silu", MaxPositionEmbeddings: 2048,
				InitializerRange: 0.02, RMSNormEps: 1e-6, UseCache: true, RopeTheta: 10000,
				BOSTokenID: intp(1), EOSTokenID: model.TokenIDs{2},
			}
		},
		Derive: func(*model.Config) {},
		Build:  build,
	})
	model.Register(&model.Arch{
		Name:      "Qwen2ForCausalLM",
		ModelType: "qwen2",
		// transformers Qwen2Config defaults.
		Defaults: func() *model.Config {
			return &model.Config{
				Architectures: []string{"Qwen2ForCausalLM"}, ModelType: "qwen2",
				VocabSize: 151936, HiddenSize: 4096, IntermediateSize: 22016, NumHiddenLayers: 32,
				NumAttentionHeads: 32, HiddenAct: "silu", MaxPositionEmbeddings: 32768,
				InitializerRange: 0.02, RMSNormEps: 1e-6, UseCache: true, RopeTheta: 10000,
			}
		},
		Derive: func(c *model.Config) { c.QKVBias, c.OBias = true, false },
		Build:  build,
	})
	model.Register(&model.Arch{
		Name:      "Qwen3ForCausalLM",
		ModelType: "qwen3",
		// transformers Qwen3Config defaults.
		Defaults: func() *model.Config {
			return &model.Config{
				Architectures: []string{"Qwen3ForCausalLM"}, ModelType: "qwen3",
				VocabSize: 151936, HiddenSize: 4096, IntermediateSize: 22016, NumHiddenLayers: 32,
				NumAttentionHeads: 32, HeadDim: 128, HiddenAct: "silu",
				MaxPositionEmbeddings: 32768, InitializerRange: 0.02, RMSNormEps: 1e-6, UseCache: true,
				RopeTheta: 10000,
			}
		},
		Derive: func(c *model.Config) { c.QKNorm = true },
		Build:  build,
	})
}

func build(cfg *model.Config, dev torch.Device, dtype torch.DType) (model.CausalLM, error) {
	return New(cfg, dev, dtype)
}
