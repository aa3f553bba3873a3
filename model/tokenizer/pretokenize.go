package tokenizer

import "unicode/utf8"

// QwenSplitPattern is the only Split pre-tokenizer regex this package
// implements (Qwen2, Qwen2.5 and Qwen3 all ship it). splitNext is a
// hand-written matcher for it.
const QwenSplitPattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

func isCRLF(r rune) bool { return r == '\r' || r == '\n' }

// isOther is [^\s\p{L}\p{N}].
func isOther(r rune) bool { return !isSpace(r) && !isLetter(r) && !isNumber(r) }

// foldEq reports whether r matches the ASCII letter c case-insensitively as
// Oniguruma does (simple case folding, so U+017F LONG S matches 's' and
// U+212A KELVIN SIGN matches 'k').
func foldEq(r rune, c byte) bool {
	lc := rune(c | 0x20)
	if r == lc || r == lc-0x20 {
		return true
	}
	switch lc {
	case 's':
		return r == 0x17F
	case 'k':
		return r == 0x212A
	}
	return false
}

var contractions = []string{"s", "t", "re", "ve", "m", "ll", "d"}

// splitNext returns the end (byte offset) of the piece of s that the Qwen
// split regex matches at byte offset i, trying the alternatives in the
// regex's order with its backtracking. Every alternative consumes at least
// one rune and every rune starts some alternative, so pieces tile s.
func splitNext(s string, i int) int {
	r, w := utf8.DecodeRuneInString(s[i:])
	// 1. (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if r == '\'' {
	contraction:
		for _, c := range contractions {
			j := i + 1
			for k := 0; k < len(c); k++ {
				if j >= len(s) {
					continue contraction
				}
				r2, w2 := utf8.DecodeRuneInString(s[j:])
				if !foldEq(r2, c[k]) {
					continue contraction
				}
				j += w2
			}
			return j
		}
	}
	// 2. [^\r\n\p{L}\p{N}]?\p{L}+
	if isLetter(r) {
		return scanWhile(s, i+w, isLetter)
	}
	if !isCRLF(r) && !isNumber(r) && i+w < len(s) {
		if r2, w2 := utf8.DecodeRuneInString(s[i+w:]); isLetter(r2) {
			return scanWhile(s, i+w+w2, isLetter)
		}
	}
	// 3. \p{N}
	if isNumber(r) {
		return i + w
	}
	// 4. ' ?[^\s\p{L}\p{N}]+[\r\n]*'
	j := i
	if r == ' ' {
		j = i + 1
	}
	if j < len(s) {
		if r2, _ := utf8.DecodeRuneInString(s[j:]); isOther(r2) {
			j = scanWhile(s, j, isOther)
			return scanWhile(s, j, isCRLF)
		}
	}
	// Only whitespace is left here: 5. \s*[\r\n]+  6. \s+(?!\S)  7. \s+
	end, lastCRLF, lastStart := i, -1, i
	for end < len(s) {
		r2, w2 := utf8.DecodeRuneInString(s[end:])
		if !isSpace(r2) {
			break
		}
		if isCRLF(r2) {
			lastCRLF = end
		}
		lastStart = end
		end += w2
	}
	if end == i { // unreachable for valid input: r is whitespace by now
		return i + w
	}
	if lastCRLF >= 0 {
		return lastCRLF + 1
	}
	if end == len(s) || lastStart == i {
		return end
	}
	return lastStart
}

func scanWhile(s string, i int, pred func(rune) bool) int {
	for i < len(s) {
		r, w := utf8.DecodeRuneInString(s[i:])
		if !pred(r) {
			break
		}
		i += w
	}
	return i
}

// preTokenize calls fn with each piece of s in order.
func preTokenize(s string, fn func(piece string)) {
	for i := 0; i < len(s); {
		j := splitNext(s, i)
		fn(s[i:j])
		i = j
	}
}
