// Package chat renders conversations with Qwen3's ChatML chat template and
// splits thinking from answers in completions.
//
// Render reproduces, character for character, the official Jinja template
// that ships in Qwen3's tokenizer_config.json, as transformers'
// apply_chat_template(tokenize=False) renders it; the tests compare the two
// on many conversations. In short:
//
//	<|im_start|>system\n{system}<|im_end|>\n
//	<|im_start|>user\n{content}<|im_end|>\n
//	<|im_start|>assistant\n<think>\n{reasoning}\n</think>\n\n{answer}<|im_end|>\n
//	<|im_start|>assistant\n                      (AddGenerationPrompt)
//	<think>\n\n</think>\n\n                      (and DisableThinking)
//
// Assistant turns before the last real user query lose their reasoning, as
// in the template; those after it (the current agentic turn) keep it. Tool
// results are grouped into one user turn of <tool_response> blocks, and with
// tools the system turn lists their JSON schemas.
//
// Where the template would silently render nothing (an unknown role) or
// fail (no messages), Render returns an error instead.
package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode"

	"github.com/evolm/evolm/internal/thinking"
)

// Roles the template knows.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// Message is one chat turn, in the OpenAI/HF field layout.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
	// ReasoningContent, when set on an assistant turn, is its thinking; when
	// nil the thinking is parsed out of Content's <think>…</think>.
	ReasoningContent *string    `json:"reasoning_content,omitempty"`
	ToolCalls        []ToolCall `json:"tool_calls,omitempty"`
}

// ToolCall is one function call made by an assistant turn.
type ToolCall struct {
	Type     string       `json:"type,omitempty"` // "function"
	Function FunctionCall `json:"function"`
}

// FunctionCall names the function and its arguments: a JSON object, or a
// JSON string holding already-serialized arguments (inserted verbatim).
type FunctionCall struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// Options adjust Render.
type Options struct {
	// AddGenerationPrompt appends the opening of an assistant turn.
	AddGenerationPrompt bool
	// ContinueFinalMessage ends the rendering inside the final message,
	// right after its content, so that generation continues it, as
	// transformers' apply_chat_template(continue_final_message=True) cuts
	// it. It excludes AddGenerationPrompt.
	ContinueFinalMessage bool
	// DisableThinking is the template's enable_thinking=False: the
	// generation prompt then carries an empty <think>\n\n</think>\n\n.
	// EnableThinking, when set, wins over it (a request's
	// chat_template_kwargs.enable_thinking over a server's default).
	DisableThinking bool
	EnableThinking  *bool
	// Tools are JSON schemas of callable functions, listed in the system turn.
	Tools []json.RawMessage
}

const (
	imStart = "<|im_start|>"
	imEnd   = "<|im_end|>"

	toolsHeader = "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>"
	toolsFooter = "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
)

// Render renders msgs with the Qwen3 chat template.
func Render(msgs []Message, opt Options) (string, error) {
	if len(msgs) == 0 {
		return "", errors.New("chat: no messages")
	}
	if opt.ContinueFinalMessage && opt.AddGenerationPrompt {
		return "", errors.New("chat: continue_final_message and add_generation_prompt cannot both be set")
	}
	for i, m := range msgs {
		switch m.Role {
		case RoleSystem, RoleUser, RoleAssistant, RoleTool:
		default:
			return "", fmt.Errorf("chat: messages[%d]: unknown role %q", i, m.Role)
		}
	}
	var b strings.Builder
	if len(opt.Tools) > 0 {
		b.WriteString(imStart + "system\n")
		if msgs[0].Role == RoleSystem {
			b.WriteString(msgs[0].Content + "\n\n")
		}
		b.WriteString(toolsHeader)
		for i, tool := range opt.Tools {
			s, err := PyJSON(tool)
			if err != nil {
				return "", fmt.Errorf("chat: tools[%d]: %w", i, err)
			}
			b.WriteString("\n" + s)
		}
		b.WriteString(toolsFooter)
	} else if msgs[0].Role == RoleSystem {
		b.WriteString(imStart + "system\n" + msgs[0].Content + imEnd + "\n")
	}
	// The last user turn that is a real query, not a wrapped tool response.
	lastQuery := len(msgs) - 1
	for i := len(msgs) - 1; i >= 0; i-- {
		m := msgs[i]
		if m.Role == RoleUser && !(strings.HasPrefix(m.Content, "<tool_response>") && strings.HasSuffix(m.Content, "</tool_response>")) {
			lastQuery = i
			break
		}
	}
	for i, m := range msgs {
		switch {
		case m.Role == RoleUser || m.Role == RoleSystem && i > 0:
			b.WriteString(imStart + m.Role + "\n" + m.Content + imEnd + "\n")
		case m.Role == RoleAssistant:
			content, reasoning := m.Content, ""
			if m.ReasoningContent != nil {
				reasoning = *m.ReasoningContent
			} else if strings.Contains(m.Content, "</think>") {
				th := thinking.Split(m.Content)
				content, reasoning = th.Answer, th.Reasoning
			}
			if i > lastQuery && (i == len(msgs)-1 || reasoning != "") {
				b.WriteString(imStart + m.Role + "\n<think>\n" + strings.Trim(reasoning, "\n") + "\n</think>\n\n" + strings.TrimLeft(content, "\n"))
			} else {
				b.WriteString(imStart + m.Role + "\n" + content)
			}
			for j, tc := range m.ToolCalls {
				if j > 0 || content != "" {
					b.WriteString("\n")
				}
				args, err := toolArguments(tc.Function.Arguments)
				if err != nil {
					return "", fmt.Errorf("chat: messages[%d].tool_calls[%d].function.arguments: %w", i, j, err)
				}
				b.WriteString("<tool_call>\n{\"name\": \"" + tc.Function.Name + "\", \"arguments\": " + args + "}\n</tool_call>")
			}
			b.WriteString(imEnd + "\n")
		case m.Role == RoleTool:
			if i == 0 || msgs[i-1].Role != RoleTool {
				b.WriteString(imStart + "user")
			}
			b.WriteString("\n<tool_response>\n" + m.Content + "\n</tool_response>")
			if i == len(msgs)-1 || msgs[i+1].Role != RoleTool {
				b.WriteString(imEnd + "\n")
			}
		}
	}
	disable := opt.DisableThinking
	if opt.EnableThinking != nil {
		disable = !*opt.EnableThinking
	}
	if opt.AddGenerationPrompt {
		b.WriteString(imStart + "assistant\n")
		if disable {
			b.WriteString("<think>\n\n</think>\n\n")
		}
	}
	if opt.ContinueFinalMessage {
		return continueFinal(b.String(), msgs[len(msgs)-1].Content)
	}
	return b.String(), nil
}

// continueFinal cuts rendered right after the final message's content, as
// transformers 4.51's apply_chat_template does: at the content's last
// occurrence (stripped of whitespace), keeping its leading whitespace
// where the template kept it.
func continueFinal(rendered, final string) (string, error) {
	stripped := strings.TrimFunc(final, pySpace)
	if !strings.Contains(rendered, stripped) {
		return "", errors.New("chat: continue_final_message is set but the final message does not appear in the chat after applying the chat template")
	}
	at := strings.LastIndex(rendered, stripped)
	lstripped := strings.TrimLeftFunc(final, pySpace)
	if end := at + len(lstripped); end <= len(rendered) && rendered[at:end] == final {
		return rendered[:end], nil
	}
	return rendered[:at+len(stripped)], nil
}

// pySpace is Python's str.isspace for one character.
func pySpace(r rune) bool { return unicode.IsSpace(r) || r >= 0x1c && r <= 0x1f }

// toolArguments renders arguments as the template does: a string verbatim,
// anything else through tojson.
func toolArguments(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "", errors.New("missing")
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", err
		}
		return s, nil
	}
	return PyJSON(raw)
}
