package openai

import "strconv"

// This file holds the wire format of the runtime weight-update APIs that an
// RL learner calls between optimizer steps, as vLLM and SGLang publish them
// (docs/fleet.md cites the source of every field), and that `evolm serve`
// implements:
//
//	POST /v1/load_lora_adapter     vLLM (VLLM_ALLOW_RUNTIME_LORA_UPDATING=True, --enable-lora)
//	POST /v1/unload_lora_adapter   vLLM
//	POST /update_weights_from_disk SGLang (at the server root, not under /v1)

// Paths of the weight-update routes. The LoRA routes are relative to a /v1
// base URL; UpdateWeightsFromDiskPath is relative to the server root.
const (
	LoadLoRAAdapterPath       = "/load_lora_adapter"
	UnloadLoRAAdapterPath     = "/unload_lora_adapter"
	UpdateWeightsFromDiskPath = "/update_weights_from_disk"
)

// LoadLoRAAdapterRequest is vLLM's LoadLoRAAdapterRequest
// (vllm/entrypoints/openai/protocol.py): the adapter's name, which requests
// then give as their model, and the directory it is read from.
type LoadLoRAAdapterRequest struct {
	LoraName string `json:"lora_name"`
	LoraPath string `json:"lora_path"`
	// LoadInplace replaces an adapter already loaded under the name
	// (vLLM ≥ 0.11); without it a second load of a name is an error.
	LoadInplace bool `json:"load_inplace,omitempty"`
}

// UnloadLoRAAdapterRequest is vLLM's UnloadLoRAAdapterRequest.
type UnloadLoRAAdapterRequest struct {
	LoraName  string `json:"lora_name"`
	LoraIntID *int   `json:"lora_int_id,omitempty"`
}

// UpdateWeightsFromDiskRequest is SGLang's UpdateWeightFromDiskReqInput
// (python/sglang/srt/managers/io_struct.py), the fields evolm uses: the
// checkpoint directory and, optionally, its load format and a version label.
type UpdateWeightsFromDiskRequest struct {
	ModelPath  string  `json:"model_path"`
	LoadFormat *string `json:"load_format,omitempty"`
	// AbortAllRequests aborts the requests in flight instead of letting them
	// finish on the old weights.
	AbortAllRequests bool `json:"abort_all_requests,omitempty"`
	// WeightVersion labels the new weights (SGLang ≥ 0.5: reported by
	// GET /get_weight_version and in each answer's meta_info).
	WeightVersion *string `json:"weight_version,omitempty"`
}

// UpdateWeightsFromDiskResponse is SGLang's answer to
// POST /update_weights_from_disk: HTTP 200 with success true, or HTTP 400
// with success false and the reason in message.
type UpdateWeightsFromDiskResponse struct {
	Success           bool   `json:"success"`
	Message           string `json:"message"`
	NumPausedRequests int    `json:"num_paused_requests"`
}

// TokenIDPrefix starts a token string under return_tokens_as_token_ids.
const TokenIDPrefix = "token_id:"

// TokenIDString is the token string of id under return_tokens_as_token_ids.
func TokenIDString(id int) string { return TokenIDPrefix + strconv.Itoa(id) }

// ParseTokenIDString reads a "token_id:<id>" token string; ok is false for
// any other string.
func ParseTokenIDString(s string) (id int, ok bool) {
	if len(s) <= len(TokenIDPrefix) || s[:len(TokenIDPrefix)] != TokenIDPrefix {
		return 0, false
	}
	v, err := strconv.Atoi(s[len(TokenIDPrefix):])
	if err != nil || v < 0 {
		return 0, false
	}
	return v, true
}
