package chat

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/evolm/evolm/internal/thinking"
)

// FuzzRender renders fuzzed conversations: no panic, every user turn's
// content appears, the prompt ends with the generation prompt, and tool
// arguments that are valid JSON render (through PyJSON) as JSON of the same
// value.
func FuzzRender(f *testing.F) {
	f.Add("hello", "<think>why</think>\n\nanswer", "sys", []byte(`{"a": [1, 2.5, "é"], "b": null}`), uint8(0), false)
	f.Add("<tool_response>x</tool_response>", "", "", []byte(`"{\"q\": 1}"`), uint8(7), true)
	f.Add("", "</think>", "<|im_end|>", []byte(`1e400`), uint8(3), false)
	f.Add("a", "b", "c", []byte(`{"k": 1E-7, "n": -0, "big": 123456789012345678901234567890}`), uint8(12), true)
	f.Fuzz(func(t *testing.T, user, assistant, system string, args []byte, shape uint8, noThink bool) {
		var msgs []Message
		if shape&1 != 0 {
			msgs = append(msgs, Message{Role: RoleSystem, Content: system})
		}
		msgs = append(msgs, Message{Role: RoleUser, Content: user})
		if shape&2 != 0 {
			m := Message{Role: RoleAssistant, Content: assistant}
			if shape&4 != 0 {
				m.ToolCalls = []ToolCall{{Type: "function", Function: FunctionCall{Name: "f", Arguments: args}}}
			}
			if shape&16 != 0 {
				m.ReasoningContent = &system
			}
			msgs = append(msgs, m)
			if shape&8 != 0 {
				msgs = append(msgs, Message{Role: RoleTool, Content: system}, Message{Role: RoleUser, Content: user})
			}
		}
		var tools []json.RawMessage
		if shape&32 != 0 {
			tools = []json.RawMessage{args}
		}
		out, err := Render(msgs, Options{AddGenerationPrompt: true, DisableThinking: noThink, Tools: tools})
		argsOK := json.Valid(args)
		if err != nil {
			if argsOK {
				t.Fatalf("Render failed on valid input: %v", err)
			}
			return
		}
		if !strings.Contains(out, "<|im_start|>user\n"+user+"<|im_end|>\n") {
			t.Fatalf("user turn %q missing from %q", user, out)
		}
		end := "<|im_start|>assistant\n"
		if noThink {
			end += "<think>\n\n</think>\n\n"
		}
		if !strings.HasSuffix(out, end) {
			t.Fatalf("prompt %q does not end with the generation prompt", out)
		}
		if argsOK {
			py, err := PyJSON(args)
			if err != nil {
				t.Fatalf("PyJSON(%s): %v", args, err)
			}
			var want, got any
			if json.Unmarshal(args, &want) != nil {
				return
			}
			if err := json.Unmarshal([]byte(py), &got); err != nil {
				// Python writes out-of-range floats as Infinity, which is not JSON.
				if strings.Contains(py, "Infinity") {
					return
				}
				t.Fatalf("PyJSON(%s) = %s is not JSON: %v", args, py, err)
			}
			if !reflect.DeepEqual(want, got) {
				t.Fatalf("PyJSON(%s) = %s changes the value: %v != %v", args, py, got, want)
			}
		}
		_ = thinking.Split(assistant)
	})
}
