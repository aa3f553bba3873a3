// Package model is evolm's LM engine on libtorch (docs/design.md, "Layers"): HF checkpoint
// IO, the architecture registry and the CausalLM contract that generation,
// log-probs and training build on.
//
// Architectures register themselves by HF class name (Qwen3ForCausalLM …) from
// their package's init; import model/llama for the Llama family. Load reads a
// checkpoint directory (config.json, single or sharded safetensors, f32, bf16
// or f16, generation_config.json), Save writes the same format back, and Init
// creates a random checkpoint with the real Qwen3 tokenizer.
//
// Ownership: a CausalLM owns its parameters until Close. Forward results
// belong to the caller's torch.Scope. A Cache owns its key/value buffers until
// its Close.
package model

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/evolm/evolm/model/torch"
)

// LogitsWriter is implemented by a CausalLM that can write lm_head(h)
// straight into a caller's float32 tensor: a decode loop's logits buffer,
// reused every step (sample.Workspace). WriteLogits writes exactly what
// Logits returns (the same libtorch matmul, bit for bit) into out (…, V),
// which has h's leading shape. It reports false and writes nothing when it
// cannot (an adapter on lm_head, a head in another dtype); callers then use
// Logits.
type LogitsWriter interface {
	WriteLogits(s *torch.Scope, h, out *torch.Tensor) (bool, error)
}

// TokenLogitser is implemented by a CausalLM that can apply lm_head for a
// few vocabulary entries only: TokenLogits returns float32 logits (…, K)
// where column k is Logits(h)[…, ids[k]] up to float rounding (the product
// runs over the K rows of the weight instead of all V). ids is int64 (K) on
// the model's device. A scorer that needs the candidates' logits relative
// to each other, not to the whole vocabulary, pays K·C instead of V·C.
type TokenLogitser interface {
	TokenLogits(s *torch.Scope, h, ids *torch.Tensor) (*torch.Tensor, error)
}

// CausalLM is a decoder-only language model.
type CausalLM interface {
	// Config is the model's configuration (do not modify).
	Config() *Config

	// Forward runs the decoder and returns logits (B, T, V) in float32, owned
	// by s. See Batch for the inputs. The error is also recorded on s.
	Forward(s *torch.Scope, b Batch) (*torch.Tensor, error)

	// Hidden runs the decoder up to and including the final norm and returns
	// hidden states (B, T, C) in the parameter dtype, owned by s. Callers that
	// need logits at a few positions only (log-probs of long sequences) slice
	// them and call Logits, instead of materializing (B, T, V).
	Hidden(s *torch.Scope, b Batch) (*torch.Tensor, error)

	// Logits applies lm_head to hidden states (…, C) and returns float32
	// logits (…, V), owned by s.
	Logits(s *torch.Scope, h *torch.Tensor) (*torch.Tensor, error)

	// Parameters lists every parameter with its HF name, in HF state-dict
	// order. A tied lm_head is not listed (HF does not save it either). The
	// tensors are the model's own: updating them in place updates the model.
	Parameters() []Param

	// Device and DType are where and in what dtype the parameters live.
	Device() torch.Device
	DType() torch.DType

	// Close frees the parameters; the model is unusable afterwards.
	Close()
}

// GradCheckpointer is a CausalLM that can recompute its decoder layers in
// backward instead of keeping their activations (activation checkpointing).
// With it on, a loss over the model's outputs must be backpropagated with
// torch.Backward, which runs the recomputation.
type GradCheckpointer interface {
	SetGradCheckpointing(on bool)
}

// Param is a named parameter.
type Param struct {
	Name   string        // HF state-dict key, e.g. model.layers.0.self_attn.q_proj.weight
	Tensor *torch.Tensor // owned by the model
}

// Batch is the input of one forward pass.
type Batch struct {
	// IDs are token ids (B, T), int64.
	IDs *torch.Tensor
	// Positions are RoPE positions (B, T), int64. Nil means
	// Cache.Len() + arange(T) for every row, right for unpadded input. With
	// left padding pass cumsum(mask) - 1 (HF generate's convention).
	Positions *torch.Tensor
	// Mask is (B, Tpast + T) over the cached and the current keys: 1 attends,
	// 0 is padding. It is combined with the causal mask. Nil attends to every
	// key. Logits at padded query positions are arbitrary (such a query may
	// have no key to attend); give them zero weight in any loss.
	Mask *torch.Tensor
	// Cache, when set, supplies Tpast = Cache.Len() past keys/values; the new
	// ones are appended and Len advances by T on success.
	Cache *Cache
	// Branches, when set, is (B, T) int64: the branch of each new token,
	// 0 for the trunk, and every cached key is trunk. A query attends to
	// the trunk keys before it and to the keys of its own branch before it,
	// never to another branch (combined with the causal mask and Mask).
	// Several continuations of one prefix then run in one row, the trunk
	// first and each branch after it, laid out one after another, with
	// Positions restarting at the same value for each branch: every branch
	// computes what a row holding only the trunk and that branch computes.
	// Positions are required with Branches.
	Branches *torch.Tensor
}

// Arch is a registered architecture.
type Arch struct {
	// Name is the HF class name in config.json "architectures".
	Name string
	// ModelType is config.json "model_type".
	ModelType string
	// Defaults returns a config holding the HF defaults of the architecture's
	// config class; ParseConfig decodes config.json over it.
	Defaults func() *Config
	// Derive sets architecture-specific derived fields (QKVBias, OBias,
	// QKNorm) after NewConfig has set the generic ones.
	Derive func(cfg *Config)
	// Build allocates a model for cfg with uninitialized parameters on dev in
	// dtype; Load fills them from a checkpoint and Randomize from a seed.
	Build func(cfg *Config, dev torch.Device, dtype torch.DType) (CausalLM, error)
}

var (
	regMu sync.RWMutex
	archs = map[string]*Arch{}
)

// Register adds an architecture; it is called from init and fails loudly on
// a duplicate name (a programming error).
func Register(a *Arch) {
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := archs[a.Name]; dup {
		panic(fmt.Sprintf("model: architecture %s registered twice", a.Name))
	}
	archs[a.Name] = a
}

// Lookup finds an architecture by HF class name, or by model_type
// ("qwen3"), case-insensitively.
func Lookup(name string) (*Arch, error) {
	regMu.RLock()
	defer regMu.RUnlock()
	if a, ok := archs[name]; ok {
		return a, nil
	}
	for _, a := range archs {
		if strings.EqualFold(a.Name, name) || strings.EqualFold(a.ModelType, name) {
			return a, nil
		}
	}
	return nil, fmt.Errorf("unknown architecture %q (known: %s)", name, strings.Join(architectures(), ", "))
}

// Architectures lists the registered HF class names, sorted.
func Architectures() []string {
	regMu.RLock()
	defer regMu.RUnlock()
	return architectures()
}

func architectures() []string {
	var out []string
	for n := range archs {
		out = append(out, n)
	}
	sort.Strings(out)
	if len(out) == 0 {
		return []string{"none registered: import github.com/evolm/evolm/model/llama"}
	}
	return out
}
