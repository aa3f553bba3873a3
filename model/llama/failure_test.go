package llama_test

import (
	"path/filepath"
	"testing"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/modeltest"
	"github.com/evolm/evolm/model/torch"
)

// TestForwardStopsAtFirstFailure: an op that fails inside the forward pass
// (here the embedding, on a token id past the vocabulary; in practice an
// allocation the machine cannot make) ends the pass with that op's error.
// The ops after it, whose dtype or device follows a failed output, must not
// dereference the nil it left (they did, and out of memory was a panic).
func TestForwardStopsAtFirstFailure(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tiny")
	modeltest.InitTiny(t, dir, 1)
	for _, attn := range []string{model.AttnEager, model.AttnSDPA} {
		m, err := model.Load(dir, model.LoadOptions{Attention: attn})
		if err != nil {
			t.Fatal(err)
		}
		s := torch.NewScope()
		bad := int64(model.QwenVocabSize + 7)
		batch := model.Batch{
			IDs:       s.FromInt64([]int64{1, bad, 3}, 1, 3),
			Positions: s.FromInt64([]int64{0, 1, 2}, 1, 3),
			Mask:      s.FromInt64([]int64{1, 1, 1}, 1, 3),
		}
		logits, err := m.Forward(s, batch)
		if err == nil || logits != nil {
			t.Errorf("%s: forward over token id %d: logits %v, err %v; want the embedding's error", attn, bad, logits, err)
		} else {
			t.Logf("%s: %v", attn, err)
		}
		s.Close()
		m.Close()
	}
}
