package chat

import (
	"encoding/json"
	"strings"
)

const (
	toolCallOpen  = "<tool_call>"
	toolCallClose = "</tool_call>"
)

// ParsedCall is a function call read from a completion: the function's
// name and its arguments, re-serialized as Python's json.dumps writes them
// (ensure_ascii=False).
type ParsedCall struct {
	Name      string
	Arguments string
}

// ParseToolCalls reads the function calls of a Qwen3 completion, as vLLM's
// hermes tool parser does: every <tool_call>…</tool_call> block (the last
// one may be unclosed) must hold a JSON object with a "name" and
// "arguments"; content is the text before the first block. When the text
// has no block, or a block does not parse, ok is false and the whole text
// is content.
func ParseToolCalls(text string) (content string, calls []ParsedCall, ok bool) {
	first := strings.Index(text, toolCallOpen)
	if first < 0 {
		return text, nil, false
	}
	rest := text[first:]
	for len(rest) > 0 {
		i := strings.Index(rest, toolCallOpen)
		if i < 0 {
			break
		}
		body := rest[i+len(toolCallOpen):]
		if j := strings.Index(body, toolCallClose); j >= 0 {
			rest = body[j+len(toolCallClose):]
			body = body[:j]
		} else {
			rest = ""
		}
		var call struct {
			Name      *string         `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		}
		if err := json.Unmarshal([]byte(strings.TrimSpace(body)), &call); err != nil || call.Name == nil {
			return text, nil, false
		}
		args := "null"
		if len(call.Arguments) > 0 {
			var err error
			if args, err = PyJSON(call.Arguments); err != nil {
				return text, nil, false
			}
		}
		calls = append(calls, ParsedCall{Name: *call.Name, Arguments: args})
	}
	return text[:first], calls, true
}
