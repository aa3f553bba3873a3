package server

import (
	"net/http"

	"github.com/evolm/evolm/model/chat"
	"github.com/evolm/evolm/serving/openai"
)

// doTokenize is vLLM's POST /tokenize: a prompt, or messages rendered with
// the chat template (tools and its fields as in chat requests), as token
// ids; return_token_strs adds the vocabulary's strings of them.
func (s *server) doTokenize(w http.ResponseWriter, r *http.Request, req *openai.TokenizeRequest, e *entry) error {
	tk := e.eng.Tokenizer
	if tk == nil {
		return &apiError{status: http.StatusNotFound, typ: "invalid_request_error", msg: "this server has no tokenizer for " + e.id}
	}
	var text string
	switch {
	case req.Prompt != nil && len(req.Messages) > 0:
		return badRequest("prompt", "give prompt or messages, not both")
	case req.Prompt != nil:
		text = *req.Prompt
	case len(req.Messages) > 0:
		if e.eng.RenderChat == nil {
			return noTemplate(e, "messages")
		}
		addGen := req.AddGenerationPrompt == nil || *req.AddGenerationPrompt
		if addGen && req.ContinueFinalMessage {
			return badRequest("continue_final_message", "continue_final_message and add_generation_prompt cannot both be true")
		}
		for k := range req.ChatTemplateKwargs {
			if k != "enable_thinking" {
				return badRequest("chat_template_kwargs."+k, "chat_template_kwargs.%s is not supported by evolm serve", k)
			}
		}
		msgs, err := chatMessages(req.Messages)
		if err != nil {
			return err
		}
		opt := chat.Options{AddGenerationPrompt: addGen, ContinueFinalMessage: req.ContinueFinalMessage, Tools: req.Tools}
		if raw, ok := req.ChatTemplateKwargs["enable_thinking"]; ok {
			on := string(raw) == "true"
			if !on && string(raw) != "false" {
				return badRequest("chat_template_kwargs.enable_thinking", "chat_template_kwargs.enable_thinking: want true or false")
			}
			opt.EnableThinking = &on
		}
		if text, err = e.eng.RenderChat(msgs, opt); err != nil {
			return badRequest("messages", "chat template: %v", err)
		}
	default:
		return badRequest("prompt", "prompt or messages is required")
	}
	ids := tk.Tokenize(text)
	out := openai.TokenizeResponse{Count: len(ids), MaxModelLen: tk.MaxModelLen(), Tokens: ids}
	if req.ReturnTokenStrs {
		out.TokenStrs = tk.TokenStrings(ids)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// doDetokenize is vLLM's POST /detokenize: token ids as text, special
// tokens kept.
func (s *server) doDetokenize(w http.ResponseWriter, r *http.Request, req *openai.DetokenizeRequest, e *entry) error {
	tk := e.eng.Tokenizer
	if tk == nil {
		return &apiError{status: http.StatusNotFound, typ: "invalid_request_error", msg: "this server has no tokenizer for " + e.id}
	}
	text, err := tk.Detokenize(req.Tokens)
	if err != nil {
		return badRequest("tokens", "%v", err)
	}
	writeJSON(w, http.StatusOK, openai.DetokenizeResponse{Prompt: text})
	return nil
}
