package dedup

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"
)

// Normalize returns the text exact dedup compares (and near dedup
// shingles): format characters (Unicode category Cf: zero-width space and
// joiners, the BOM, soft hyphens, every bidi control) removed, then NFKC,
// then full Unicode case folding, then NFKC again (folding can leave a
// string un-normalized), then every run of whitespace collapsed to one space
// and the ends trimmed. An invisible character inside a word therefore
// changes neither its hash nor its shingles. ASCII input takes a fast path
// with the same result.
func Normalize(s string) string {
	if isASCII(s) {
		return collapseASCII(s)
	}
	return normalizeUnicode(s)
}

// dropFormat removes the format characters (Cf) of s.
func dropFormat(r rune) rune {
	if unicode.Is(unicode.Cf, r) {
		return -1
	}
	return r
}

// Visible reports whether s has a character a reader sees: a letter, digit,
// punctuation, symbol or private-use character. A prompt of whitespace,
// format characters (zero-width space, joiners, BOM, bidi controls) and
// combining marks alone has none: it is empty.
func Visible(s string) bool {
	for _, r := range s {
		if r < utf8.RuneSelf {
			if r > ' ' && r != 0x7f {
				return true
			}
			continue
		}
		if unicode.In(r, unicode.L, unicode.N, unicode.P, unicode.S, unicode.Co) {
			return true
		}
	}
	return false
}

func normalizeUnicode(s string) string {
	s = strings.Map(dropFormat, s)
	s = norm.NFKC.String(s)
	s = cases.Fold().String(s)
	s = norm.NFKC.String(s)
	return collapseSpace(s)
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

func asciiSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

func collapseASCII(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	space := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if asciiSpace(c) {
			space = b.Len() > 0
			continue
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b.WriteByte(c)
	}
	return b.String()
}

func collapseSpace(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	space := false
	for _, r := range s {
		if unicode.IsSpace(r) {
			space = b.Len() > 0
			continue
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		b.WriteRune(r)
	}
	return b.String()
}

// ContentHash is the identity of a prompt: the first 16 bytes of the SHA-256
// of its normalized text. Equal normalized texts have equal hashes.
type ContentHash [16]byte

// HashNormalized hashes an already normalized text.
func HashNormalized(normalized string) ContentHash {
	sum := sha256.Sum256([]byte(normalized))
	var h ContentHash
	copy(h[:], sum[:16])
	return h
}

// PromptID returns the stable prompt_id of a prompt: the hex of its
// ContentHash (32 characters). It depends only on the normalized text, so it
// does not change across runs, datasets or row order.
func PromptID(prompt string) string { return HashNormalized(Normalize(prompt)).String() }

func (h ContentHash) String() string { return hex.EncodeToString(h[:]) }

func (h ContentHash) hi() uint64 { return binary.BigEndian.Uint64(h[:8]) }
func (h ContentHash) lo() uint64 { return binary.BigEndian.Uint64(h[8:]) }

// ShingleOptions say how normalized text is cut into words for shingling.
// They follow datatrove's simplify_text (punctuation to spaces, diacritics
// removed) except that numbers are left alone by default: prompts that differ
// only in their numbers ask different questions.
type ShingleOptions struct {
	NGram           int  // words per shingle (datatrove: 5)
	StripPunct      bool // punctuation and symbols separate words and are dropped
	StripDiacritics bool // NFD, then drop nonspacing marks (é → e)
	NormNumbers     bool // every run of digits (with an optional .digits) becomes "0"
}

// Words splits normalized text into the words shingles are made of.
func (o ShingleOptions) Words(normalized string, dst []string) []string {
	s := normalized
	if o.StripDiacritics && !isASCII(s) {
		s = stripMarks(s)
	}
	start := -1
	flush := func(end int) {
		if start >= 0 {
			w := s[start:end]
			if o.NormNumbers {
				w = normNumbers(w)
			}
			dst = append(dst, w)
			start = -1
		}
	}
	for i, r := range s {
		sep := unicode.IsSpace(r) || unicode.IsControl(r)
		if !sep && o.StripPunct {
			if r < utf8.RuneSelf {
				sep = asciiPunct[r]
			} else {
				sep = unicode.IsPunct(r) || unicode.IsSymbol(r)
			}
		}
		if sep {
			flush(i)
			continue
		}
		if start < 0 {
			start = i
		}
	}
	flush(len(s))
	return dst
}

// asciiPunct is every printable ASCII character that is not a letter or a
// digit, as in datatrove's PUNCTUATION table.
var asciiPunct = func() (t [utf8.RuneSelf]bool) {
	for c := 0; c < utf8.RuneSelf; c++ {
		r := rune(c)
		t[c] = !(unicode.IsLetter(r) || unicode.IsDigit(r))
	}
	return t
}()

func stripMarks(s string) string {
	d := norm.NFD.String(s)
	var b strings.Builder
	b.Grow(len(d))
	for _, r := range d {
		if unicode.Is(unicode.Mn, r) {
			continue
		}
		b.WriteRune(r)
	}
	return norm.NFC.String(b.String())
}

// normNumbers replaces runs of digits (and a following ".digits", though the
// dot only survives when punctuation is kept) with a single 0.
func normNumbers(w string) string {
	hasDigit := false
	for i := 0; i < len(w); i++ {
		if w[i] >= '0' && w[i] <= '9' {
			hasDigit = true
			break
		}
	}
	if !hasDigit {
		return w
	}
	var b strings.Builder
	inNum := false
	for i := 0; i < len(w); i++ {
		c := w[i]
		isD := c >= '0' && c <= '9'
		if isD || (inNum && c == '.' && i+1 < len(w) && w[i+1] >= '0' && w[i+1] <= '9') {
			if !inNum {
				b.WriteByte('0')
				inNum = true
			}
			continue
		}
		inNum = false
		b.WriteByte(c)
	}
	return b.String()
}
