package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/evolm/evolm/model/chat"
	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/serving/openai"
)

// chatCall is a checked chat request.
type chatCall struct {
	id        string
	req       backend.GenerateRequest
	n         int
	top       int // top_logprobs; -1: no log-probs
	promptTop int
	role      string // the answer's role
	echo      string // the text echoed before each answer ("" none)
	tools     toolMode
	toolName  string // the named function (toolNamed)
	parallel  bool
	usage     bool
	contUsage bool
	asIDs     bool
	stopIDs   []int
}

// toolMode is what becomes of a completion's text: plain content, parsed
// tool calls (tool_choice auto), or one call of the named function.
type toolMode int

const (
	toolNone toolMode = iota
	toolAuto
	toolNamed
)

func (s *server) planChat(r *http.Request, req *openai.ChatRequest, e *entry) (*chatCall, error) {
	if len(req.Messages) == 0 {
		return nil, badRequest("messages", "messages is required")
	}
	p := &chatCall{top: -1, asIDs: req.ReturnTokensAsTokenIDs, stopIDs: req.StopTokenIDs, parallel: req.ParallelToolCalls == nil || *req.ParallelToolCalls}
	maxTok := req.MaxCompletionTokens
	if maxTok == nil {
		maxTok = req.MaxTokens
	}
	sp, n, err := s.sampling(common{maxTokens: maxTok, defMax: s.cfg.ChatMaxTokens, temp: req.Temperature, topP: req.TopP,
		n: req.N, seed: req.Seed, stop: req.Stop, stream: req.Stream, sp: &req.SamplingParams})
	if err != nil {
		return nil, err
	}
	for i, w := range req.BadWords {
		if w == "" {
			return nil, badRequest("bad_words", "bad_words[%d] is empty", i)
		}
	}
	sp.BadWords, p.n = req.BadWords, n
	if req.TopLogprobs != nil {
		if !req.Logprobs && *req.TopLogprobs > 0 {
			return nil, badRequest("top_logprobs", "top_logprobs needs logprobs: true")
		}
		if *req.TopLogprobs < 0 || *req.TopLogprobs > s.cfg.MaxTopLogprobs {
			return nil, badRequest("top_logprobs", "top_logprobs = %d, want in [0, %d]", *req.TopLogprobs, s.cfg.MaxTopLogprobs)
		}
	}
	if req.Logprobs {
		p.top = 0
		if req.TopLogprobs != nil {
			p.top = *req.TopLogprobs
		}
	}
	if p.promptTop, err = s.promptLogprobs(&req.SamplingParams, req.Stream); err != nil {
		return nil, err
	}
	if p.usage, p.contUsage, err = streamOptions(&req.SamplingParams, req.Stream); err != nil {
		return nil, err
	}
	f, err := format(&req.SamplingParams)
	if err != nil {
		return nil, err
	}
	if err := s.toolChoice(p, req, &f); err != nil {
		return nil, err
	}
	p.id = newID("chatcmpl-")
	if req.RequestID != "" {
		p.id = "chatcmpl-" + req.RequestID
	}
	sp.Format = f
	p.req = backend.GenerateRequest{ID: p.id, N: n, Sampling: sp, LogProbs: p.top >= 0, TopLogProbs: max(p.top, 0),
		PromptLogProbs: p.promptTop >= 0, PromptTopLogProbs: max(p.promptTop, 0), Done: r.Context().Done()}
	if err := s.renderChat(p, req, e); err != nil {
		return nil, err
	}
	return p, nil
}

// toolChoice reads tools and tool_choice: none renders the tools and
// leaves the text as content, auto (the default with tools) parses tool
// calls out of it, a named function constrains the text to its
// parameters' schema; required is refused.
func (s *server) toolChoice(p *chatCall, req *openai.ChatRequest, f **backend.OutputFormat) error {
	names := map[string]json.RawMessage{}
	for i, t := range req.Tools {
		var tool struct {
			Type     string `json:"type"`
			Function *struct {
				Name       string          `json:"name"`
				Parameters json.RawMessage `json:"parameters"`
			} `json:"function"`
		}
		if err := json.Unmarshal(t, &tool); err != nil || tool.Function == nil || tool.Function.Name == "" || tool.Type != "function" {
			return badRequest(fmt.Sprintf("tools[%d]", i), "tools[%d]: want {\"type\": \"function\", \"function\": {\"name\": …}}", i)
		}
		names[tool.Function.Name] = tool.Function.Parameters
	}
	choice := bytes.TrimSpace(req.ToolChoice)
	var mode string
	if len(choice) == 0 || string(choice) == "null" {
		mode = "none"
		if len(req.Tools) > 0 {
			mode = "auto"
		}
	} else if err := json.Unmarshal(choice, &mode); err != nil {
		var named struct {
			Type     string `json:"type"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		if err := json.Unmarshal(choice, &named); err != nil || named.Type != "function" {
			return badRequest("tool_choice", "tool_choice: want none, auto, required or {\"type\": \"function\", \"function\": {\"name\": …}}")
		}
		params, ok := names[named.Function.Name]
		if !ok {
			return badRequest("tool_choice", "tool_choice names function %q, which is not among the tools", named.Function.Name)
		}
		if *f != nil {
			return badRequest("tool_choice", "a named tool_choice constrains the output: it cannot be combined with a response format")
		}
		if len(bytes.TrimSpace(params)) == 0 || string(params) == "null" {
			params = json.RawMessage(`{"type": "object"}`)
		}
		*f = &backend.OutputFormat{Type: backend.FormatJSONSchema, Schema: params}
		p.tools, p.toolName = toolNamed, named.Function.Name
		return nil
	}
	switch {
	case mode == "none":
	case len(req.Tools) == 0:
		return badRequest("tool_choice", "tool_choice %q needs tools", mode)
	case mode == "auto":
		p.tools = toolAuto
	case mode == "required":
		return badRequest("tool_choice", "tool_choice required is not supported by evolm serve; name the function, or use auto")
	default:
		return badRequest("tool_choice", "tool_choice %q: want none, auto, required or a named function", mode)
	}
	return nil
}

// renderChat renders the conversation into p.req's prompt, or hands the
// messages to the generator when e renders none.
func (s *server) renderChat(p *chatCall, req *openai.ChatRequest, e *entry) error {
	addGen := req.AddGenerationPrompt == nil || *req.AddGenerationPrompt
	if addGen && req.ContinueFinalMessage {
		return badRequest("continue_final_message", "continue_final_message and add_generation_prompt cannot both be true")
	}
	msgs, err := chatMessages(req.Messages)
	if err != nil {
		return err
	}
	p.role = "assistant"
	if !addGen {
		p.role = msgs[len(msgs)-1].Role
	}
	if last := msgs[len(msgs)-1]; req.Echo && last.Role == p.role {
		p.echo = last.Content
	}
	opt := chat.Options{AddGenerationPrompt: addGen, ContinueFinalMessage: req.ContinueFinalMessage, Tools: req.Tools}
	if raw, ok := req.ChatTemplateKwargs["enable_thinking"]; ok && string(raw) != "null" {
		var on bool
		if err := json.Unmarshal(raw, &on); err != nil {
			return badRequest("chat_template_kwargs.enable_thinking", "chat_template_kwargs.enable_thinking: want true or false")
		}
		opt.EnableThinking = &on
	}
	if e.eng.RenderChat == nil {
		for field, used := range map[string]bool{"tools": len(req.Tools) > 0, "add_generation_prompt": !addGen,
			"continue_final_message": req.ContinueFinalMessage, "chat_template_kwargs": opt.EnableThinking != nil} {
			if used {
				return noTemplate(e, field)
			}
		}
		for i, m := range msgs {
			if m.Role == chat.RoleTool || len(m.ToolCalls) > 0 || m.ReasoningContent != nil {
				return noTemplate(e, fmt.Sprintf("messages[%d]", i))
			}
			p.req.Messages = append(p.req.Messages, backend.Message{Role: m.Role, Content: m.Content})
		}
		return nil
	}
	text, err := e.eng.RenderChat(msgs, opt)
	if err != nil {
		return badRequest("messages", "chat template: %v", err)
	}
	p.req.Prompt = text
	return nil
}

// chatMessages converts the wire messages into the chat template's, as
// vLLM hands them to it: tool-call arguments (JSON strings on the wire) as
// JSON objects.
func chatMessages(in []openai.ChatMessage) ([]chat.Message, error) {
	out := make([]chat.Message, len(in))
	for i, m := range in {
		switch m.Role {
		case chat.RoleSystem, chat.RoleUser, chat.RoleAssistant, chat.RoleTool:
		default:
			return nil, badRequest(fmt.Sprintf("messages[%d].role", i), "role %q, want system, user, assistant or tool", m.Role)
		}
		cm := chat.Message{Role: m.Role, Content: m.Content, ReasoningContent: m.ReasoningContent}
		for j, tc := range m.ToolCalls {
			param := fmt.Sprintf("messages[%d].tool_calls[%d]", i, j)
			if m.Role != chat.RoleAssistant {
				return nil, badRequest(param, "%s: only assistant messages make tool calls", param)
			}
			args := json.RawMessage(tc.Function.Arguments)
			if !json.Valid(args) {
				return nil, badRequest(param+".function.arguments", "%s.function.arguments is not JSON", param)
			}
			cm.ToolCalls = append(cm.ToolCalls, chat.ToolCall{Type: "function", Function: chat.FunctionCall{Name: tc.Function.Name, Arguments: args}})
		}
		out[i] = cm
	}
	return out, nil
}

func (s *server) doChat(w http.ResponseWriter, r *http.Request, req *openai.ChatRequest, e *entry) error {
	p, err := s.planChat(r, req, e)
	if err != nil {
		return err
	}
	if req.Stream {
		return s.streamChat(w, r, p, e)
	}
	resps, err := s.generate(r.Context(), e, []backend.GenerateRequest{p.req})
	if err != nil {
		return err
	}
	res := resps[0]
	out := openai.ChatResponse{ID: p.id, Object: "chat.completion", Created: time.Now().Unix(), Model: e.id,
		Metadata: s.metadata(e), Usage: &openai.Usage{PromptTokens: max(res.PromptTokens, 0)}}
	for _, c := range res.Completions {
		msg, reason := p.message(c)
		ch := openai.ChatChoice{Index: c.Index, Message: msg, FinishReason: reason, StopReason: stopReason(c, p.stopIDs)}
		if p.top >= 0 {
			ch.Logprobs = chatLogprobs(c.LogProbs, p.top, p.asIDs)
		}
		out.Choices = append(out.Choices, ch)
		out.Usage.CompletionTokens += tokenCount(c)
	}
	if p.promptTop >= 0 {
		out.PromptLogprobs = vllmPromptLogprobs(&res, p.promptTop)
	}
	out.Usage.TotalTokens = out.Usage.PromptTokens + out.Usage.CompletionTokens
	writeJSON(w, http.StatusOK, out)
	return nil
}

// message is the answer of completion c and its finish reason: the text
// as content, or the tool calls made in it.
func (p *chatCall) message(c backend.Completion) (openai.ChatMessage, string) {
	msg := openai.ChatMessage{Role: p.role, Content: p.echo + c.Text}
	reason := string(c.FinishReason)
	switch p.tools {
	case toolNamed:
		msg.Content = p.echo
		msg.ToolCalls = []openai.ToolCall{{ID: newID("chatcmpl-tool-"), Type: "function", Function: openai.FunctionCall{Name: p.toolName, Arguments: c.Text}}}
	case toolAuto:
		content, calls, ok := chat.ParseToolCalls(c.Text)
		if !ok {
			break
		}
		if !p.parallel {
			calls = calls[:1]
		}
		msg.Content = p.echo + content
		for _, call := range calls {
			msg.ToolCalls = append(msg.ToolCalls, openai.ToolCall{ID: newID("chatcmpl-tool-"), Type: "function",
				Function: openai.FunctionCall{Name: call.Name, Arguments: call.Arguments}})
		}
		reason = "tool_calls"
	}
	return msg, reason
}
