package lora

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// DefaultTargets are the modules LoRA adapts by default: every attention and
// MLP projection (PEFT's target_modules for Llama-family models).
var DefaultTargets = []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}

// shortTargets maps the config's short names to the HF module names.
var shortTargets = map[string]string{
	"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj",
	"gate": "gate_proj", "up": "up_proj", "down": "down_proj",
}

// Config is a LoRA adapter's hyperparameters (PEFT's LoraConfig subset that
// evolm trains and loads).
type Config struct {
	// Rank is r, the inner dimension of lora_A (r, in) and lora_B (out, r).
	Rank int
	// Alpha is lora_alpha: the adapter's term is scaled by Alpha/Rank
	// (Alpha/√Rank with RSLoRA).
	Alpha float64
	// Dropout is lora_dropout, applied to the adapter's input only while
	// training (Adapter.SetTraining).
	Dropout float64
	// Targets are the adapted modules by their last name component
	// (q_proj … or the short q, k, v, o, gate, up, down); empty means
	// DefaultTargets. TargetPattern, when set instead, is PEFT's regex form:
	// a module is adapted when the pattern matches its full name.
	Targets       []string
	TargetPattern string
	// RSLoRA is PEFT's use_rslora (scaling Alpha/√Rank).
	RSLoRA bool
}

// MaxScaling bounds an adapter's scaling (alpha/r, alpha/√r with RSLoRA):
// common ones are 0.5 to 64.
const MaxScaling = 1e4

// Scaling is the factor of the adapter's term, PEFT's scaling[adapter].
func (c Config) Scaling() float64 {
	if c.RSLoRA {
		return c.Alpha / math.Sqrt(float64(c.Rank))
	}
	return c.Alpha / float64(c.Rank)
}

// Normalize checks c and returns it with Targets in HF module names (in
// DefaultTargets order where they are default ones) and the default targets
// filled in.
func (c Config) Normalize() (Config, error) {
	if c.Rank <= 0 {
		return c, fmt.Errorf("lora: rank %d, want > 0", c.Rank)
	}
	if !(c.Alpha > 0) || math.IsInf(c.Alpha, 0) {
		return c, fmt.Errorf("lora: alpha %v, want > 0", c.Alpha)
	}
	if sc := c.Scaling(); sc > MaxScaling {
		return c, fmt.Errorf("lora: alpha %v with rank %d scales the adapter by %g, over %g: no trained adapter does, and the base model's activations would be swamped", c.Alpha, c.Rank, sc, float64(MaxScaling))
	}
	if !(c.Dropout >= 0 && c.Dropout < 1) {
		return c, fmt.Errorf("lora: dropout %v, want in [0, 1)", c.Dropout)
	}
	if c.TargetPattern != "" {
		if len(c.Targets) > 0 {
			return c, fmt.Errorf("lora: both target names and a target pattern")
		}
		if _, err := regexp.Compile(`^(?:` + c.TargetPattern + `)$`); err != nil {
			return c, fmt.Errorf("lora: target pattern: %w", err)
		}
		return c, nil
	}
	if len(c.Targets) == 0 {
		c.Targets = append([]string(nil), DefaultTargets...)
		return c, nil
	}
	seen := map[string]bool{}
	for _, t := range c.Targets {
		name := strings.TrimSpace(t)
		if long, ok := shortTargets[name]; ok {
			name = long
		}
		if name == "" {
			return c, fmt.Errorf("lora: empty target module name")
		}
		seen[name] = true
	}
	var out []string
	for _, t := range DefaultTargets {
		if seen[t] {
			out = append(out, t)
			delete(seen, t)
		}
	}
	var rest []string
	for t := range seen {
		rest = append(rest, t)
	}
	if len(rest) > 0 {
		return c, fmt.Errorf("lora: targets %v are not linear layers of the decoder (want among %v or q, k, v, o, gate, up, down)", rest, DefaultTargets)
	}
	c.Targets = out
	return c, nil
}

// matcher reports whether the module named name (model.layers.0.self_attn.q_proj)
// is a target, as PEFT's check_target_module_exists decides: a list matches
// the name or its last dotted components; a pattern must match the whole name.
func (c Config) matcher() func(name string) bool {
	if c.TargetPattern != "" {
		re := regexp.MustCompile(`^(?:` + c.TargetPattern + `)$`) // checked by Normalize
		return re.MatchString
	}
	return func(name string) bool {
		for _, t := range c.Targets {
			if name == t || strings.HasSuffix(name, "."+t) {
				return true
			}
		}
		return false
	}
}

// ConfigFile and WeightsFile are the names PEFT's save_pretrained writes and
// from_pretrained (and vLLM's LoRA loader) reads.
const (
	ConfigFile  = "adapter_config.json"
	WeightsFile = "adapter_model.safetensors"
)

// peftConfig is adapter_config.json as peft 0.15.2 writes it for a LoRA
// adapter (keys sorted, as PEFT's to_json_string does).
type peftConfig struct {
	AlphaPattern          map[string]any  `json:"alpha_pattern"`
	AutoMapping           any             `json:"auto_mapping"`
	BaseModelNameOrPath   string          `json:"base_model_name_or_path"`
	Bias                  string          `json:"bias"`
	CordaConfig           any             `json:"corda_config"`
	EvaConfig             any             `json:"eva_config"`
	ExcludeModules        any             `json:"exclude_modules"`
	FanInFanOut           bool            `json:"fan_in_fan_out"`
	InferenceMode         bool            `json:"inference_mode"`
	InitLoraWeights       any             `json:"init_lora_weights"`
	LayerReplication      any             `json:"layer_replication"`
	LayersPattern         any             `json:"layers_pattern"`
	LayersToTransform     any             `json:"layers_to_transform"`
	LoftqConfig           map[string]any  `json:"loftq_config"`
	LoraAlpha             float64         `json:"lora_alpha"`
	LoraBias              bool            `json:"lora_bias"`
	LoraDropout           float64         `json:"lora_dropout"`
	MegatronConfig        any             `json:"megatron_config"`
	MegatronCore          string          `json:"megatron_core"`
	ModulesToSave         any             `json:"modules_to_save"`
	PEFTType              string          `json:"peft_type"`
	R                     int             `json:"r"`
	RankPattern           map[string]any  `json:"rank_pattern"`
	Revision              any             `json:"revision"`
	TargetModules         json.RawMessage `json:"target_modules"`
	TaskType              string          `json:"task_type"`
	TrainableTokenIndices any             `json:"trainable_token_indices"`
	UseDora               bool            `json:"use_dora"`
	UseRSLoRA             bool            `json:"use_rslora"`
}

// WriteConfig writes c as dir/adapter_config.json; base is recorded as
// base_model_name_or_path.
func WriteConfig(dir string, c Config, base string) error {
	c, err := c.Normalize()
	if err != nil {
		return err
	}
	var tm []byte
	if c.TargetPattern != "" {
		tm, err = json.Marshal(c.TargetPattern)
	} else {
		tm, err = json.Marshal(c.Targets)
	}
	if err != nil {
		return err
	}
	pc := peftConfig{
		AlphaPattern: map[string]any{}, BaseModelNameOrPath: base, Bias: "none",
		InferenceMode: true, InitLoraWeights: true, LoftqConfig: map[string]any{},
		LoraAlpha: c.Alpha, LoraDropout: c.Dropout, MegatronCore: "megatron.core",
		PEFTType: "LORA", R: c.Rank, RankPattern: map[string]any{}, TargetModules: tm,
		TaskType: "CAUSAL_LM", UseRSLoRA: c.RSLoRA,
	}
	b, err := json.MarshalIndent(pc, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, ConfigFile), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("lora: %w", err)
	}
	return nil
}

// ReadConfig reads dir/adapter_config.json. It returns the config and
// base_model_name_or_path, and refuses the PEFT features evolm does not
// implement (DoRA, per-module ranks, bias training, modules_to_save …) by
// name rather than loading an adapter that would compute something else.
func ReadConfig(dir string) (Config, string, error) {
	path := filepath.Join(dir, ConfigFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, "", fmt.Errorf("lora: %w", err)
	}
	var pc peftConfig
	if err := json.Unmarshal(b, &pc); err != nil {
		return Config{}, "", fmt.Errorf("lora: %s: %w", path, err)
	}
	var bad []string
	if pc.PEFTType != "LORA" {
		bad = append(bad, fmt.Sprintf("peft_type %q (want LORA)", pc.PEFTType))
	}
	if pc.UseDora {
		bad = append(bad, "use_dora")
	}
	if pc.Bias != "" && pc.Bias != "none" {
		bad = append(bad, fmt.Sprintf("bias %q", pc.Bias))
	}
	if pc.LoraBias {
		bad = append(bad, "lora_bias")
	}
	if pc.FanInFanOut {
		bad = append(bad, "fan_in_fan_out")
	}
	if len(pc.RankPattern) > 0 {
		bad = append(bad, "rank_pattern")
	}
	if len(pc.AlphaPattern) > 0 {
		bad = append(bad, "alpha_pattern")
	}
	for name, v := range map[string]any{
		"modules_to_save": pc.ModulesToSave, "layers_to_transform": pc.LayersToTransform,
		"layer_replication": pc.LayerReplication, "trainable_token_indices": pc.TrainableTokenIndices,
		"exclude_modules": pc.ExcludeModules,
	} {
		if !empty(v) {
			bad = append(bad, name)
		}
	}
	if len(bad) > 0 {
		return Config{}, "", fmt.Errorf("lora: %s uses what evolm does not implement: %s", path, strings.Join(bad, ", "))
	}
	c := Config{Rank: pc.R, Alpha: pc.LoraAlpha, Dropout: pc.LoraDropout, RSLoRA: pc.UseRSLoRA}
	var list []string
	var pattern string
	switch {
	case len(pc.TargetModules) == 0 || string(pc.TargetModules) == "null":
		return Config{}, "", fmt.Errorf("lora: %s: no target_modules", path)
	case json.Unmarshal(pc.TargetModules, &list) == nil:
		c.Targets = list
	case json.Unmarshal(pc.TargetModules, &pattern) == nil:
		c.TargetPattern = pattern
		if pattern == "all-linear" {
			c.TargetPattern, c.Targets = "", append([]string(nil), DefaultTargets...)
		}
	default:
		return Config{}, "", fmt.Errorf("lora: %s: target_modules %s is neither a list nor a string", path, pc.TargetModules)
	}
	if c, err = c.Normalize(); err != nil {
		return Config{}, "", fmt.Errorf("%w (%s)", err, path)
	}
	return c, pc.BaseModelNameOrPath, nil
}

// empty reports whether a decoded JSON value is null or an empty list/object.
func empty(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case []any:
		return len(x) == 0
	case map[string]any:
		return len(x) == 0
	}
	return false
}
