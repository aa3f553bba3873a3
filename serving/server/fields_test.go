package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/model/chat"
	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/serving/openai"
	"github.com/evolm/evolm/serving/server"
)

// vllmField is one request field of vLLM 0.10.1.1
// (vllm/entrypoints/openai/protocol.py), transcribed in order with its
// JSON type and default.
type vllmField struct{ Name, Type, Default string }

var vllmCompletionFields = []vllmField{
	{"model", "string|null", "null"},
	{"prompt", "string|[]string|[]int|[][]int|null", "null"},
	{"prompt_embeds", "string(base64 bytes)|[]string|null", "null"},
	{"best_of", "int|null", "null"},
	{"echo", "bool|null", "false"},
	{"frequency_penalty", "num|null", "0.0"},
	{"logit_bias", "map[string]num|null", "null"},
	{"logprobs", "int|null", "null"},
	{"max_tokens", "int|null", "16"},
	{"n", "int", "1"},
	{"presence_penalty", "num|null", "0.0"},
	{"seed", "int|null", "null"},
	{"stop", "string|[]string|null", "[]"},
	{"stream", "bool|null", "false"},
	{"stream_options", "object|null", "null"},
	{"suffix", "string|null", "null"},
	{"temperature", "num|null", "null"},
	{"top_p", "num|null", "null"},
	{"user", "string|null", "null"},
	{"use_beam_search", "bool", "false"},
	{"top_k", "int|null", "null"},
	{"min_p", "num|null", "null"},
	{"repetition_penalty", "num|null", "null"},
	{"length_penalty", "num", "1.0"},
	{"stop_token_ids", "[]int|null", "[]"},
	{"include_stop_str_in_output", "bool", "false"},
	{"ignore_eos", "bool", "false"},
	{"min_tokens", "int", "0"},
	{"skip_special_tokens", "bool", "true"},
	{"spaces_between_special_tokens", "bool", "true"},
	{"truncate_prompt_tokens", "int|null", "null"},
	{"allowed_token_ids", "[]int|null", "null"},
	{"prompt_logprobs", "int|null", "null"},
	{"add_special_tokens", "bool", "true"},
	{"response_format", "object|null", "null"},
	{"guided_json", "string|object|null", "null"},
	{"guided_regex", "string|null", "null"},
	{"guided_choice", "[]string|null", "null"},
	{"guided_grammar", "string|null", "null"},
	{"guided_decoding_backend", "string|null", "null"},
	{"guided_whitespace_pattern", "string|null", "null"},
	{"priority", "int", "0"},
	{"request_id", "string", "<random uuid>"},
	{"logits_processors", "[](string|{qualname,args?,kwargs?})|null", "null"},
	{"return_tokens_as_token_ids", "bool|null", "null"},
	{"cache_salt", "string|null", "null"},
	{"kv_transfer_params", "object|null", "null"},
	{"vllm_xargs", "map[string](string|num)|null", "null"},
}

var vllmChatFields = []vllmField{
	{"messages", "[]object", "required"},
	{"model", "string|null", "null"},
	{"frequency_penalty", "num|null", "0.0"},
	{"logit_bias", "map[string]num|null", "null"},
	{"logprobs", "bool|null", "false"},
	{"top_logprobs", "int|null", "0"},
	{"max_tokens", "int|null", "null"},
	{"max_completion_tokens", "int|null", "null"},
	{"n", "int|null", "1"},
	{"presence_penalty", "num|null", "0.0"},
	{"response_format", "object|null", "null"},
	{"seed", "int|null", "null"},
	{"stop", "string|[]string|null", "[]"},
	{"stream", "bool|null", "false"},
	{"stream_options", "object|null", "null"},
	{"temperature", "num|null", "null"},
	{"top_p", "num|null", "null"},
	{"tools", "[]object|null", "null"},
	{"tool_choice", "string|object|null", "\"none\""},
	{"reasoning_effort", "\"low\"|\"medium\"|\"high\"|null", "null"},
	{"include_reasoning", "bool", "true"},
	{"parallel_tool_calls", "bool|null", "false"},
	{"user", "string|null", "null"},
	{"best_of", "int|null", "null"},
	{"use_beam_search", "bool", "false"},
	{"top_k", "int|null", "null"},
	{"min_p", "num|null", "null"},
	{"repetition_penalty", "num|null", "null"},
	{"length_penalty", "num", "1.0"},
	{"stop_token_ids", "[]int|null", "[]"},
	{"include_stop_str_in_output", "bool", "false"},
	{"ignore_eos", "bool", "false"},
	{"min_tokens", "int", "0"},
	{"skip_special_tokens", "bool", "true"},
	{"spaces_between_special_tokens", "bool", "true"},
	{"truncate_prompt_tokens", "int|null", "null"},
	{"prompt_logprobs", "int|null", "null"},
	{"allowed_token_ids", "[]int|null", "null"},
	{"bad_words", "[]string", "[]"},
	{"echo", "bool", "false"},
	{"add_generation_prompt", "bool", "true"},
	{"continue_final_message", "bool", "false"},
	{"add_special_tokens", "bool", "false"},
	{"documents", "[]map[string]string|null", "null"},
	{"chat_template", "string|null", "null"},
	{"chat_template_kwargs", "object|null", "null"},
	{"mm_processor_kwargs", "object|null", "null"},
	{"guided_json", "string|object|null", "null"},
	{"guided_regex", "string|null", "null"},
	{"guided_choice", "[]string|null", "null"},
	{"guided_grammar", "string|null", "null"},
	{"structural_tag", "string|null", "null"},
	{"guided_decoding_backend", "string|null", "null"},
	{"guided_whitespace_pattern", "string|null", "null"},
	{"priority", "int", "0"},
	{"request_id", "string", "<random uuid>"},
	{"logits_processors", "[](string|{qualname,args?,kwargs?})|null", "null"},
	{"return_tokens_as_token_ids", "bool|null", "null"},
	{"cache_salt", "string|null", "null"},
	{"kv_transfer_params", "object|null", "null"},
	{"vllm_xargs", "map[string](string|num)|null", "null"},
}

// recordingGenerator is a test double: the fake generator, recording the
// last request it was handed.
type recordingGenerator struct {
	fakeGenerator
	mu   sync.Mutex
	last backend.GenerateRequest
}

func (g *recordingGenerator) Generate(ctx context.Context, reqs []backend.GenerateRequest) ([]backend.GenerateResponse, error) {
	g.mu.Lock()
	g.last = reqs[len(reqs)-1]
	g.mu.Unlock()
	out, err := g.fakeGenerator.Generate(ctx, reqs)
	for i := range out {
		if reqs[i].PromptLogProbs && err == nil {
			out[i].PromptTokenIDs = []int{1, 2}
			out[i].PromptLogProbs = []backend.PromptLogProb{{TokenID: 2, Token: "b", LogProb: -1, Rank: 3}}
		}
	}
	return out, err
}

// probe is a field's value in the walk and, for an implemented field, what
// its effect must be: on the request the generator got, or on the answer.
type probe struct {
	value string
	check func(q backend.GenerateRequest, answer string) error
}

func want(ok bool, format string, args ...any) error {
	if ok {
		return nil
	}
	return fmt.Errorf(format, args...)
}

func inAnswer(s string) func(backend.GenerateRequest, string) error {
	return func(_ backend.GenerateRequest, a string) error {
		return want(strings.Contains(a, s), "answer %s lacks %s", a, s)
	}
}

var none = func(backend.GenerateRequest, string) error { return nil }

// probes are the values the walk sends; the schema fields that are the
// request itself (model, prompt, messages) are in every body.
var probes = map[string]probe{
	"model": {`"evolm-test-model"`, inAnswer(`"model":"evolm-test-model"`)},
	"prompt": {`[[5, 6, 7]]`, func(q backend.GenerateRequest, _ string) error {
		return want(slices.Equal(q.PromptTokenIDs, []int{5, 6, 7}), "prompt ids %v", q.PromptTokenIDs)
	}},
	"messages": {`[{"role": "user", "content": "hi"}]`, func(q backend.GenerateRequest, _ string) error {
		return want(strings.Contains(q.Prompt, "hi"), "prompt %q", q.Prompt)
	}},
	"echo": {`true`, inAnswer(`"text":"p x`)},
	"frequency_penalty": {`0.5`, func(q backend.GenerateRequest, _ string) error {
		return want(q.FrequencyPenalty == 0.5, "%v", q.FrequencyPenalty)
	}},
	"presence_penalty": {`-0.5`, func(q backend.GenerateRequest, _ string) error {
		return want(q.PresencePenalty == -0.5, "%v", q.PresencePenalty)
	}},
	"logit_bias": {`{"12": 150}`, func(q backend.GenerateRequest, _ string) error {
		return want(q.LogitBias[12] == 100, "%v (clamped to 100)", q.LogitBias)
	}},
	"logprobs": {`2`, func(q backend.GenerateRequest, a string) error {
		return want(q.TopLogProbs == 2 && strings.Contains(a, `"token_logprobs"`), "%d", q.TopLogProbs)
	}},
	"max_tokens":            {`3`, func(q backend.GenerateRequest, _ string) error { return want(q.MaxTokens == 3, "%d", q.MaxTokens) }},
	"max_completion_tokens": {`3`, func(q backend.GenerateRequest, _ string) error { return want(q.MaxTokens == 3, "%d", q.MaxTokens) }},
	"n":                     {`2`, func(q backend.GenerateRequest, _ string) error { return want(q.N == 2, "%d", q.N) }},
	"seed": {`7`, func(q backend.GenerateRequest, _ string) error {
		return want(q.Seed != nil && *q.Seed == 7, "%v", q.Seed)
	}},
	"stop": {`[" x3"]`, func(q backend.GenerateRequest, _ string) error {
		return want(slices.Equal(q.Stop, []string{" x3"}), "%v", q.Stop)
	}},
	"stream":         {`true`, inAnswer("data: [DONE]")},
	"stream_options": {`{"include_usage": true}`, inAnswer(`"choices":[],"usage"`)},
	"temperature": {`0.5`, func(q backend.GenerateRequest, _ string) error {
		return want(q.Temperature == 0.5, "%v", q.Temperature)
	}},
	"top_p": {`0.5`, func(q backend.GenerateRequest, _ string) error { return want(q.TopP == 0.5, "%v", q.TopP) }},
	"top_k": {`5`, func(q backend.GenerateRequest, _ string) error { return want(q.TopK == 5, "%v", q.TopK) }},
	"min_p": {`0.1`, func(q backend.GenerateRequest, _ string) error { return want(q.MinP == 0.1, "%v", q.MinP) }},
	"repetition_penalty": {`1.3`, func(q backend.GenerateRequest, _ string) error {
		return want(q.RepetitionPenalty == 1.3, "%v", q.RepetitionPenalty)
	}},
	"stop_token_ids": {`[11]`, func(q backend.GenerateRequest, _ string) error {
		return want(slices.Equal(q.StopTokenIDs, []int{11}), "%v", q.StopTokenIDs)
	}},
	"include_stop_str_in_output": {`true`, func(q backend.GenerateRequest, _ string) error { return want(q.IncludeStopStr, "off") }},
	"ignore_eos":                 {`true`, func(q backend.GenerateRequest, _ string) error { return want(q.IgnoreEOS, "off") }},
	"min_tokens":                 {`2`, func(q backend.GenerateRequest, _ string) error { return want(q.MinTokens == 2, "%d", q.MinTokens) }},
	"skip_special_tokens":        {`false`, func(q backend.GenerateRequest, _ string) error { return want(q.KeepSpecialTokens, "off") }},
	"truncate_prompt_tokens": {`2`, func(q backend.GenerateRequest, _ string) error {
		return want(q.TruncatePromptTokens == 2, "%d", q.TruncatePromptTokens)
	}},
	"allowed_token_ids": {`[3, 4]`, func(q backend.GenerateRequest, _ string) error {
		return want(slices.Equal(q.AllowedTokenIDs, []int{3, 4}), "%v", q.AllowedTokenIDs)
	}},
	"prompt_logprobs": {`1`, func(q backend.GenerateRequest, a string) error {
		return want(q.PromptLogProbs && q.PromptTopLogProbs == 1 && strings.Contains(a, `"prompt_logprobs":[null,{"2":`), "%v %d", q.PromptLogProbs, q.PromptTopLogProbs)
	}},
	"response_format": {`{"type": "json_object"}`, func(q backend.GenerateRequest, _ string) error {
		return want(q.Format != nil && q.Format.Type == "json_object", "%+v", q.Format)
	}},
	"guided_json": {`{"type": "boolean"}`, func(q backend.GenerateRequest, _ string) error {
		return want(q.Format != nil && q.Format.Type == "json_schema", "%+v", q.Format)
	}},
	"guided_choice": {`["yes", "no"]`, func(q backend.GenerateRequest, _ string) error {
		return want(q.Format != nil && slices.Equal(q.Format.Choices, []string{"yes", "no"}), "%+v", q.Format)
	}},
	"request_id":                 {`"walk-1"`, inAnswer(`-walk-1"`)},
	"return_tokens_as_token_ids": {`true`, none}, // with logprobs: tokens as token_id:<id> (server_test)
	"top_logprobs":               {`0`, none},
	"tools": {`[{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]`, func(q backend.GenerateRequest, _ string) error {
		return want(strings.Contains(q.Prompt, `"name": "f"`), "prompt %q lacks the tool", q.Prompt)
	}},
	"tool_choice":         {`"none"`, none},
	"parallel_tool_calls": {`true`, none},
	"bad_words": {`["bad"]`, func(q backend.GenerateRequest, _ string) error {
		return want(slices.Equal(q.BadWords, []string{"bad"}), "%v", q.BadWords)
	}},
	"add_generation_prompt":  {`true`, none},
	"continue_final_message": {`false`, none},
	"chat_template_kwargs": {`{"enable_thinking": false}`, func(q backend.GenerateRequest, _ string) error {
		return want(strings.Contains(q.Prompt, "no-think"), "prompt %q: the renderer did not see enable_thinking false", q.Prompt)
	}},
	// Harmless fields, at a value other than vLLM's default.
	"user": {`"u1"`, none}, "length_penalty": {`2.0`, none}, "spaces_between_special_tokens": {`false`, none},
	"add_special_tokens": {`false`, none}, "priority": {`3`, none}, "cache_salt": {`"salt"`, none},
	"guided_decoding_backend": {`"xgrammar"`, none}, "reasoning_effort": {`"low"`, none},
	// Rejected fields, at a value other than vLLM's default.
	"prompt_embeds": {`["AAAA"]`, nil}, "best_of": {`2`, nil}, "suffix": {`"end"`, nil}, "use_beam_search": {`true`, nil},
	"guided_regex": {`"a+"`, nil}, "guided_grammar": {`"root ::= a"`, nil}, "guided_whitespace_pattern": {`" "`, nil},
	"logits_processors": {`["p"]`, nil}, "kv_transfer_params": {`{"k": 1}`, nil}, "vllm_xargs": {`{"k": 1}`, nil},
	"include_reasoning": {`false`, nil}, "documents": {`[{"title": "t"}]`, nil}, "chat_template": {`"{{ x }}"`, nil},
	"mm_processor_kwargs": {`{"k": 1}`, nil}, "structural_tag": {`"{}"`, nil},
}

// chatProbes override probes for the chat endpoint.
var chatProbes = map[string]probe{
	"logprobs": {`true`, func(q backend.GenerateRequest, a string) error {
		return want(q.LogProbs && strings.Contains(a, `"content":[{"token"`), "%v", q.LogProbs)
	}},
	"echo": {`true`, inAnswer(`"content":"Sure x`)}, // with add_generation_prompt false and an assistant message last
}

// TestFieldWalk walks every field of vLLM's CompletionRequest and
// ChatCompletionRequest: the server classifies exactly those fields, in
// vLLM's order; an implemented field reaches the generator or the answer
// (its check); a harmless one is accepted; a rejected one is answered 400
// with its name as param, and accepted at vLLM's default.
func TestFieldWalk(t *testing.T) {
	gen := &recordingGenerator{}
	h, err := server.NewHandler(server.Config{Generator: gen, Model: modelID, RenderChat: thinkingRender, MaxBatch: 1,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	url := startHandler(t, h)
	for _, ep := range []struct {
		path   string
		vllm   []vllmField
		ours   []server.Field
		base   string
		counts map[server.FieldKind]int
	}{
		{"/completions", vllmCompletionFields, server.CompletionFields(), `"prompt": "p", "max_tokens": 4`, map[server.FieldKind]int{}},
		{"/chat/completions", vllmChatFields, server.ChatFields(), `"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4`, map[server.FieldKind]int{}},
	} {
		var names []string
		for _, f := range ep.ours {
			names = append(names, f.Name)
		}
		var vnames []string
		for _, f := range ep.vllm {
			vnames = append(vnames, f.Name)
		}
		if diff := cmp.Diff(vnames, names); diff != "" {
			t.Errorf("%s: fields (-vLLM +evolm serve):\n%s", ep.path, diff)
		}
		for _, f := range ep.ours {
			ep.counts[f.Kind]++
			p, ok := probes[f.Name]
			if cp, over := chatProbes[f.Name]; over && ep.path == "/chat/completions" {
				p = cp
			}
			if !ok {
				t.Errorf("%s: no probe for %s", ep.path, f.Name)
				continue
			}
			if (p.check == nil) != (f.Kind == server.Rejected) {
				t.Errorf("%s: %s is %s, the walk expects otherwise", ep.path, f.Name, f.Kind)
				continue
			}
			body := fieldBody(ep.base, f.Name, p.value)
			if f.Name == "stream_options" || f.Name == "echo" && ep.path == "/completions" {
				body = fieldBody(body, "stream", "true")
				if f.Name == "echo" {
					body = fieldBody(ep.base, f.Name, p.value)
				}
			}
			if f.Name == "echo" && ep.path == "/chat/completions" {
				body = fieldBody(`"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Sure"}], "add_generation_prompt": false, "max_tokens": 4`, f.Name, p.value)
			}
			if f.Name == "return_tokens_as_token_ids" || f.Name == "top_logprobs" {
				body = fieldBody(body, "logprobs", map[string]string{"/completions": "1", "/chat/completions": "true"}[ep.path])
			}
			if f.Name == "guided_json" || f.Name == "guided_choice" || f.Name == "response_format" {
				body = fieldBody(ep.base[:strings.LastIndex(ep.base, `, "max_tokens"`)], f.Name, p.value)
			}
			status, answer, param := post2(t, url+ep.path, body)
			switch f.Kind {
			case server.Rejected:
				if status != http.StatusBadRequest || param != f.Name {
					t.Errorf("%s: rejected %s: %d param %q: %s", ep.path, f.Name, status, param, answer)
				}
				if s, a, _ := post2(t, url+ep.path, fieldBody(ep.base, f.Name, "null")); s != http.StatusOK {
					t.Errorf("%s: %s at null (vLLM's default): %d %s", ep.path, f.Name, s, a)
				}
			default:
				gen.mu.Lock()
				q := gen.last
				gen.mu.Unlock()
				if status != http.StatusOK {
					t.Errorf("%s: %s %s = %s: %d %s", ep.path, f.Kind, f.Name, p.value, status, answer)
				} else if err := p.check(q, answer); err != nil {
					t.Errorf("%s: %s = %s does not take effect: %v", ep.path, f.Name, p.value, err)
				}
			}
		}
		t.Logf("%s: %v", ep.path, ep.counts)
	}
}

// thinkingRender is renderTestChat that also shows tools and
// enable_thinking false in the prompt, so the walk sees them arrive.
func thinkingRender(msgs []chat.Message, opt chat.Options) (string, error) {
	s, _ := renderTestChat(msgs, opt)
	for _, tool := range opt.Tools {
		s = string(tool) + s
	}
	if opt.EnableThinking != nil && !*opt.EnableThinking {
		s += "no-think"
	}
	return s, nil
}

// fieldBody is the JSON object base (its fields, no braces) plus k: v.
func fieldBody(base, k, v string) string {
	base = strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(base, "{"), "}"))
	return "{" + base + `, "` + k + `": ` + v + "}"
}

// post2 posts body and returns the status, the answer and an error's param.
func post2(t *testing.T, url, body string) (int, string, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	param := ""
	var eb openai.ErrorBody
	if resp.StatusCode != http.StatusOK && json.Unmarshal(data, &eb) == nil && eb.Error.Param != nil {
		param = *eb.Error.Param
	}
	return resp.StatusCode, string(data), param
}

// TestPackageDocNamesEveryField: the package doc names every harmless and
// rejected field, so that its lists say what the server does.
func TestPackageDocNamesEveryField(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, fs := range [][]server.Field{server.CompletionFields(), server.ChatFields()} {
		for _, f := range fs {
			if f.Kind != server.Implemented && !strings.Contains(string(doc), f.Name) {
				t.Errorf("the package doc does not name %s field %s", f.Kind, f.Name)
			}
		}
	}
}
