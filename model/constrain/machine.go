package constrain

// frame is one level of the recognizer's stack: a value not yet begun, or
// an object, array, string, number or literal being written.
type frame struct {
	kind fkind
	st   uint8
	ws   uint8  // whitespace bytes in the current run
	key  bool   // fString: an object key
	pend int8   // fString: bytes still due in an escape or a UTF-8 character
	lo   byte   // fString: range of the next UTF-8 continuation byte
	hi   byte   // (or, in a \u escape, lo = 1: the next hex digit must be 0-7)
	node int32  // the schema node (fValue: the value's; fObject, fArray: the container's)
	n    int32  // fString: characters; fArray: items begun
	trie int32  // fString key: key-trie node (strict objects); fLiteral: literal-trie node; fObject: pending property (-1 none)
	seen uint64 // fObject: properties written or begun
}

type fkind uint8

const (
	fValue fkind = iota
	fObject
	fArray
	fString
	fNumber
	fLiteral
)

// Object, array, string and number sub-states.
const (
	oOpen uint8 = iota
	oKey
	oAfterKey
	oValue
	oAfterValue
	oComma
)

const (
	aOpen uint8 = iota
	aValue
	aAfterValue
	aComma
)

const (
	sNormal uint8 = iota
	sEscape
	sHex
)

const (
	nStart uint8 = iota
	nMinus
	nZero
	nInt
	nDot
	nFrac
	nE
	nESign
	nExp
)

// maxWS is the longest whitespace run allowed between tokens; maxDepth the
// deepest nesting of any-values.
const (
	maxWS    = 24
	maxDepth = 32
)

func isWS(b byte) bool { return b == ' ' || b == '\n' || b == '\t' || b == '\r' }

// feed advances the stack st by byte b in place; false: b cannot come next
// (st is then garbage).
func (g *Grammar) feed(st *[]frame, b byte) bool {
	for {
		fr := *st
		if len(fr) == 0 {
			return false
		}
		top := &fr[len(fr)-1]
		switch top.kind {
		case fValue:
			return g.feedValue(st, b)
		case fObject:
			return g.feedObject(st, b)
		case fArray:
			return g.feedArray(st, b)
		case fString:
			return g.feedString(st, b)
		case fNumber:
			ok, pass := feedNumber(top, b, g.nodes[top.node].kind == kInteger)
			if ok {
				return true
			}
			if !pass {
				return false
			}
		case fLiteral:
			next := g.litChild(top.trie, b)
			if next >= 0 {
				top.trie = next
				if g.lits[next].term >= 0 && len(g.lits[next].edges) == 0 {
					g.pop(st)
				}
				return true
			}
			if g.lits[top.trie].term < 0 {
				return false
			}
		}
		// A number or literal that ends where b begins: b is its parent's.
		g.pop(st)
	}
}

// ws takes b as whitespace of top when it is some and the run allows it.
func ws(top *frame, b byte) (taken, ok bool) {
	if !isWS(b) {
		top.ws = 0
		return false, true
	}
	if top.ws >= maxWS {
		return true, false
	}
	top.ws++
	return true, true
}

func (g *Grammar) feedValue(st *[]frame, b byte) bool {
	fr := *st
	top := &fr[len(fr)-1]
	if len(fr) > 1 { // no whitespace before the root value
		if taken, ok := ws(top, b); taken {
			return ok
		}
	}
	id := top.node
	n := &g.nodes[id]
	if n.first[b/64]&(1<<(b%64)) == 0 {
		return false
	}
	if n.kind == kUnion {
		for _, a := range n.alts {
			if f := g.nodes[a].first; f[b/64]&(1<<(b%64)) != 0 {
				id, n = a, &g.nodes[a]
				break
			}
		}
	}
	*top = frame{node: id, trie: -1}
	switch {
	case n.kind == kLiteral:
		top.kind, top.trie = fLiteral, n.lit
		return g.feed(st, b)
	case b == '{':
		if len(fr) > maxDepth {
			return false
		}
		top.kind, top.st = fObject, oOpen
		return true
	case b == '[':
		if len(fr) > maxDepth {
			return false
		}
		top.kind, top.st = fArray, aOpen
		return true
	case n.kind == kAny && (b == 't' || b == 'f' || b == 'n'):
		top.kind, top.trie = fLiteral, g.anyLit
		return g.feed(st, b)
	case b == '"':
		top.kind = fString
		return true
	}
	top.kind, top.st = fNumber, nStart
	return g.feed(st, b)
}

func (g *Grammar) feedObject(st *[]frame, b byte) bool {
	fr := *st
	top := &fr[len(fr)-1]
	strict := g.nodes[top.node].kind == kObject
	if top.st != oKey && top.st != oValue {
		if taken, ok := ws(top, b); taken {
			return ok
		}
	}
	n := &g.nodes[top.node]
	switch top.st {
	case oOpen, oComma:
		switch {
		case b == '"':
			if strict && n.props == nil {
				return false
			}
			if strict && g.lits[n.keys].below&^top.seen == 0 {
				return false
			}
			top.st = oKey
			k := frame{kind: fString, key: true, node: top.node, trie: -1}
			if strict {
				k.trie = n.keys
			}
			*st = append(fr, k)
			return true
		case b == '}' && top.st == oOpen:
			if strict && n.required&^top.seen != 0 {
				return false
			}
			g.pop(st)
			return true
		}
	case oAfterKey:
		if b == ':' {
			top.st = oValue
			child := g.anyNode
			if strict {
				child = n.props[top.trie].node
			}
			*st = append(fr, frame{kind: fValue, node: child, trie: -1})
			return true
		}
	case oAfterValue:
		switch b {
		case ',':
			if strict && g.lits[n.keys].below&^top.seen == 0 {
				return false
			}
			top.st = oComma
			return true
		case '}':
			if strict && n.required&^top.seen != 0 {
				return false
			}
			g.pop(st)
			return true
		}
	}
	return false
}

func (g *Grammar) feedArray(st *[]frame, b byte) bool {
	fr := *st
	top := &fr[len(fr)-1]
	if top.st != aValue {
		if taken, ok := ws(top, b); taken {
			return ok
		}
	}
	n := &g.nodes[top.node]
	items := g.anyNode
	if n.kind == kArray && n.items >= 0 {
		items = n.items
	}
	minItems, maxItems := 0, -1
	if n.kind == kArray {
		minItems, maxItems = n.minItems, n.maxItems
	}
	switch top.st {
	case aOpen, aComma:
		if b == ']' && top.st == aOpen {
			if minItems > 0 {
				return false
			}
			g.pop(st)
			return true
		}
		if maxItems >= 0 && int(top.n) >= maxItems {
			return false
		}
		top.n++
		top.st = aValue
		*st = append(fr, frame{kind: fValue, node: items, trie: -1})
		return g.feed(st, b)
	case aAfterValue:
		switch b {
		case ',':
			if maxItems >= 0 && int(top.n) >= maxItems {
				return false
			}
			top.st = aComma
			return true
		case ']':
			if int(top.n) < minItems {
				return false
			}
			g.pop(st)
			return true
		}
	}
	return false
}

func (g *Grammar) feedString(st *[]frame, b byte) bool {
	fr := *st
	top := &fr[len(fr)-1]
	n := &g.nodes[top.node]
	strictKey := top.key && top.trie >= 0
	maxLen := -1
	if !top.key && n.kind == kString {
		maxLen = n.maxLen
	}
	switch top.st {
	case sEscape:
		switch b {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			top.st = sNormal
		case 'u':
			top.st, top.pend, top.lo = sHex, 4, 0
		default:
			return false
		}
		return true
	case sHex:
		d := hexVal(b)
		if d < 0 || top.lo == 1 && d > 7 {
			return false
		}
		top.lo = 0
		if top.pend == 4 && d == 0xD { // no surrogates: each \u escape is one character
			top.lo = 1
		}
		if top.pend--; top.pend == 0 {
			top.st = sNormal
		}
		return true
	}
	if top.pend > 0 { // UTF-8 continuation
		if b < top.lo || b > top.hi {
			return false
		}
		top.pend--
		top.lo, top.hi = 0x80, 0xBF
		return !strictKey || g.keyStep(top, b, fr[len(fr)-2].seen)
	}
	switch {
	case b == '"':
		if strictKey {
			t := g.lits[top.trie].term
			if t < 0 || fr[len(fr)-2].seen&(1<<t) != 0 {
				return false
			}
		} else if !top.key && n.kind == kString && int(top.n) < n.minLen {
			return false
		}
		g.pop(st)
		return true
	case b < 0x20:
		return false
	}
	if maxLen >= 0 && int(top.n) >= maxLen {
		return false
	}
	switch {
	case b == '\\':
		if strictKey {
			return false
		}
		top.st = sEscape
	case b < 0x80:
	case b >= 0xC2 && b <= 0xDF:
		top.pend, top.lo, top.hi = 1, 0x80, 0xBF
	case b == 0xE0:
		top.pend, top.lo, top.hi = 2, 0xA0, 0xBF
	case b == 0xED:
		top.pend, top.lo, top.hi = 2, 0x80, 0x9F
	case b >= 0xE1 && b <= 0xEF:
		top.pend, top.lo, top.hi = 2, 0x80, 0xBF
	case b == 0xF0:
		top.pend, top.lo, top.hi = 3, 0x90, 0xBF
	case b >= 0xF1 && b <= 0xF3:
		top.pend, top.lo, top.hi = 3, 0x80, 0xBF
	case b == 0xF4:
		top.pend, top.lo, top.hi = 3, 0x80, 0x8F
	default:
		return false
	}
	top.n++
	return !strictKey || g.keyStep(top, b, fr[len(fr)-2].seen)
}

// keyStep moves a strict key's trie position by b; false when no property
// not yet written starts so.
func (g *Grammar) keyStep(top *frame, b byte, seen uint64) bool {
	next := g.litChild(top.trie, b)
	if next < 0 || g.lits[next].below&^seen == 0 {
		return false
	}
	top.trie = next
	return true
}

func hexVal(b byte) int {
	switch {
	case b >= '0' && b <= '9':
		return int(b - '0')
	case b >= 'a' && b <= 'f':
		return int(b-'a') + 10
	case b >= 'A' && b <= 'F':
		return int(b-'A') + 10
	}
	return -1
}

// Digit runs are bounded, so that every number fits a float64 (and an
// integer an int64) in any JSON parser.
const (
	maxDigits    = 18
	maxExpDigits = 2
)

// feedNumber takes b into a number: ok when it does; pass when the number
// is complete and b belongs to what follows. top.n counts the digits of
// the current run.
func feedNumber(top *frame, b byte, integer bool) (ok, pass bool) {
	digit := b >= '0' && b <= '9'
	s := top.st
	run := func(next uint8, limit int32) bool {
		if next != s {
			top.n = 0
		}
		if top.n >= limit {
			return false
		}
		top.st, top.n = next, top.n+1
		return true
	}
	switch {
	case s == nStart && b == '-':
		top.st = nMinus
	case (s == nStart || s == nMinus) && b == '0':
		top.st = nZero
	case (s == nStart || s == nMinus) && digit:
		return run(nInt, maxDigits), false
	case s == nInt && digit:
		if top.n < maxDigits {
			return run(nInt, maxDigits), false
		}
		return false, false
	case (s == nZero || s == nInt) && b == '.' && !integer:
		top.st = nDot
	case (s == nDot || s == nFrac) && digit:
		if s == nFrac && top.n >= maxDigits {
			return false, false
		}
		return run(nFrac, maxDigits), false
	case (s == nZero || s == nInt || s == nFrac) && (b == 'e' || b == 'E') && !integer:
		top.st = nE
	case s == nE && (b == '+' || b == '-'):
		top.st = nESign
	case (s == nE || s == nESign || s == nExp) && digit:
		if s == nExp && top.n >= maxExpDigits {
			return false, false
		}
		return run(nExp, maxExpDigits), false
	default:
		return false, numberDone(s)
	}
	return true, false
}

func numberDone(s uint8) bool { return s == nZero || s == nInt || s == nFrac || s == nExp }

// pop ends the top frame's value and moves its parent on.
func (g *Grammar) pop(st *[]frame) {
	old := *st
	done := old[len(old)-1]
	fr := old[:len(old)-1]
	*st = fr
	if len(fr) == 0 {
		return
	}
	p := &fr[len(fr)-1]
	p.ws = 0
	switch p.kind {
	case fObject:
		switch p.st {
		case oKey:
			p.st = oAfterKey
			p.trie = -1
			if g.nodes[p.node].kind == kObject {
				t := g.lits[done.trie].term
				p.trie = t
				p.seen |= 1 << t
			}
		case oValue:
			p.st = oAfterValue
		}
	case fArray:
		p.st = aAfterValue
	}
}
