package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// This file holds the OpenAI wire format shared by the client and by
// `evolm serve` (serving/server): the Completions and Chat Completions
// APIs with vLLM's extensions (its sampling controls, prompt log-probs,
// structured output, streaming chunks) and its tokenizer routes.

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

// Prompt is the `prompt` field of a completion request: a string, an
// array of strings, an array of token ids, or an array of such arrays.
// Exactly one of Texts and IDs is set.
type Prompt struct {
	Texts []string
	IDs   [][]int
}

// Len is the number of prompts.
func (p Prompt) Len() int { return len(p.Texts) + len(p.IDs) }

// UnmarshalJSON accepts null, a string, an array of strings, an array of
// token ids or an array of arrays of token ids.
func (p *Prompt) UnmarshalJSON(b []byte) error {
	*p = Prompt{}
	if string(b) == "null" {
		return nil
	}
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		p.Texts = []string{one}
		return nil
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil || len(raw) == 0 {
		return errors.New("prompt: want a string, an array of strings, an array of token ids or an array of arrays of token ids")
	}
	switch c := bytes.TrimSpace(raw[0]); {
	case len(c) > 0 && c[0] == '"':
		if err := json.Unmarshal(b, &p.Texts); err != nil {
			return errors.New("prompt: an array of prompts must be all strings")
		}
	case len(c) > 0 && c[0] == '[':
		if err := json.Unmarshal(b, &p.IDs); err != nil {
			return errors.New("prompt: an array of token-id prompts must be arrays of integers")
		}
	default:
		var ids []int
		if err := json.Unmarshal(b, &ids); err != nil {
			return errors.New("prompt: a token-id prompt must be an array of integers")
		}
		p.IDs = [][]int{ids}
	}
	return nil
}

// MarshalJSON writes one text prompt as a string, one token-id prompt as
// an array of ids, and several as an array.
func (p Prompt) MarshalJSON() ([]byte, error) {
	switch {
	case len(p.IDs) == 1:
		return json.Marshal(p.IDs[0])
	case len(p.IDs) > 1:
		return json.Marshal(p.IDs)
	case len(p.Texts) == 1:
		return json.Marshal(p.Texts[0])
	}
	return json.Marshal(p.Texts)
}

// StreamOptions is the stream_options field.
type StreamOptions struct {
	// IncludeUsage adds a last chunk with the usage (and no choices); nil
	// counts as true, as vLLM reads an empty stream_options.
	IncludeUsage         *bool `json:"include_usage,omitempty"`
	ContinuousUsageStats bool  `json:"continuous_usage_stats,omitempty"`
}

// ResponseFormat is the response_format field.
type ResponseFormat struct {
	Type       string      `json:"type"` // "text", "json_object" or "json_schema"
	JSONSchema *JSONSchema `json:"json_schema,omitempty"`
}

// JSONSchema is response_format.json_schema.
type JSONSchema struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Schema      json.RawMessage `json:"schema,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

// SamplingParams are the sampling fields vLLM's completion and chat
// requests share beyond OpenAI's (nil or zero: vLLM's default).
type SamplingParams struct {
	TopK                    *int               `json:"top_k,omitempty"`
	MinP                    *float64           `json:"min_p,omitempty"`
	RepetitionPenalty       *float64           `json:"repetition_penalty,omitempty"`
	PresencePenalty         *float64           `json:"presence_penalty,omitempty"`
	FrequencyPenalty        *float64           `json:"frequency_penalty,omitempty"`
	LogitBias               map[string]float64 `json:"logit_bias,omitempty"`
	StopTokenIDs            []int              `json:"stop_token_ids,omitempty"`
	IncludeStopStrInOutput  bool               `json:"include_stop_str_in_output,omitempty"`
	IgnoreEOS               bool               `json:"ignore_eos,omitempty"`
	MinTokens               int                `json:"min_tokens,omitempty"`
	SkipSpecialTokens       *bool              `json:"skip_special_tokens,omitempty"`
	TruncatePromptTokens    *int               `json:"truncate_prompt_tokens,omitempty"`
	AllowedTokenIDs         []int              `json:"allowed_token_ids,omitempty"`
	PromptLogprobs          *int               `json:"prompt_logprobs,omitempty"`
	ResponseFormat          *ResponseFormat    `json:"response_format,omitempty"`
	GuidedJSON              json.RawMessage    `json:"guided_json,omitempty"`
	GuidedChoice            []string           `json:"guided_choice,omitempty"`
	RequestID               string             `json:"request_id,omitempty"`
	StreamOptions           *StreamOptions     `json:"stream_options,omitempty"`
	ReturnTokensAsTokenIDs  bool               `json:"return_tokens_as_token_ids,omitempty"`
	SpacesBetweenSpecialTok *bool              `json:"spaces_between_special_tokens,omitempty"`
}

// CompletionRequest is the body of POST /v1/completions.
type CompletionRequest struct {
	Model       string   `json:"model"`
	Prompt      Prompt   `json:"prompt"`
	MaxTokens   *int     `json:"max_tokens,omitempty"`
	Temperature *float64 `json:"temperature,omitempty"`
	TopP        *float64 `json:"top_p,omitempty"`
	N           *int     `json:"n,omitempty"`
	Seed        *int64   `json:"seed,omitempty"`
	Stop        Strings  `json:"stop,omitempty"`
	// Logprobs asks for the log-probs of sampled tokens and this many
	// alternatives per position (0: sampled tokens only).
	Logprobs *int   `json:"logprobs,omitempty"`
	Echo     bool   `json:"echo,omitempty"`
	Stream   bool   `json:"stream,omitempty"`
	User     string `json:"user,omitempty"`
	SamplingParams
}

// ToolCall is one function call of an assistant message (arguments as a
// JSON string, OpenAI's shape).
type ToolCall struct {
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type"` // "function"
	Function FunctionCall `json:"function"`
	// Index is a streamed call's position (chunks only).
	Index *int `json:"index,omitempty"`
}

// FunctionCall names a function and holds its arguments.
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// ChatMessage is one message of a chat request or response.
type ChatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
	// Name, ToolCallID, ToolCalls and ReasoningContent are the OpenAI and
	// vLLM message fields beyond role and content.
	Name             string     `json:"name,omitempty"`
	ToolCallID       string     `json:"tool_call_id,omitempty"`
	ToolCalls        []ToolCall `json:"tool_calls,omitempty"`
	ReasoningContent *string    `json:"reasoning_content,omitempty"`
}

// UnmarshalJSON accepts content as a string or as an array of text parts
// ({"type": "text", "text": ...}), which it joins with newlines, as vLLM's
// "string" content format does.
func (m *ChatMessage) UnmarshalJSON(b []byte) error {
	var raw struct {
		Role             string          `json:"role"`
		Content          json.RawMessage `json:"content"`
		Name             string          `json:"name"`
		ToolCallID       string          `json:"tool_call_id"`
		ToolCalls        []ToolCall      `json:"tool_calls"`
		ReasoningContent *string         `json:"reasoning_content"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*m = ChatMessage{Role: raw.Role, Name: raw.Name, ToolCallID: raw.ToolCallID, ToolCalls: raw.ToolCalls, ReasoningContent: raw.ReasoningContent}
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
	texts := make([]string, len(parts))
	for i, p := range parts {
		if p.Type != "text" {
			return fmt.Errorf("content part %d: type %q, only \"text\" is supported", i, p.Type)
		}
		texts[i] = p.Text
	}
	m.Content = strings.Join(texts, "\n")
	return nil
}

// Tool is one entry of a chat request's tools: kept as the client sent
// it, for the chat template.
type Tool = json.RawMessage

// ChatRequest is the body of POST /v1/chat/completions.
type ChatRequest struct {
	Model               string        `json:"model"`
	Messages            []ChatMessage `json:"messages"`
	MaxTokens           *int          `json:"max_tokens,omitempty"`
	MaxCompletionTokens *int          `json:"max_completion_tokens,omitempty"`
	Temperature         *float64      `json:"temperature,omitempty"`
	TopP                *float64      `json:"top_p,omitempty"`
	N                   *int          `json:"n,omitempty"`
	Seed                *int64        `json:"seed,omitempty"`
	Stop                Strings       `json:"stop,omitempty"`
	Logprobs            bool          `json:"logprobs,omitempty"`
	TopLogprobs         *int          `json:"top_logprobs,omitempty"`
	Stream              bool          `json:"stream,omitempty"`
	User                string        `json:"user,omitempty"`
	Tools               []Tool        `json:"tools,omitempty"`
	// ToolChoice is "none", "auto", "required" or {"type": "function",
	// "function": {"name": ...}}.
	ToolChoice        json.RawMessage `json:"tool_choice,omitempty"`
	ParallelToolCalls *bool           `json:"parallel_tool_calls,omitempty"`
	BadWords          []string        `json:"bad_words,omitempty"`
	Echo              bool            `json:"echo,omitempty"`
	// AddGenerationPrompt is nil for vLLM's default, true.
	AddGenerationPrompt  *bool `json:"add_generation_prompt,omitempty"`
	ContinueFinalMessage bool  `json:"continue_final_message,omitempty"`
	// ChatTemplateKwargs holds enable_thinking.
	ChatTemplateKwargs map[string]json.RawMessage `json:"chat_template_kwargs,omitempty"`
	SamplingParams
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

// CompletionChoice is one sample of a completion. StopReason is vLLM's:
// the stop string or stop token id that ended the sample, else null.
type CompletionChoice struct {
	Index        int                 `json:"index"`
	Text         string              `json:"text"`
	Logprobs     *CompletionLogprobs `json:"logprobs"`
	FinishReason string              `json:"finish_reason"`
	StopReason   any                 `json:"stop_reason"`
	// PromptLogprobs is vLLM's prompt_logprobs: null, then one map per
	// prompt token from token id (as a string) to its log-prob.
	PromptLogprobs []PromptLogprobs `json:"prompt_logprobs,omitempty"`
}

// CompletionChunkChoice is one choice of a completion stream's chunk:
// FinishReason is null before the choice's last chunk.
type CompletionChunkChoice struct {
	Index        int                 `json:"index"`
	Text         string              `json:"text"`
	Logprobs     *CompletionLogprobs `json:"logprobs"`
	FinishReason *string             `json:"finish_reason"`
	StopReason   any                 `json:"stop_reason"`
}

// CompletionChunk is one data event of a completion stream (object
// "text_completion"); the usage chunk has no choices.
type CompletionChunk = Response[CompletionChunkChoice]

// PromptLogprob is one entry of vLLM's prompt_logprobs.
type PromptLogprob struct {
	Logprob      float64 `json:"logprob"`
	Rank         int     `json:"rank"`
	DecodedToken string  `json:"decoded_token"`
}

// PromptLogprobs is one position of prompt_logprobs: a JSON object from
// token id to PromptLogprob, in order (vLLM writes the prompt's own token
// first, then the most likely ones); nil is JSON null (the first
// position).
type PromptLogprobs []PromptLogprobEntry

// PromptLogprobEntry is one token of a PromptLogprobs.
type PromptLogprobEntry struct {
	TokenID int
	PromptLogprob
}

// MarshalJSON writes the entries as an object, in order.
func (p PromptLogprobs) MarshalJSON() ([]byte, error) {
	if p == nil {
		return []byte("null"), nil
	}
	var b bytes.Buffer
	b.WriteByte('{')
	for i, e := range p {
		if i > 0 {
			b.WriteByte(',')
		}
		v, err := json.Marshal(e.PromptLogprob)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, "%q:%s", strconv.Itoa(e.TokenID), v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// UnmarshalJSON reads an object of entries (or null), keeping its order.
func (p *PromptLogprobs) UnmarshalJSON(b []byte) error {
	*p = nil
	if string(bytes.TrimSpace(b)) == "null" {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return errors.New("prompt_logprobs entry: want an object or null")
	}
	out := PromptLogprobs{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		id, err := strconv.Atoi(t.(string))
		if err != nil {
			return fmt.Errorf("prompt_logprobs entry: key %q is not a token id", t)
		}
		e := PromptLogprobEntry{TokenID: id}
		if err := dec.Decode(&e.PromptLogprob); err != nil {
			return err
		}
		out = append(out, e)
	}
	*p = out
	return nil
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
	// PromptLogprobs is a chat answer's vLLM prompt_logprobs.
	PromptLogprobs []PromptLogprobs `json:"prompt_logprobs,omitempty"`
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
	StopReason   any           `json:"stop_reason"`
}

// ChatDelta is what a chat stream's chunk adds to a choice's message.
type ChatDelta struct {
	Role      string     `json:"role,omitempty"`
	Content   *string    `json:"content,omitempty"`
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
}

// ChatChunkChoice is one choice of a chat stream's chunk.
type ChatChunkChoice struct {
	Index        int           `json:"index"`
	Delta        ChatDelta     `json:"delta"`
	Logprobs     *ChatLogprobs `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
	StopReason   any           `json:"stop_reason,omitempty"`
}

// ChatChunk is one data event of a chat stream (object
// "chat.completion.chunk"); the usage chunk has no choices.
type ChatChunk = Response[ChatChunkChoice]

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
	// MaxModelLen is the base model's context length (vLLM's; null for an
	// adapter).
	MaxModelLen *int `json:"max_model_len"`
}

// TokenizeRequest is the body of POST /tokenize: vLLM's completion form
// (prompt) or chat form (messages, with the chat template's fields).
type TokenizeRequest struct {
	Model                string                     `json:"model,omitempty"`
	Prompt               *string                    `json:"prompt,omitempty"`
	Messages             []ChatMessage              `json:"messages,omitempty"`
	AddSpecialTokens     *bool                      `json:"add_special_tokens,omitempty"`
	AddGenerationPrompt  *bool                      `json:"add_generation_prompt,omitempty"`
	ContinueFinalMessage bool                       `json:"continue_final_message,omitempty"`
	ReturnTokenStrs      bool                       `json:"return_token_strs,omitempty"`
	ChatTemplateKwargs   map[string]json.RawMessage `json:"chat_template_kwargs,omitempty"`
	Tools                []Tool                     `json:"tools,omitempty"`
}

// TokenizeResponse answers POST /tokenize.
type TokenizeResponse struct {
	Count       int      `json:"count"`
	MaxModelLen int      `json:"max_model_len"`
	Tokens      []int    `json:"tokens"`
	TokenStrs   []string `json:"token_strs"`
}

// DetokenizeRequest is the body of POST /detokenize.
type DetokenizeRequest struct {
	Model  string `json:"model,omitempty"`
	Tokens []int  `json:"tokens"`
}

// DetokenizeResponse answers POST /detokenize.
type DetokenizeResponse struct {
	Prompt string `json:"prompt"`
}

// VersionResponse answers GET /version.
type VersionResponse struct {
	Version string `json:"version"`
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
