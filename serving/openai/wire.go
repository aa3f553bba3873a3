package openai

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
)

// This file holds the OpenAI wire format shared by the client and by
// model/serve: the subset of the Completions and Chat Completions APIs that
// vLLM, SGLang and llama.cpp implement, plus the common `top_k` extension.

// Strings is a JSON field that may be a string or an array of strings (the
// `prompt` and `stop` fields). It marshals a single element as a plain string.
type Strings []string

// UnmarshalJSON accepts null, a string or an array of strings.
func (s *Strings) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*s = nil
		return nil
	}
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*s = Strings{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return errors.New("want a string or an array of strings")
	}
	*s = many
	return nil
}

// MarshalJSON writes one element as a string and several as an array.
func (s Strings) MarshalJSON() ([]byte, error) {
	if len(s) == 1 {
		return json.Marshal(s[0])
	}
	return json.Marshal([]string(s))
}

// CompletionRequest is the body of POST /v1/completions.
type CompletionRequest struct {
	Model       string   `json:"model"`
	Prompt      Strings  `json:"prompt"`
	MaxTokens   *int     `json:"max_tokens,omitempty"`
	Temperature *float64 `json:"temperature,omitempty"`
	TopP        *float64 `json:"top_p,omitempty"`
	TopK        *int     `json:"top_k,omitempty"`
	N           *int     `json:"n,omitempty"`
	Seed        *int64   `json:"seed,omitempty"`
	Stop        Strings  `json:"stop,omitempty"`
	// Logprobs asks for the log-probs of sampled tokens and this many
	// alternatives per position (0: sampled tokens only).
	Logprobs *int   `json:"logprobs,omitempty"`
	Echo     bool   `json:"echo,omitempty"`
	Stream   bool   `json:"stream,omitempty"`
	User     string `json:"user,omitempty"`
	// ReturnTokensAsTokenIDs is vLLM's extension: every token string of
	// the log-prob block is "token_id:<id>" instead of its text.
	ReturnTokensAsTokenIDs bool `json:"return_tokens_as_token_ids,omitempty"`
}

// ChatMessage is one message of a chat request or response.
type ChatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// UnmarshalJSON accepts content as a string or as an array of text parts
// ({"type": "text", "text": ...}), which it joins.
func (m *ChatMessage) UnmarshalJSON(b []byte) error {
	var raw struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	m.Role, m.Content = raw.Role, ""
	if len(raw.Content) == 0 || string(raw.Content) == "null" {
		return nil
	}
	if err := json.Unmarshal(raw.Content, &m.Content); err == nil {
		return nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw.Content, &parts); err != nil {
		return errors.New("content: want a string or an array of text parts")
	}
	for i, p := range parts {
		if p.Type != "text" {
			return fmt.Errorf("content part %d: type %q, only \"text\" is supported", i, p.Type)
		}
		m.Content += p.Text
	}
	return nil
}

// ChatRequest is the body of POST /v1/chat/completions.
type ChatRequest struct {
	Model               string        `json:"model"`
	Messages            []ChatMessage `json:"messages"`
	MaxTokens           *int          `json:"max_tokens,omitempty"`
	MaxCompletionTokens *int          `json:"max_completion_tokens,omitempty"`
	Temperature         *float64      `json:"temperature,omitempty"`
	TopP                *float64      `json:"top_p,omitempty"`
	TopK                *int          `json:"top_k,omitempty"`
	N                   *int          `json:"n,omitempty"`
	Seed                *int64        `json:"seed,omitempty"`
	Stop                Strings       `json:"stop,omitempty"`
	Logprobs            bool          `json:"logprobs,omitempty"`
	TopLogprobs         *int          `json:"top_logprobs,omitempty"`
	Stream              bool          `json:"stream,omitempty"`
	User                string        `json:"user,omitempty"`
	// ReturnTokensAsTokenIDs: as CompletionRequest's.
	ReturnTokensAsTokenIDs bool `json:"return_tokens_as_token_ids,omitempty"`
}

// Usage counts tokens of one response.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// CompletionLogprobs is the legacy log-prob block of a completion choice.
type CompletionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []*float64           `json:"token_logprobs"` // null for an echoed first prompt token
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

// CompletionChoice is one sample of a completion.
type CompletionChoice struct {
	Index        int                 `json:"index"`
	Text         string              `json:"text"`
	Logprobs     *CompletionLogprobs `json:"logprobs"`
	FinishReason string              `json:"finish_reason"`
}

// Response is the body answering a completion (choices C =
// CompletionChoice, object "text_completion") or a chat completion (C =
// ChatChoice, object "chat.completion").
type Response[C any] struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []C    `json:"choices"`
	Usage   *Usage `json:"usage,omitempty"`
	// Metadata is SGLang's: weight_version names the weights that answered
	// (the label of the last /update_weights_from_disk, "default" before).
	Metadata *ResponseMetadata `json:"metadata,omitempty"`
}

// ResponseMetadata is the metadata block of an SGLang answer.
type ResponseMetadata struct {
	WeightVersion string `json:"weight_version,omitempty"`
}

// CompletionResponse is the body answering POST /v1/completions.
type CompletionResponse = Response[CompletionChoice]

// TopLogprob is one alternative in the chat log-prob shape.
type TopLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// TokenLogprob is one sampled token in the chat log-prob shape.
type TokenLogprob struct {
	Token       string       `json:"token"`
	Logprob     float64      `json:"logprob"`
	Bytes       []int        `json:"bytes"`
	TopLogprobs []TopLogprob `json:"top_logprobs"`
}

// ChatLogprobs is the log-prob block of a chat choice.
type ChatLogprobs struct {
	Content []TokenLogprob `json:"content"`
}

// ChatChoice is one sample of a chat completion.
type ChatChoice struct {
	Index        int           `json:"index"`
	Message      ChatMessage   `json:"message"`
	Logprobs     *ChatLogprobs `json:"logprobs"`
	FinishReason string        `json:"finish_reason"`
}

// ChatResponse is the body answering POST /v1/chat/completions.
type ChatResponse = Response[ChatChoice]

// Model is one entry of GET /v1/models.
type Model struct {
	ID      string `json:"id"`
	Object  string `json:"object"` // "model"
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	// Root and Parent are vLLM's: a LoRA adapter's root is its path and its
	// parent the base model's id; the base model's root is its path.
	Root   string  `json:"root,omitempty"`
	Parent *string `json:"parent,omitempty"`
}

// ModelList is the body answering GET /v1/models.
type ModelList struct {
	Object string  `json:"object"` // "list"
	Data   []Model `json:"data"`
}

// ScoreBody is the body of POST /v1/evolm/score, an extension of `evolm
// serve` (not part of the OpenAI API) that exposes backend.Scorer: the
// next-token log-probs of each candidate after prefix+suffixes[k], with the
// prefix computed once.
type ScoreBody struct {
	Model      string   `json:"model"`
	Prefix     string   `json:"prefix"`
	Suffixes   []string `json:"suffixes"`
	Candidates []string `json:"candidates"`
	// AmongCandidates asks for log-probs among the distinct candidates
	// (backend.ScoreRequest.AmongCandidates); false or absent: over the
	// whole vocabulary.
	AmongCandidates bool `json:"among_candidates,omitempty"`
}

// ScoreAnswer answers POST /v1/evolm/score: Logprobs[k][j] is candidate j
// after suffix k, with -Inf sent as MinLogprob.
type ScoreAnswer struct {
	Object   string      `json:"object"` // "evolm.score"
	Model    string      `json:"model"`
	Logprobs [][]float64 `json:"logprobs"`
}

// ErrorBody is the OpenAI error shape: {"error": {...}}.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail describes an API error.
type ErrorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// MinLogprob stands in for -Inf on the wire, where JSON has no infinity;
// vLLM uses the same value. The client reads values at or below it as -Inf.
const MinLogprob = -9999.0

// WireLogprob maps a log-prob to a JSON-safe number.
func WireLogprob(lp float64) float64 {
	if math.IsNaN(lp) || lp <= MinLogprob {
		return MinLogprob
	}
	return lp
}

func fromWireLogprob(lp float64) float64 {
	if lp <= MinLogprob {
		return math.Inf(-1)
	}
	return lp
}
