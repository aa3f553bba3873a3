package torchbe

import (
	"fmt"
	"strings"

	"github.com/evolm/evolm/model/chat"
	"github.com/evolm/evolm/serving/backend"
)

var _ backend.SFTTrainer = trainer{}

// assistantHeader opens an assistant turn in the chat template.
const assistantHeader = "<|im_start|>assistant\n"

// TokenizeSFT renders and tokenizes one SFT example as TRL's SFTTrainer
// does with this model's chat template:
//
//   - Messages: the chat rendered without a generation prompt (thinking as
//     the template renders a stored conversation: the last assistant turn
//     after the last user query carries its <think>…</think> block, empty
//     when it has none); the targets are the tokens of every assistant turn
//     after its "<|im_start|>assistant\n" header up to and including its
//     <|im_end|> — what a chat template whose assistant turns are wrapped in
//     {% generation %} marks with return_assistant_tokens_mask, token by
//     token as transformers maps the characters to tokens;
//   - Prompt and Completion: the text prompt+completion+EOS (EOS unless the
//     completion ends with it) tokenized as is; the targets are the tokens
//     after those of the prompt tokenized alone.
func (t trainer) TokenizeSFT(ex backend.SFTExample) (backend.SFTSample, error) {
	tok := t.m.Tokenizer()
	if len(ex.Messages) == 0 {
		if ex.Completion == "" {
			return backend.SFTSample{}, fmt.Errorf("sft example: no messages and no completion")
		}
		eos, ok := tok.IDToToken(tok.Specials().EOS)
		if !ok {
			return backend.SFTSample{}, fmt.Errorf("sft example: the tokenizer has no end-of-sequence token")
		}
		completion := ex.Completion
		if !strings.HasSuffix(completion, eos) {
			completion += eos
		}
		prompt := tok.Encode(ex.Prompt)
		ids := tok.Encode(ex.Prompt + completion)
		targets := make([]bool, len(ids))
		for i := len(prompt); i < len(ids); i++ {
			targets[i] = true
		}
		return backend.SFTSample{TokenIDs: ids, Targets: targets}, nil
	}
	cm := make([]chat.Message, len(ex.Messages))
	nAssistant := 0
	for i, msg := range ex.Messages {
		cm[i] = chat.Message{Role: msg.Role, Content: msg.Content}
		if msg.Role == chat.RoleAssistant {
			nAssistant++
		}
	}
	if nAssistant == 0 {
		return backend.SFTSample{}, fmt.Errorf("sft example: no assistant turn to train on")
	}
	text, err := chat.Render(cm, chat.Options{})
	if err != nil {
		return backend.SFTSample{}, err
	}
	spans, err := assistantSpans(text, nAssistant)
	if err != nil {
		return backend.SFTSample{}, err
	}
	ids := tok.Encode(text)
	// Byte offsets of every token: byte-level BPE tokens are exact byte
	// strings of the (normalized) text.
	targets := make([]bool, len(ids))
	off := 0
	for i, id := range ids {
		b, err := tok.DecodeBytes([]int{id}, false)
		if err != nil {
			return backend.SFTSample{}, err
		}
		end := off + len(b)
		for _, sp := range spans {
			if off < sp[1] && end > sp[0] {
				targets[i] = true
			}
		}
		off = end
	}
	if off != len(text) {
		return backend.SFTSample{}, fmt.Errorf("sft example: the tokens cover %d bytes of the %d-byte rendered chat (text that Unicode normalization changes); normalize it to NFC first", off, len(text))
	}
	return backend.SFTSample{TokenIDs: ids, Targets: targets}, nil
}

// assistantSpans returns the byte spans [start, end) of the n assistant
// turns of a rendered chat: after each header through its <|im_end|>.
func assistantSpans(text string, n int) ([][2]int, error) {
	var spans [][2]int
	for from := 0; ; {
		i := strings.Index(text[from:], assistantHeader)
		if i < 0 {
			break
		}
		start := from + i + len(assistantHeader)
		j := strings.Index(text[start:], "<|im_end|>")
		if j < 0 {
			return nil, fmt.Errorf("sft example: an assistant turn has no <|im_end|>")
		}
		end := start + j + len("<|im_end|>")
		spans = append(spans, [2]int{start, end})
		from = end
	}
	if len(spans) != n {
		return nil, fmt.Errorf("sft example: the rendered chat has %d assistant turns for %d assistant messages (a message contains chat-template markers)", len(spans), n)
	}
	return spans, nil
}
