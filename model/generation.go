package model

import (
	"encoding/json"
	"fmt"
)

// GenerationConfig is HF generation_config.json: the sampling defaults a
// checkpoint ships with. Unknown keys are kept in Extra and written back.
type GenerationConfig struct {
	BOSTokenID          *int     `json:"bos_token_id,omitempty"`         // beginning-of-sequence id
	EOSTokenID          TokenIDs `json:"eos_token_id,omitempty"`         // ids that end generation
	PadTokenID          *int     `json:"pad_token_id,omitempty"`         // padding id
	DoSample            *bool    `json:"do_sample,omitempty"`            // sample (true) or greedy (false)
	Temperature         *float64 `json:"temperature,omitempty"`          // softmax temperature
	TopP                *float64 `json:"top_p,omitempty"`                // nucleus mass
	TopK                *int     `json:"top_k,omitempty"`                // keep the k most likely tokens
	MaxNewTokens        *int     `json:"max_new_tokens,omitempty"`       // generation length cap
	TransformersVersion string   `json:"transformers_version,omitempty"` // writer's transformers version

	// Extra holds keys not listed above, written back verbatim.
	Extra map[string]json.RawMessage `json:"-"`
}

// ParseGenerationConfig decodes generation_config.json.
func ParseGenerationConfig(b []byte) (*GenerationConfig, error) {
	g := &GenerationConfig{}
	type plain GenerationConfig
	if err := json.Unmarshal(b, (*plain)(g)); err != nil {
		return nil, err
	}
	extra, err := extraKeys(b, g)
	if err != nil {
		return nil, err
	}
	g.Extra = extra
	return g, nil
}

// MarshalJSON writes the known fields plus Extra, keys sorted, indented.
func (g *GenerationConfig) MarshalJSON() ([]byte, error) {
	type plain GenerationConfig
	return marshalWithExtra((*plain)(g), g.Extra)
}

// QwenGenerationConfig is the generation_config.json Qwen3 checkpoints ship:
// thinking-mode sampling defaults and both end tokens.
func QwenGenerationConfig() *GenerationConfig {
	bos, pad, k := 151643, 151643, 20
	t, p, ds := 0.6, 0.95, true
	return &GenerationConfig{
		BOSTokenID: &bos, EOSTokenID: TokenIDs{151645, 151643}, PadTokenID: &pad,
		DoSample: &ds, Temperature: &t, TopP: &p, TopK: &k, TransformersVersion: "4.51.3",
	}
}

func (g *GenerationConfig) String() string {
	b, err := g.MarshalJSON()
	if err != nil {
		return fmt.Sprintf("generation config: %v", err)
	}
	return string(b)
}
