package tokenizer

//go:generate go run ./internal/gentables

import (
	"slices"
	"sort"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// runeRange is an inclusive range of runes.
type runeRange struct{ lo, hi rune }

// cccEntry is one canonical combining class override.
type cccEntry struct {
	r   rune
	ccc uint8
}

func inTable(t []runeRange, r rune) bool {
	if len(t) == 0 || r < t[0].lo || r > t[len(t)-1].hi {
		return false
	}
	i := sort.Search(len(t), func(i int) bool { return t[i].hi >= r })
	return i < len(t) && t[i].lo <= r
}

// isLetter is \p{L} as the reference's regex engine sees it.
func isLetter(r rune) bool {
	if r < utf8.RuneSelf {
		return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z'
	}
	if unicode.IsLetter(r) {
		return !inTable(letterDel, r)
	}
	return inTable(letterAdd, r)
}

// isNumber is \p{N} as the reference's regex engine sees it.
func isNumber(r rune) bool {
	if r < utf8.RuneSelf {
		return '0' <= r && r <= '9'
	}
	if unicode.IsNumber(r) {
		return !inTable(numberDel, r)
	}
	return inTable(numberAdd, r)
}

// isSpace is \s as the reference's regex engine sees it.
func isSpace(r rune) bool {
	if r < utf8.RuneSelf {
		return r == ' ' || '\t' <= r && r <= '\r'
	}
	if unicode.IsSpace(r) {
		return !inTable(spaceDel, r)
	}
	return inTable(spaceAdd, r)
}

// combiningClass is the canonical combining class the reference's NFC uses.
func combiningClass(r rune) uint8 {
	if r < 0x300 {
		return 0
	}
	if n := len(cccOverride); n > 0 && r >= cccOverride[0].r && r <= cccOverride[n-1].r {
		i := sort.Search(n, func(i int) bool { return cccOverride[i].r >= r })
		if i < n && cccOverride[i].r == r {
			return cccOverride[i].ccc
		}
	}
	return norm.NFD.PropertiesString(string(r)).CCC()
}

// NFC returns s in Unicode normalization form C exactly as the reference
// tokenizer's normalizer produces it. Go's x/text/norm differs from it in two
// ways: its combining classes and compositions are from a newer Unicode
// version than the reference's (see cccOverride and noCompose), and it inserts U+034F after 30 combining
// marks in a row (UAX #15 stream-safe format), which the reference never
// does. Text that x/text/norm reports as already normal is returned as is —
// that verdict implies the reference's too — and anything else goes through
// the canonical algorithm (decompose, order, compose) below.
func NFC(s string) string {
	i := 0
	for i < len(s) && s[i] < utf8.RuneSelf {
		i++
	}
	if i == len(s) || norm.NFC.IsNormalString(s) {
		return s
	}
	// ASCII characters are starters that never compose with what precedes
	// them, so the text splits before each one into chunks that normalize
	// independently; only chunks that are not already normal are redone.
	var b strings.Builder
	done := 0 // s[:done] is in b or still pending as normal text
	for i < len(s) {
		// s[i] is the first non-ASCII byte of a run; its chunk starts at the
		// ASCII character before it (a possible base) and ends at the next
		// ASCII byte.
		start := i
		if start > 0 {
			start--
		}
		end := i
		for end < len(s) && s[end] >= utf8.RuneSelf {
			end++
		}
		if chunk := s[start:end]; !norm.NFC.IsNormalString(chunk) {
			if b.Len() == 0 {
				b.Grow(len(s) + 16)
			}
			b.WriteString(s[done:start])
			b.WriteString(nfcSlow(chunk))
			done = end
		}
		for i = end; i < len(s) && s[i] < utf8.RuneSelf; i++ {
		}
	}
	if done == 0 {
		return s
	}
	b.WriteString(s[done:])
	return b.String()
}

const (
	hangulSBase, hangulLBase, hangulVBase, hangulTBase = 0xAC00, 0x1100, 0x1161, 0x11A7
	hangulLCount, hangulVCount, hangulTCount           = 19, 21, 28
	hangulNCount                                       = hangulVCount * hangulTCount
	hangulSCount                                       = hangulLCount * hangulNCount
)

func nfcSlow(s string) string {
	// Decompose fully (canonical decompositions are the same in both tables).
	rs := make([]rune, 0, len(s))
	for _, r := range s {
		if si := r - hangulSBase; si >= 0 && si < hangulSCount {
			rs = append(rs, hangulLBase+si/hangulNCount, hangulVBase+(si%hangulNCount)/hangulTCount)
			if t := si % hangulTCount; t != 0 {
				rs = append(rs, hangulTBase+t)
			}
			continue
		}
		if d := norm.NFD.PropertiesString(string(r)).Decomposition(); d != nil && !slices.Contains(noCompose, r) {
			for _, dr := range string(d) {
				rs = append(rs, dr)
			}
			continue
		}
		rs = append(rs, r)
	}
	// Canonical ordering: a stable sort of every run of non-starters.
	cc := make([]uint8, len(rs))
	for i, r := range rs {
		cc[i] = combiningClass(r)
	}
	for i := 0; i < len(rs); {
		if cc[i] == 0 {
			i++
			continue
		}
		j := i
		for j < len(rs) && cc[j] != 0 {
			j++
		}
		if j-i <= 32 {
			for a := i + 1; a < j; a++ { // insertion sort: stable
				for b := a; b > i && cc[b-1] > cc[b]; b-- {
					cc[b-1], cc[b] = cc[b], cc[b-1]
					rs[b-1], rs[b] = rs[b], rs[b-1]
				}
			}
		} else { // long runs (adversarial input): O(n log n)
			type mark struct {
				r rune
				c uint8
			}
			run := make([]mark, j-i)
			for k := range run {
				run[k] = mark{rs[i+k], cc[i+k]}
			}
			slices.SortStableFunc(run, func(a, b mark) int { return int(a.c) - int(b.c) })
			for k, mk := range run {
				rs[i+k], cc[i+k] = mk.r, mk.c
			}
		}
		i = j
	}
	// Canonical composition, following unicode-normalization's Recompositions.
	out := make([]rune, 0, len(rs))
	var buf []rune
	composee, have := rune(0), false
	lastCCC, haveLast := uint8(0), false
	for i, r := range rs {
		c := cc[i]
		if !have {
			if c != 0 {
				out = append(out, r)
				continue
			}
			composee, have = r, true
			continue
		}
		if haveLast && lastCCC >= c { // blocked
			if c == 0 {
				out = append(append(out, composee), buf...)
				buf = buf[:0]
				composee, haveLast = r, false
				continue
			}
			buf = append(buf, r)
			lastCCC = c
			continue
		}
		if k, ok := compose(composee, r); ok {
			composee = k
			continue
		}
		if !haveLast && c == 0 {
			out = append(out, composee)
			composee = r
			continue
		}
		buf = append(buf, r)
		lastCCC, haveLast = c, true
	}
	if have {
		out = append(append(out, composee), buf...)
	}
	return string(out)
}

var (
	pairsOnce sync.Once
	pairs     map[[2]rune]rune
)

// compose returns the primary composite of a and b, if there is one.
func compose(a, b rune) (rune, bool) {
	if li := a - hangulLBase; li >= 0 && li < hangulLCount {
		if vi := b - hangulVBase; vi >= 0 && vi < hangulVCount {
			return hangulSBase + (li*hangulVCount+vi)*hangulTCount, true
		}
		return 0, false
	}
	if si := a - hangulSBase; si >= 0 && si < hangulSCount && si%hangulTCount == 0 {
		if ti := b - hangulTBase; ti > 0 && ti < hangulTCount {
			return a + ti, true
		}
		return 0, false
	}
	pairsOnce.Do(buildPairs)
	k, ok := pairs[[2]rune{a, b}]
	return k, ok
}

// buildPairs derives the composition table from x/text/norm: every rune that
// is its own NFC form and decomposes into two or more runes is the primary
// composite of (NFC of all but its last decomposed rune, that last rune).
func buildPairs() {
	pairs = make(map[[2]rune]rune, 1024)
	for r := rune(0x80); r <= unicode.MaxRune; r++ {
		if r >= 0xD800 && r < 0xE000 || r >= hangulSBase && r < hangulSBase+hangulSCount {
			continue
		}
		d := norm.NFD.PropertiesString(string(r)).Decomposition()
		if d == nil {
			continue
		}
		s := string(r)
		if norm.NFC.String(s) != s {
			continue // singleton or composition exclusion
		}
		dr := []rune(string(d))
		if len(dr) < 2 {
			continue
		}
		first := []rune(norm.NFC.String(string(dr[:len(dr)-1])))
		if len(first) != 1 || slices.Contains(noCompose, r) {
			continue
		}
		pairs[[2]rune{first[0], dr[len(dr)-1]}] = r
	}
}
