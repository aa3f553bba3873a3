package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// AddedToken is an entry of tokenizer.json's added_tokens.
type AddedToken struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// trieNode is a byte trie over added-token contents.
type trieNode struct {
	next  map[byte]*trieNode
	token int // index into the matcher's tokens, -1 if none ends here
}

// matcher finds added tokens in text with leftmost-longest semantics, like
// the Aho-Corasick automaton (MatchKind::LeftmostLongest) HF builds.
type matcher struct {
	root   *trieNode
	first  [256]bool
	tokens []*AddedToken
}

func newMatcher(toks []*AddedToken) *matcher {
	m := &matcher{root: &trieNode{token: -1}, tokens: toks}
	for i, t := range toks {
		if t.Content == "" {
			continue
		}
		n := m.root
		for j := 0; j < len(t.Content); j++ {
			if n.next == nil {
				n.next = map[byte]*trieNode{}
			}
			c, ok := n.next[t.Content[j]]
			if !ok {
				c = &trieNode{token: -1}
				n.next[t.Content[j]] = c
			}
			n = c
		}
		if n.token < 0 { // the first of duplicate contents wins
			n.token = i
		}
		m.first[t.Content[0]] = true
	}
	return m
}

// segment is a piece of the input: either an added token or plain text.
type segment struct {
	tok        *AddedToken // nil for plain text
	start, end int
}

// find splits s into plain text and added tokens, applying each token's
// single_word, lstrip and rstrip flags the way HF's
// AddedVocabulary::find_matches does. skip reports tokens to leave as text.
func (m *matcher) find(s string, skip func(*AddedToken) bool, fn func(segment)) {
	if len(m.tokens) == 0 {
		if len(s) > 0 {
			fn(segment{nil, 0, len(s)})
		}
		return
	}
	startOffset := 0
	for i := 0; i < len(s); {
		if !m.first[s[i]] {
			i++
			continue
		}
		best, bestEnd := -1, 0
		n := m.root
		for j := i; j < len(s); j++ {
			n = n.next[s[j]]
			if n == nil {
				break
			}
			if n.token >= 0 {
				best, bestEnd = n.token, j+1
			}
		}
		if best < 0 {
			i++
			continue
		}
		t := m.tokens[best]
		start, stop := i, bestEnd
		i = bestEnd // matches never overlap
		if skip != nil && skip(t) {
			continue
		}
		if t.SingleWord {
			startSpace := start == 0 || !endsWithWord(s[:start])
			stopSpace := stop == len(s) || !startsWithWord(s[stop:])
			if !startSpace || !stopSpace {
				continue
			}
		}
		if t.LStrip {
			start = max(spaceLeftmostAtEnd(s[:start]), startOffset)
		}
		if t.RStrip {
			stop += spaceRightmostAtStart(s[stop:])
		}
		if start > startOffset {
			fn(segment{nil, startOffset, start})
		}
		fn(segment{t, start, stop})
		startOffset = stop
	}
	if startOffset < len(s) {
		fn(segment{nil, startOffset, len(s)})
	}
}

// isAlnum is Rust's char::is_alphanumeric.
func isAlnum(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.Is(unicode.Other_Alphabetic, r)
}

func endsWithWord(s string) bool {
	r, _ := utf8.DecodeLastRuneInString(s)
	return isAlnum(r)
}

func startsWithWord(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return isAlnum(r)
}

func spaceLeftmostAtEnd(s string) int {
	i := len(s)
	for i > 0 {
		r, w := utf8.DecodeLastRuneInString(s[:i])
		if !unicode.IsSpace(r) {
			break
		}
		i -= w
	}
	return i
}

func spaceRightmostAtStart(s string) int {
	i := 0
	for i < len(s) {
		r, w := utf8.DecodeRuneInString(s[i:])
		if !unicode.IsSpace(r) {
			break
		}
		i += w
	}
	return i
}
