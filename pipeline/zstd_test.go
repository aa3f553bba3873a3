package pipeline

import (
	"bytes"
	"io"
	"testing"

	"github.com/apache/arrow-go/v18/parquet/compress"
)

// The registered zstd codec encodes what arrow-go's decoder reads back, at
// every level, and still reads streams (the page reader needs that).
func TestZstdCodecRoundTrip(t *testing.T) {
	c, err := compress.GetCodec(compress.Codecs.Zstd)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.(*zstdCodec); !ok {
		t.Fatalf("zstd codec is %T, not ours", c)
	}
	src := bytes.Repeat([]byte("the quick brown fox 0123456789 "), 4096)
	for i := range 4096 { // and an incompressible tail
		src = append(src, byte(i*2654435761>>13))
	}
	for _, level := range []int{compress.DefaultCompressionLevel, 1, 3, 7, 12} {
		enc := c.EncodeLevel(nil, src, level)
		if len(enc) >= len(src) {
			t.Errorf("level %d: %d bytes from %d", level, len(enc), len(src))
		}
		dec, err := compress.Decode(c, nil, enc)
		if err != nil || !bytes.Equal(dec, src) {
			t.Fatalf("level %d: round trip failed (%v)", level, err)
		}
		r := c.(compress.StreamingCodec).NewReader(bytes.NewReader(enc))
		got, err := io.ReadAll(r)
		r.Close()
		if err != nil || !bytes.Equal(got, src) {
			t.Fatalf("level %d: streaming read failed (%v)", level, err)
		}
	}
	if dec, err := compress.Decode(c, nil, c.Encode(nil, src)); err != nil || !bytes.Equal(dec, src) {
		t.Fatalf("Encode: round trip failed (%v)", err)
	}
}
