package model

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strings"
)

// Config is an HF config.json for the Llama family. JSON tags equal the HF
// keys; keys this struct does not know are kept in Extra and written back on
// save, so a checkpoint round-trips. Fields tagged "-" are derived by
// NewConfig.
type Config struct {
	Architectures         []string `json:"architectures"`                  // HF class names; the first picks the Arch
	ModelType             string   `json:"model_type"`                     // "llama", "qwen2", "qwen3"
	VocabSize             int      `json:"vocab_size"`                     // rows of embed_tokens and lm_head (≥ the tokenizer's ids)
	HiddenSize            int      `json:"hidden_size"`                    // residual stream width C
	IntermediateSize      int      `json:"intermediate_size"`              // SwiGLU MLP width
	NumHiddenLayers       int      `json:"num_hidden_layers"`              // decoder layers
	NumAttentionHeads     int      `json:"num_attention_heads"`            // query heads nh
	NumKeyValueHeads      int      `json:"num_key_value_heads"`            // key/value heads nkv (GQA when < nh); 0 means nh
	HeadDim               int      `json:"head_dim,omitempty"`             // per-head width hs; 0 means hidden_size/nh (Qwen3 defaults to 128)
	HiddenAct             string   `json:"hidden_act"`                     // MLP activation; only "silu"
	MaxPositionEmbeddings int      `json:"max_position_embeddings"`        // longest context the model was trained for
	InitializerRange      float64  `json:"initializer_range"`              // std of the normal init of Linear/Embedding weights
	RMSNormEps            float64  `json:"rms_norm_eps"`                   // epsilon inside every RMSNorm
	RopeTheta             float64  `json:"rope_theta"`                     // RoPE base (1e6 for Qwen3, 1e4 for Llama 2)
	RopeScaling           any      `json:"rope_scaling"`                   // RoPE scaling; only null is supported
	AttentionBias         bool     `json:"attention_bias"`                 // bias on q/k/v/o projections (Llama, Qwen3); Qwen2 always has q/k/v bias
	AttentionDropout      float64  `json:"attention_dropout"`              // dropout on attention probs; must be 0 (no dropout here)
	MLPBias               bool     `json:"mlp_bias,omitempty"`             // bias on MLP projections (Llama); must be false
	TieWordEmbeddings     bool     `json:"tie_word_embeddings"`            // lm_head shares embed_tokens' weight
	UseCache              bool     `json:"use_cache"`                      // HF generate flag, kept for round-trip
	UseSlidingWindow      *bool    `json:"use_sliding_window,omitempty"`   // Qwen2/3 sliding-window attention; must be false or absent
	TorchDType            string   `json:"torch_dtype,omitempty"`          // dtype the weights were saved in ("bfloat16" …)
	BOSTokenID            *int     `json:"bos_token_id,omitempty"`         // beginning-of-sequence id
	EOSTokenID            TokenIDs `json:"eos_token_id,omitempty"`         // end-of-sequence id(s): an int or a list
	PadTokenID            *int     `json:"pad_token_id,omitempty"`         // padding id
	TransformersVersion   string   `json:"transformers_version,omitempty"` // writer's transformers version

	// Extra holds config.json keys not listed above, written back verbatim.
	Extra map[string]json.RawMessage `json:"-"`

	// Derived by NewConfig.
	KVGroups  int     `json:"-"` // nh / nkv: query heads per key/value head
	AttnScale float64 `json:"-"` // 1/sqrt(head_dim), the attention logit scale
	QKVBias   bool    `json:"-"` // q/k/v projections have a bias (Qwen2, or attention_bias)
	OBias     bool    `json:"-"` // o_proj has a bias (attention_bias, not Qwen2)
	QKNorm    bool    `json:"-"` // RMSNorm on q and k over head_dim (Qwen3)

	// AttnImplementation is how attention is computed, set by Build from
	// LoadOptions.Attention: "eager" (explicit fp32 softmax; bit-exact with
	// HF eager) or "sdpa" (libtorch's fused scaled_dot_product_attention).
	AttnImplementation string `json:"-"`
}

// TokenIDs is an HF token-id field that may be an int, a list of ints or null.
type TokenIDs []int

// UnmarshalJSON accepts an int, a list of ints or null.
func (t *TokenIDs) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if string(b) == "null" {
		*t = nil
		return nil
	}
	if len(b) > 0 && b[0] == '[' {
		var xs []int
		if err := json.Unmarshal(b, &xs); err != nil {
			return err
		}
		*t = xs
		return nil
	}
	var x int
	if err := json.Unmarshal(b, &x); err != nil {
		return fmt.Errorf("want an int or a list of ints: %w", err)
	}
	*t = TokenIDs{x}
	return nil
}

// MarshalJSON writes one id as an int, several as a list.
func (t TokenIDs) MarshalJSON() ([]byte, error) {
	if len(t) == 1 {
		return json.Marshal(t[0])
	}
	return json.Marshal([]int(t))
}

// ParseConfig decodes config.json bytes, applying the architecture's defaults
// for absent keys, then checks and derives fields (NewConfig). It fails for an
// unknown architecture, naming the known ones.
func ParseConfig(data []byte) (*Config, error) {
	var head struct {
		Architectures []string `json:"architectures"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	if len(head.Architectures) == 0 {
		return nil, fmt.Errorf("config.json: no \"architectures\" (known: %s)", strings.Join(Architectures(), ", "))
	}
	arch, err := Lookup(head.Architectures[0])
	if err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	cfg := arch.Defaults()
	if err := json.Unmarshal(data, cfg); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	if cfg.Extra, err = extraKeys(data, cfg); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	if err := NewConfig(cfg); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	return cfg, nil
}

// ReadConfig reads and parses dir/config.json.
func ReadConfig(dir string) (*Config, error) {
	b, err := os.ReadFile(dir + "/config.json")
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	cfg, err := ParseConfig(b)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	return cfg, nil
}

// NewConfig checks cfg (sizes positive, heads divisible, supported features),
// fills defaults that depend on other fields and derives KVGroups, AttnScale,
// QKVBias, OBias and QKNorm from the sizes and the architecture.
func NewConfig(cfg *Config) error {
	if len(cfg.Architectures) == 0 {
		return fmt.Errorf("no architectures (known: %s)", strings.Join(Architectures(), ", "))
	}
	arch, err := Lookup(cfg.Architectures[0])
	if err != nil {
		return err
	}
	if cfg.ModelType == "" {
		cfg.ModelType = arch.ModelType
	}
	if !strings.EqualFold(cfg.ModelType, arch.ModelType) {
		return fmt.Errorf("model_type %q does not match architectures[0] %s (model_type %q)", cfg.ModelType, arch.Name, arch.ModelType)
	}
	if err := checkSizes(cfg); err != nil {
		return err
	}
	if cfg.NumKeyValueHeads == 0 {
		cfg.NumKeyValueHeads = cfg.NumAttentionHeads
	}
	if cfg.NumKeyValueHeads < 0 || cfg.NumAttentionHeads%cfg.NumKeyValueHeads != 0 {
		return fmt.Errorf("num_attention_heads %d is not a multiple of num_key_value_heads %d", cfg.NumAttentionHeads, cfg.NumKeyValueHeads)
	}
	if cfg.HeadDim == 0 {
		if cfg.HiddenSize%cfg.NumAttentionHeads != 0 {
			return fmt.Errorf("hidden_size %d is not a multiple of num_attention_heads %d (and no head_dim)", cfg.HiddenSize, cfg.NumAttentionHeads)
		}
		cfg.HeadDim = cfg.HiddenSize / cfg.NumAttentionHeads
	}
	if cfg.HeadDim < 0 || cfg.HeadDim%2 != 0 {
		return fmt.Errorf("head_dim %d must be positive and even (RoPE rotates pairs)", cfg.HeadDim)
	}
	if cfg.HiddenAct == "" {
		cfg.HiddenAct = "silu"
	}
	if cfg.HiddenAct != "silu" {
		return fmt.Errorf("hidden_act %q: only silu is supported", cfg.HiddenAct)
	}
	if !(cfg.RMSNormEps > 0) || cfg.RMSNormEps >= 1 {
		return fmt.Errorf("rms_norm_eps %g, want in (0, 1)", cfg.RMSNormEps)
	}
	if !(cfg.RopeTheta > 0) || math.IsInf(cfg.RopeTheta, 0) {
		return fmt.Errorf("rope_theta %g, want a finite value > 0", cfg.RopeTheta)
	}
	if cfg.InitializerRange < 0 || math.IsNaN(cfg.InitializerRange) || math.IsInf(cfg.InitializerRange, 0) {
		return fmt.Errorf("initializer_range %g, want a finite value >= 0", cfg.InitializerRange)
	}
	if cfg.RopeScaling != nil {
		return fmt.Errorf("rope_scaling %v: only null is supported", cfg.RopeScaling)
	}
	if cfg.AttentionDropout != 0 {
		return fmt.Errorf("attention_dropout %g: only 0 is supported", cfg.AttentionDropout)
	}
	if cfg.MLPBias {
		return fmt.Errorf("mlp_bias: not supported")
	}
	if cfg.UseSlidingWindow != nil && *cfg.UseSlidingWindow {
		return fmt.Errorf("use_sliding_window: not supported")
	}
	if cfg.InitializerRange == 0 {
		cfg.InitializerRange = 0.02
	}
	if err := checkTokenIDs(cfg); err != nil {
		return err
	}
	switch cfg.TorchDType {
	case "", "float32", "bfloat16", "float16", "float64":
	default:
		return fmt.Errorf("torch_dtype %q, want float32, bfloat16, float16 or float64", cfg.TorchDType)
	}
	cfg.KVGroups = cfg.NumAttentionHeads / cfg.NumKeyValueHeads
	cfg.AttnScale = 1 / math.Sqrt(float64(cfg.HeadDim))
	cfg.QKVBias, cfg.OBias, cfg.QKNorm = cfg.AttentionBias, cfg.AttentionBias, false
	arch.Derive(cfg)
	return nil
}

// Size bounds of config.json: beyond them a checkpoint is not a model
// this engine could hold, and a typo (a size off by 1000×) would be
// allocated before anything else failed.
const (
	maxVocab     = 1 << 24 // ids stay exact in float32
	maxWidth     = 1 << 18
	maxLayers    = 1 << 10
	maxHeads     = 1 << 12
	maxPositions = 1 << 24
)

// checkSizes checks every size against its meaning: positive, and within
// the bounds above.
func checkSizes(cfg *Config) error {
	for _, f := range []struct {
		name  string
		v     int
		bound int
	}{{"vocab_size", cfg.VocabSize, maxVocab}, {"hidden_size", cfg.HiddenSize, maxWidth},
		{"intermediate_size", cfg.IntermediateSize, maxWidth}, {"num_hidden_layers", cfg.NumHiddenLayers, maxLayers},
		{"num_attention_heads", cfg.NumAttentionHeads, maxHeads},
		// The context-length guard of generation and serving reads it.
		{"max_position_embeddings", cfg.MaxPositionEmbeddings, maxPositions}} {
		if f.v <= 0 || f.v > f.bound {
			return fmt.Errorf("%s = %d, want in [1, %d]", f.name, f.v, f.bound)
		}
	}
	if cfg.NumKeyValueHeads > maxHeads || cfg.HeadDim > maxWidth {
		return fmt.Errorf("num_key_value_heads %d and head_dim %d must be at most %d and %d", cfg.NumKeyValueHeads, cfg.HeadDim, maxHeads, maxWidth)
	}
	return nil
}

// checkTokenIDs checks that the special token ids lie in the vocabulary.
func checkTokenIDs(cfg *Config) error {
	in := func(name string, id int) error {
		if id < 0 || id >= cfg.VocabSize {
			return fmt.Errorf("%s %d is outside the vocabulary [0, %d)", name, id, cfg.VocabSize)
		}
		return nil
	}
	for _, f := range []struct {
		name string
		id   *int
	}{{"bos_token_id", cfg.BOSTokenID}, {"pad_token_id", cfg.PadTokenID}} {
		if f.id != nil {
			if err := in(f.name, *f.id); err != nil {
				return err
			}
		}
	}
	for _, id := range cfg.EOSTokenID {
		if err := in("eos_token_id", id); err != nil {
			return err
		}
	}
	return nil
}

// MarshalJSON writes config.json: the known fields plus Extra, keys sorted.
func (c *Config) MarshalJSON() ([]byte, error) {
	type plain Config // drops this method
	return marshalWithExtra((*plain)(c), c.Extra)
}

// NumParams counts the parameters the config implies (tied lm_head once).
func (c *Config) NumParams() int64 {
	C, I, V := int64(c.HiddenSize), int64(c.IntermediateSize), int64(c.VocabSize)
	q, kv := int64(c.NumAttentionHeads*c.HeadDim), int64(c.NumKeyValueHeads*c.HeadDim)
	layer := C*q + 2*C*kv + q*C + 3*C*I + 2*C
	if c.QKVBias {
		layer += q + 2*kv
	}
	if c.OBias {
		layer += C
	}
	if c.QKNorm {
		layer += 2 * int64(c.HeadDim)
	}
	n := V*C + int64(c.NumHiddenLayers)*layer + C
	if !c.TieWordEmbeddings {
		n += V * C
	}
	return n
}
