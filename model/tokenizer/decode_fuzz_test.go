package tokenizer

import (
	"encoding/binary"
	"testing"
)

// FuzzDecodeEncode decodes arbitrary id sequences (out-of-range ids
// included) and re-encodes the text: no panic, and the text survives the
// round trip as its NFC form, so text that only token sequences reach (split
// UTF-8 sequences, specials glued to words) is covered too.
func FuzzDecodeEncode(f *testing.F) {
	for _, ids := range [][]uint32{{151644, 872, 198}, {9707, 11, 1879}, {220, 220, 151645}, {0xffffffff, 5}, {145, 226, 236}, {31883, 99, 100}} {
		b := make([]byte, 4*len(ids))
		for i, id := range ids {
			binary.LittleEndian.PutUint32(b[4*i:], id)
		}
		f.Add(b, false)
	}
	tok, _ := qwen3(f)
	f.Fuzz(func(t *testing.T, raw []byte, skip bool) {
		ids := make([]int, len(raw)/4)
		for i := range ids {
			ids[i] = int(binary.LittleEndian.Uint32(raw[4*i:])) % (tok.VocabSize() + 8)
		}
		text, err := tok.Decode(ids, skip)
		if err != nil {
			t.Fatalf("Decode(%v): %v", ids, err)
		}
		again, err := tok.Decode(tok.Encode(text), false)
		if err != nil {
			t.Fatal(err)
		}
		if want := NFC(text); again != want {
			t.Fatalf("ids %v decode to %+q, which round-trips to %+q, want %+q", ids, text, again, want)
		}
	})
}
