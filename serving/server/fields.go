package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
)

// FieldKind says what `evolm serve` does with a request field.
type FieldKind string

const (
	// Implemented fields do what vLLM does with them.
	Implemented FieldKind = "implemented"
	// Harmless fields are accepted because they cannot change the answer
	// here; Field.Note says why.
	Harmless FieldKind = "harmless"
	// Rejected fields get a 400 naming them unless they hold vLLM's
	// default (Field.Accept), which changes nothing.
	Rejected FieldKind = "rejected"
)

// Field is one request field of an endpoint.
type Field struct {
	Name string
	Kind FieldKind
	Note string
	// Accept lists, for a rejected field, the JSON values (besides null)
	// that are vLLM's default and so accepted.
	Accept []string
}

func impl(name string) Field { return Field{Name: name, Kind: Implemented} }

func harmless(name, note string) Field { return Field{Name: name, Kind: Harmless, Note: note} }

func rejected(name, note string, accept ...string) Field {
	return Field{Name: name, Kind: Rejected, Note: note, Accept: accept}
}

// Notes shared by both endpoints.
const (
	noteSpaces  = "only slow tokenizers put spaces between special tokens; evolm's is a fast byte-level BPE, whose decoding this does not change"
	noteSpecial = "evolm's tokenizers add no special tokens (their post-processor is none or ByteLevel), so the prompt's tokens are the same either way"
	noteLength  = "applies to beam search only, which is off"
	notePrio    = "orders the queue, not what a request computes"
	noteSalt    = "isolates a request's prefix-cache entries; evolm serve keeps no prefix cache across requests"
	noteUser    = "an end-user id for the provider's records; it does not reach the model"
	noteBackend = "names vLLM's guided-decoding library; evolm has one, and any library yields a value of the same grammar"
)

// sampling are the fields both endpoints share, in vLLM's order after
// their OpenAI ones.
func sampling() []Field {
	return []Field{
		rejected("best_of", "evolm samples n completions and returns them all (vLLM's V1 engine rejects best_of too)", "1"),
		rejected("use_beam_search", "evolm does not implement beam search", "false"),
		impl("top_k"), impl("min_p"), impl("repetition_penalty"),
		harmless("length_penalty", noteLength),
		impl("stop_token_ids"), impl("include_stop_str_in_output"), impl("ignore_eos"), impl("min_tokens"),
		impl("skip_special_tokens"),
		harmless("spaces_between_special_tokens", noteSpaces),
		impl("truncate_prompt_tokens"),
	}
}

// extras are vLLM's extra parameters both endpoints share.
func extras() []Field {
	return []Field{
		impl("guided_json"),
		rejected("guided_regex", "evolm's constrained decoding takes JSON schemas and choices, not regular expressions"),
		impl("guided_choice"),
		rejected("guided_grammar", "evolm's constrained decoding takes JSON schemas and choices, not grammars"),
		harmless("guided_decoding_backend", noteBackend),
		rejected("guided_whitespace_pattern", "evolm's constrained decoding allows whitespace runs of at most 24 characters and takes no pattern"),
		harmless("priority", notePrio),
		impl("request_id"),
		rejected("logits_processors", "custom logits processors run Python code; evolm runs none"),
		impl("return_tokens_as_token_ids"),
		harmless("cache_salt", noteSalt),
		rejected("kv_transfer_params", "evolm does not disaggregate prefill and decode"),
		rejected("vllm_xargs", "vLLM plugin arguments; evolm has no plugins"),
	}
}

// CompletionFields are the fields of POST /v1/completions: every field of
// vLLM 0.10.1.1's CompletionRequest, in its order.
func CompletionFields() []Field {
	fs := []Field{
		impl("model"), impl("prompt"),
		rejected("prompt_embeds", "evolm takes prompts as text or token ids, not embeddings"),
	}
	fs = append(fs, sampling()[0])
	fs = append(fs, impl("echo"), impl("frequency_penalty"), impl("logit_bias"), impl("logprobs"), impl("max_tokens"), impl("n"),
		impl("presence_penalty"), impl("seed"), impl("stop"), impl("stream"), impl("stream_options"),
		rejected("suffix", "evolm does not fill in the middle (vLLM rejects suffix too)"),
		impl("temperature"), impl("top_p"), harmless("user", noteUser))
	fs = append(fs, sampling()[1:]...)
	fs = append(fs, impl("allowed_token_ids"), impl("prompt_logprobs"),
		harmless("add_special_tokens", noteSpecial), impl("response_format"))
	return append(fs, extras()...)
}

// ChatFields are the fields of POST /v1/chat/completions: every field of
// vLLM 0.10.1.1's ChatCompletionRequest, in its order.
func ChatFields() []Field {
	fs := []Field{
		impl("messages"), impl("model"), impl("frequency_penalty"), impl("logit_bias"), impl("logprobs"), impl("top_logprobs"),
		impl("max_tokens"), impl("max_completion_tokens"), impl("n"), impl("presence_penalty"), impl("response_format"),
		impl("seed"), impl("stop"), impl("stream"), impl("stream_options"), impl("temperature"), impl("top_p"),
		impl("tools"), impl("tool_choice"),
		harmless("reasoning_effort", "Qwen3's chat template does not read it"),
		rejected("include_reasoning", "evolm has no reasoning parser: the reasoning stays in the content, so it cannot be left out", "true"),
		impl("parallel_tool_calls"),
		harmless("user", noteUser),
	}
	fs = append(fs, sampling()...)
	fs = append(fs, impl("prompt_logprobs"), impl("allowed_token_ids"), impl("bad_words"),
		impl("echo"), impl("add_generation_prompt"), impl("continue_final_message"),
		harmless("add_special_tokens", noteSpecial),
		rejected("documents", "Qwen3's chat template has no place for documents: they would be dropped"),
		rejected("chat_template", "evolm renders the Qwen3 chat template of its own and runs no other Jinja template"),
		impl("chat_template_kwargs"),
		rejected("mm_processor_kwargs", "evolm serves text-only models"),
	)
	ex := extras()
	return append(fs, append(ex[:4:4], append([]Field{rejected("structural_tag", "evolm's constrained decoding takes JSON schemas and choices, not structural tags")}, ex[4:]...)...)...)
}

// fieldTable indexes fields by name.
type fieldTable map[string]Field

func index(fs []Field) fieldTable {
	t := make(fieldTable, len(fs))
	for _, f := range fs {
		t[f.Name] = f
	}
	return t
}

var (
	completionTable = index(CompletionFields())
	chatTable       = index(ChatFields())
)

// nested are the keys of the object fields, and of the objects of the
// array fields ("messages[]"), that evolm serve knows: others are refused
// as unknown top-level fields are.
var nested = map[string][]string{
	"stream_options":              {"include_usage", "continuous_usage_stats"},
	"response_format":             {"type", "json_schema"},
	"response_format.json_schema": {"name", "description", "schema", "strict"},
	"chat_template_kwargs":        {"enable_thinking"},
	"messages[]":                  {"role", "content", "name", "tool_calls", "tool_call_id", "reasoning_content"},
	"messages[].tool_calls[]":     {"id", "type", "function"},
	"tools[]":                     {"type", "function"},
	"tools[].function":            {"name", "description", "parameters", "strict"},
}

// checkNested applies nested to field k's value v (param: its name in
// errors).
func checkNested(key, param string, v json.RawMessage) error {
	if keys, ok := nested[key]; ok {
		if err := checkKeys(v, param, keys...); err != nil {
			return err
		}
		var m map[string]json.RawMessage
		_ = json.Unmarshal(v, &m)
		for sub, sv := range m {
			if err := checkNested(key+"."+sub, param+"."+sub, sv); err != nil {
				return err
			}
		}
	}
	if _, ok := nested[key+"[]"]; ok {
		var items []json.RawMessage
		if err := json.Unmarshal(v, &items); err != nil {
			if string(bytes.TrimSpace(v)) == "null" {
				return nil
			}
			return badRequest(param, "%s: want an array", param)
		}
		for i, it := range items {
			if err := checkNested(key+"[]", fmt.Sprintf("%s[%d]", param, i), it); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkFields refuses a body with a field the table does not know (not in
// vLLM's schema, at the top or nested), or a rejected field not at its
// default; it reports the first by name order, so the answer does not
// depend on map order.
func checkFields(body []byte, t fieldTable) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		return badRequest("", "invalid JSON body: want an object: %v", err)
	}
	names := make([]string, 0, len(raw))
	for k := range raw {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		f, ok := t[k]
		if !ok {
			return badRequest(k, "field %q is not a field of this endpoint in the OpenAI or vLLM API; evolm does not support it", k)
		}
		if f.Kind == Rejected && !atDefault(raw[k], f.Accept) {
			return badRequest(k, "field %q is not supported by evolm serve: %s", k, f.Note)
		}
		if err := checkNested(k, k, raw[k]); err != nil {
			return err
		}
	}
	return nil
}

// atDefault reports whether v is null, an empty array or object, or one of
// the accepted values.
func atDefault(v json.RawMessage, accept []string) bool {
	v = bytes.TrimSpace(v)
	switch string(v) {
	case "null", "[]", "{}":
		return true
	}
	var got any
	if err := json.Unmarshal(v, &got); err != nil {
		return false
	}
	return slices.ContainsFunc(accept, func(a string) bool {
		var want any
		return json.Unmarshal([]byte(a), &want) == nil && fmt.Sprint(want) == fmt.Sprint(got)
	})
}

// checkKeys refuses keys of a nested object (param names it) outside
// allowed.
func checkKeys(raw json.RawMessage, param string, allowed ...string) error {
	if len(raw) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return badRequest(param, "%s: want an object", param)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !slices.Contains(allowed, k) {
			return badRequest(param+"."+k, "field %s.%s is not supported by evolm serve (known: %v)", param, k, allowed)
		}
	}
	return nil
}
