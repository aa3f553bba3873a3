package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// This file holds the wire format of the runtime weight-update APIs that an
// RL learner calls between optimizer steps, as vLLM and SGLang publish them
// (docs/gpus-and-scale.md, "The server APIs, and their sources", cites the
// source of every field), and that `evolm serve` implements:
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

// Endpoints returns the client's endpoints (base URLs ending in /v1), in
// configuration order.
func (c *Client) Endpoints() []string {
	out := make([]string, len(c.eps))
	for i, ep := range c.eps {
		out[i] = ep.base
	}
	return out
}

// LoadLoRAAdapter asks the server at endpoint (a base URL ending in /v1) to
// load the adapter at path under name (vLLM's POST /v1/load_lora_adapter).
// One attempt, under the request timeout; the error carries the server's
// answer.
func (c *Client) LoadLoRAAdapter(ctx context.Context, endpoint, name, path string) error {
	_, err := c.admin(ctx, endpoint+LoadLoRAAdapterPath, LoadLoRAAdapterRequest{LoraName: name, LoraPath: path})
	return err
}

// UnloadLoRAAdapter asks the server at endpoint to unload adapter name
// (vLLM's POST /v1/unload_lora_adapter).
func (c *Client) UnloadLoRAAdapter(ctx context.Context, endpoint, name string) error {
	_, err := c.admin(ctx, endpoint+UnloadLoRAAdapterPath, UnloadLoRAAdapterRequest{LoraName: name})
	return err
}

// UpdateWeightsFromDisk asks the server at endpoint to replace its weights
// with the checkpoint at path, labelled version (SGLang's
// POST /update_weights_from_disk, at the server root: endpoint without its
// /v1). An answer with success false is an error with the server's message.
func (c *Client) UpdateWeightsFromDisk(ctx context.Context, endpoint, path, version string) error {
	req := UpdateWeightsFromDiskRequest{ModelPath: path}
	if version != "" {
		req.WeightVersion = &version
	}
	data, err := c.admin(ctx, strings.TrimSuffix(endpoint, "/v1")+UpdateWeightsFromDiskPath, req)
	if err != nil {
		return err
	}
	var ans UpdateWeightsFromDiskResponse
	if err := decodeInto(&ans)(data); err != nil {
		return fmt.Errorf("update_weights_from_disk at %s: invalid answer %q: %w", endpoint, data, err)
	}
	if !ans.Success {
		return fmt.Errorf("update_weights_from_disk at %s: %s", endpoint, ans.Message)
	}
	return nil
}

// admin POSTs body as JSON to url once and returns the body of a 200
// answer; any other answer is an error naming the url, the status and the
// server's message.
func (c *Client) admin(ctx context.Context, url string, body any) ([]byte, error) {
	payload, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	actx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, url, bytes.NewReader(payload))
	if err != nil {
		return nil, fmt.Errorf("POST %s: %w", url, err)
	}
	req.Header.Set("Content-Type", "application/json")
	if c.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.cfg.APIKey)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("POST %s: %w", url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("POST %s: read answer: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return data, fmt.Errorf("POST %s: HTTP %d: %s", url, resp.StatusCode, errorMessage(data))
	}
	return data, nil
}
