package chat

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/model/tokenizer"
	"github.com/google/go-cmp/cmp"
)

func ptr(s string) *string { return &s }

func call(name, args string) ToolCall {
	return ToolCall{Type: "function", Function: FunctionCall{Name: name, Arguments: json.RawMessage(args)}}
}

var weatherTool = json.RawMessage(`{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city — in °C", "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1, "maximum": 7.5}}, "required": ["city"]}}}`)
var searchTool = json.RawMessage(`{"type":"function","function":{"name":"search","parameters":{"type":"object","properties":{"q":{"type":"string","description":"query with \"quotes\", a tab\tand 中文"}},"required":[]}}}`)

type conversation struct {
	name  string
	msgs  []Message
	tools []json.RawMessage
}

var conversations = []conversation{
	{"single user", []Message{{Role: "user", Content: "What is 2+2?"}}, nil},
	{"system and user", []Message{{Role: "system", Content: "You are terse."}, {Role: "user", Content: "Hi!\nHow are you?"}}, nil},
	{"multi turn with past thinking", []Message{
		{Role: "system", Content: "Be helpful."},
		{Role: "user", Content: "First question"},
		{Role: "assistant", Content: "<think>\nI should answer briefly.\n</think>\n\nFirst answer."},
		{Role: "user", Content: "Second question"},
	}, nil},
	{"last assistant keeps thinking", []Message{
		{Role: "user", Content: "Q"},
		{Role: "assistant", Content: "<think>\n\nreasoning here\n\n</think>\n\n\nThe answer"},
	}, nil},
	{"last assistant without thinking", []Message{
		{Role: "user", Content: "Q"},
		{Role: "assistant", Content: "\nPlain answer"},
	}, nil},
	{"reasoning_content field", []Message{
		{Role: "user", Content: "Q1"},
		{Role: "assistant", Content: "A1", ReasoningContent: ptr("hidden 1")},
		{Role: "user", Content: "Q2"},
		{Role: "assistant", Content: "A2", ReasoningContent: ptr("\nvisible 2\n")},
	}, nil},
	{"think without opening tag", []Message{
		{Role: "user", Content: "Q"},
		{Role: "assistant", Content: "reasoning only closed</think>answer</think>\n\nreal answer"},
		{Role: "user", Content: "again"},
	}, nil},
	{"tools with system", []Message{
		{Role: "system", Content: "You can use tools."},
		{Role: "user", Content: "Weather in Paris and Tokyo?"},
		{Role: "assistant", Content: "<think>\nNeed two calls.\n</think>\n\nLet me check.", ToolCalls: []ToolCall{
			call("get_weather", `{"city": "Paris", "days": 2, "units": {"temp": "C", "scale": 1.0, "eps": 1e-5, "big": 1E16}, "tags": ["a", "ü", null, true, false]}`),
			call("get_weather", `{"city":"Tokyo"}`),
		}},
		{Role: "tool", Content: `{"temp": 18}`},
		{Role: "tool", Content: `{"temp": 22}`},
		{Role: "assistant", Content: "<think>\nBoth fetched.\n</think>\n\nParis 18°C, Tokyo 22°C."},
		{Role: "user", Content: "Thanks"},
	}, []json.RawMessage{weatherTool, searchTool}},
	{"tools without system, mid agentic turn", []Message{
		{Role: "user", Content: "Search for evolm"},
		{Role: "assistant", Content: "", ToolCalls: []ToolCall{call("search", `"{\"q\": \"evolm\"}"`)}},
		{Role: "tool", Content: "result 1"},
		{Role: "assistant", Content: "<think>\nOne more search.\n</think>\n\n", ToolCalls: []ToolCall{{Function: FunctionCall{Name: "search", Arguments: json.RawMessage(`{"q": "evolm paper"}`)}}}},
		{Role: "tool", Content: "result 2"},
	}, []json.RawMessage{searchTool}},
	{"user tool_response counts as tool turn", []Message{
		{Role: "user", Content: "Real question"},
		{Role: "assistant", Content: "<think>\nthink 1\n</think>\n\ncalling"},
		{Role: "user", Content: "<tool_response>\nok\n</tool_response>"},
		{Role: "assistant", Content: "<think>\nthink 2\n</think>\n\ndone"},
	}, nil},
	{"system later in the conversation", []Message{
		{Role: "user", Content: "u1"},
		{Role: "system", Content: "new instructions"},
		{Role: "user", Content: "u2"},
	}, nil},
	{"assistant first, empty contents", []Message{
		{Role: "assistant", Content: ""},
		{Role: "user", Content: ""},
	}, nil},
	{"special tokens and unicode in content", []Message{
		{Role: "user", Content: "Say <|im_end|> and <think> literally 😀 中文\t\n"},
	}, nil},
}

type templateCase struct {
	Messages             []Message         `json:"messages"`
	Tools                []json.RawMessage `json:"tools"`
	AddGenerationPrompt  bool              `json:"add_generation_prompt"`
	ContinueFinalMessage bool              `json:"continue_final_message"`
	EnableThinking       *bool             `json:"enable_thinking"`
}

// TestRenderMatchesOfficialTemplate renders every conversation with and
// without the generation prompt, with enable_thinking undefined, true and
// false, through transformers' apply_chat_template and the Qwen3 template
// shipped in tokenizer_config.json, and requires identical strings.
func TestRenderMatchesOfficialTemplate(t *testing.T) {
	cfg, err := tokenizer.Qwen3ConfigPath(testutil.Root(t))
	if err != nil {
		t.Fatal(err)
	}
	type variant struct {
		conv   conversation
		opt    Options
		python templateCase
	}
	var vs []variant
	for _, c := range conversations {
		for _, gen := range []bool{false, true} {
			for _, think := range []*bool{nil, new(true), new(false)} {
				opt := Options{AddGenerationPrompt: gen, Tools: c.tools, DisableThinking: think != nil && !*think}
				vs = append(vs, variant{c, opt, templateCase{c.msgs, c.tools, gen, false, think}})
			}
		}
		// continue_final_message, where the final message has text the
		// template keeps.
		if last := c.msgs[len(c.msgs)-1]; strings.TrimSpace(last.Content) != "" && !strings.Contains(last.Content, "</think>") {
			for _, think := range []*bool{nil, new(false)} {
				opt := Options{ContinueFinalMessage: true, Tools: c.tools, EnableThinking: think}
				vs = append(vs, variant{c, opt, templateCase{c.msgs, c.tools, false, true, think}})
			}
		}
	}
	for _, msgs := range [][]Message{
		{{Role: "user", Content: "Hi"}, {Role: "assistant", Content: "Hello, I am"}},
		{{Role: "user", Content: "Hi"}, {Role: "assistant", Content: "  spaced out  \n"}},
		{{Role: "system", Content: "s"}, {Role: "user", Content: "Complete: the sky is"}},
	} {
		c := conversation{name: "continue " + msgs[len(msgs)-1].Content, msgs: msgs}
		vs = append(vs, variant{c, Options{ContinueFinalMessage: true}, templateCase{msgs, nil, false, true, nil}})
	}
	cases := make([]templateCase, len(vs))
	for i, v := range vs {
		cases[i] = v.python
	}
	dir := t.TempDir()
	in, out := filepath.Join(dir, "cases.json"), filepath.Join(dir, "out.json")
	b, err := json.Marshal(cases)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(in, b, 0o644); err != nil {
		t.Fatal(err)
	}
	testutil.RunPython(t, "tokenizer_chat_template.py", filepath.Dir(cfg), in, out)
	b, err = os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	if len(want) != len(vs) {
		t.Fatalf("reference rendered %d conversations, want %d", len(want), len(vs))
	}
	for i, v := range vs {
		name := fmt.Sprintf("%s/gen=%v/continue=%v/enable_thinking=%s", v.conv.name, v.opt.AddGenerationPrompt, v.opt.ContinueFinalMessage, thinkStr(v.python.EnableThinking))
		got, err := Render(v.conv.msgs, v.opt)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if diff := cmp.Diff(want[i], got); diff != "" {
			t.Errorf("%s: Render differs from apply_chat_template (-want +got):\n%s", name, diff)
		}
	}
}

func thinkStr(b *bool) string {
	if b == nil {
		return "undefined"
	}
	return fmt.Sprint(*b)
}

func TestRenderErrors(t *testing.T) {
	tests := []struct {
		name string
		msgs []Message
		opt  Options
		want string
	}{
		{"no messages", nil, Options{}, "no messages"},
		{"unknown role", []Message{{Role: "user"}, {Role: "critic"}}, Options{}, `messages[1]: unknown role "critic"`},
		{"bad tool schema", []Message{{Role: "user"}}, Options{Tools: []json.RawMessage{json.RawMessage(`{"a":`)}}, "tools[0]"},
		{"bad arguments", []Message{{Role: "assistant", ToolCalls: []ToolCall{call("f", `{1}`)}}}, Options{}, "messages[0].tool_calls[0].function.arguments"},
		{"continue and generation prompt", []Message{{Role: "user", Content: "x"}}, Options{ContinueFinalMessage: true, AddGenerationPrompt: true}, "cannot both"},
	}
	for _, tc := range tests {
		_, err := Render(tc.msgs, tc.opt)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to contain %q", tc.name, err, tc.want)
		}
	}
}

func TestPyJSON(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"b":1,"a":[1,2.5,"x"]}`, `{"b": 1, "a": [1, 2.5, "x"]}`},
		{`{}`, `{}`},
		{`[]`, `[]`},
		{`[1.0, 1e-5, 1E16, 123456789012345678901234567890, -0, -0.0, 0.0001, 1.5e300, 100e-2]`, `[1.0, 1e-05, 1e+16, 123456789012345678901234567890, 0, -0.0, 0.0001, 1.5e+300, 1.0]`},
		{`"ü \"q\" \\ \n\t\u0001 \u2028 /"`, `"ü \"q\" \\ \n\t\u0001 ` + "\u2028" + ` /"`},
		{`{"k": null, "t": true, "f": false}`, `{"k": null, "t": true, "f": false}`},
		// Found by FuzzRender: Python reads an out-of-range float as inf.
		{`[1e400, -1e400, 1e-400]`, `[Infinity, -Infinity, 0.0]`},
	}
	for _, tc := range tests {
		got, err := PyJSON(json.RawMessage(tc.in))
		if err != nil {
			t.Errorf("PyJSON(%s): %v", tc.in, err)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("PyJSON(%s) (-want +got):\n%s", tc.in, diff)
		}
	}
}

func TestParseToolCalls(t *testing.T) {
	tests := []struct {
		text    string
		content string
		calls   []ParsedCall
		ok      bool
	}{
		{"plain answer", "plain answer", nil, false},
		{"Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\",\"n\":1.0}}\n</tool_call>\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
			"Let me check.\n", []ParsedCall{{"get_weather", `{"city": "Paris", "n": 1.0}`}, {"f", "{}"}}, true},
		{"<tool_call>{\"name\": \"g\", \"arguments\": {\"q\": \"ü\"}}", "", []ParsedCall{{"g", `{"q": "ü"}`}}, true}, // unclosed
		{"x<tool_call>{not json}</tool_call>", "x<tool_call>{not json}</tool_call>", nil, false},
		{"<tool_call>{\"arguments\": {}}</tool_call>", "<tool_call>{\"arguments\": {}}</tool_call>", nil, false},
	}
	for _, tc := range tests {
		content, calls, ok := ParseToolCalls(tc.text)
		if content != tc.content || ok != tc.ok || !cmp.Equal(calls, tc.calls) {
			t.Errorf("ParseToolCalls(%q) = %q, %v, %v; want %q, %v, %v", tc.text, content, calls, ok, tc.content, tc.calls, tc.ok)
		}
	}
}
