package torchbe

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/evolm/evolm/model/constrain"
	"github.com/evolm/evolm/serving/backend"
)

// format is a compiled response format: the grammar that constrains the
// samples and the independent check of what they produce.
type format struct {
	g     *constrain.Grammar
	check func(text string) error
}

// formats caches a Model's compiled formats by their text (a client sends
// the same schema with every request), up to maxFormats.
type formats struct {
	once  sync.Once
	vocab *constrain.Vocab
	mu    sync.Mutex
	byKey map[string]*format
}

const maxFormats = 64

// vocabulary is the checkpoint's vocabulary as bytes, special tokens and
// ids past the tokenizer's left out (built once).
func (m *Model) vocabulary() *constrain.Vocab {
	m.formats.once.Do(func() {
		n := m.vocab
		toks := make([][]byte, n)
		for id := 0; id < n && id < m.tok.VocabSize(); id++ {
			if m.tok.IsSpecial(id) {
				continue
			}
			if b, err := m.tok.DecodeBytes([]int{id}, false); err == nil {
				toks[id] = b
			}
		}
		m.formats.vocab = constrain.NewVocab(toks)
	})
	return m.formats.vocab
}

// format compiles f, or takes it from the cache.
func (m *Model) format(f *backend.OutputFormat) (*format, error) {
	key, err := json.Marshal(f)
	if err != nil {
		return nil, err
	}
	c := &m.formats
	c.mu.Lock()
	if out, ok := c.byKey[string(key)]; ok {
		c.mu.Unlock()
		return out, nil
	}
	c.mu.Unlock()
	v := m.vocabulary()
	out := &format{}
	switch f.Type {
	case backend.FormatJSONObject:
		out.g = constrain.Object(v)
		out.check = func(text string) error {
			var obj map[string]any
			dec := json.NewDecoder(strings.NewReader(text))
			dec.UseNumber()
			if err := dec.Decode(&obj); err != nil || dec.More() {
				return fmt.Errorf("not one JSON object: %v", err)
			}
			return nil
		}
	case backend.FormatJSONSchema:
		val, err := constrain.NewValidator(f.Schema)
		if err != nil {
			return nil, err
		}
		if out.g, err = constrain.Schema(f.Schema, v); err != nil {
			return nil, err
		}
		out.check = val.Validate
	case backend.FormatChoice:
		if out.g, err = constrain.Choice(f.Choices, v); err != nil {
			return nil, err
		}
		out.check = func(text string) error {
			if !slices.Contains(f.Choices, text) {
				return fmt.Errorf("%q is not one of the choices", text)
			}
			return nil
		}
	default:
		return nil, fmt.Errorf("response format %q: want json_object, json_schema or choice", f.Type)
	}
	c.mu.Lock()
	if c.byKey == nil || len(c.byKey) >= maxFormats {
		c.byKey = map[string]*format{}
	}
	c.byKey[string(key)] = out
	c.mu.Unlock()
	return out, nil
}
