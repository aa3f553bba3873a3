package tokenizer

import "unicode/utf8"

// byteToRune is GPT-2's byte-level alphabet: printable Latin-1 bytes map to
// themselves, the other 68 bytes to U+0100 upwards in byte order.
var byteToRune [256]rune

// runeToByte inverts byteToRune (all of whose runes are below 0x144); -1
// marks runes outside the alphabet.
var runeToByte [0x144]int16

// byteStr[b] is string(byteToRune[b]), precomputed.
var byteStr [256]string

func init() {
	for i := range runeToByte {
		runeToByte[i] = -1
	}
	n := rune(0)
	for b := 0; b < 256; b++ {
		if b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE && b <= 0xFF {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = 256 + n
			n++
		}
		runeToByte[byteToRune[b]] = int16(b)
		byteStr[b] = string(byteToRune[b])
	}
}

// tokenBytes maps a byte-level token back to raw bytes. Like HF's ByteLevel
// decoder, a token with a rune outside the alphabet is taken verbatim.
func tokenBytes(dst []byte, tok string) []byte {
	start := len(dst)
	for _, r := range tok {
		if r >= rune(len(runeToByte)) || runeToByte[r] < 0 {
			return append(dst[:start], tok...)
		}
		dst = append(dst, byte(runeToByte[r]))
	}
	return dst
}

// lossyString converts b to a string the way Rust's String::from_utf8_lossy
// does: each maximal prefix of an ill-formed subsequence becomes one U+FFFD
// (so "\xE4\xB8" is one replacement and "\xFF\xFF" two).
func lossyString(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	out := make([]byte, 0, len(b)+8)
	for i := 0; i < len(b); {
		r, w := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError || w > 1 {
			out = append(out, b[i:i+w]...)
			i += w
			continue
		}
		out = utf8.AppendRune(out, utf8.RuneError)
		i += invalidPrefixLen(b[i:])
	}
	return string(out)
}

// invalidPrefixLen is the length of the maximal prefix of a well-formed UTF-8
// sequence at the start of b (at least 1), b starting with an ill-formed one.
func invalidPrefixLen(b []byte) int {
	c := b[0]
	var n int
	lo, hi := byte(0x80), byte(0xBF)
	switch {
	case c >= 0xC2 && c <= 0xDF:
		n = 2
	case c == 0xE0:
		n, lo = 3, 0xA0
	case c >= 0xE1 && c <= 0xEC || c == 0xEE || c == 0xEF:
		n = 3
	case c == 0xED:
		n, hi = 3, 0x9F
	case c == 0xF0:
		n, lo = 4, 0x90
	case c >= 0xF1 && c <= 0xF3:
		n = 4
	case c == 0xF4:
		n, hi = 4, 0x8F
	default:
		return 1
	}
	i := 1
	for ; i < n && i < len(b); i++ {
		if b[i] < lo || b[i] > hi {
			break
		}
		lo, hi = 0x80, 0xBF
	}
	return i
}
