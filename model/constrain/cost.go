package constrain

import "math/bits"

// complete reports whether st holds a whole value: nothing left, or only a
// number or literal that may end here.
func (g *Grammar) complete(st []frame) bool {
	switch {
	case len(st) == 0:
		return true
	case len(st) > 1:
		return false
	case st[0].kind == fNumber:
		return numberDone(st[0].st)
	case st[0].kind == fLiteral:
		return g.lits[st[0].trie].term >= 0
	}
	return false
}

// cost is the fewest bytes that complete st: each frame's share, the
// frames above it assumed completed at their own least cost.
func (g *Grammar) cost(st []frame) int {
	c := 0
	for i := range st {
		f := &st[i]
		switch f.kind {
		case fValue:
			c += g.nodes[f.node].min
		case fObject:
			var above *frame
			if i+1 < len(st) {
				above = &st[i+1]
			}
			c += g.objectRest(f, above)
		case fArray:
			c += g.arrayRest(f)
		case fString:
			if f.key && f.trie >= 0 {
				continue // the strict object counts its key
			}
			c += int(f.pend) + 1
			if f.st == sEscape {
				c++
			}
			if n := &g.nodes[f.node]; !f.key && n.kind == kString {
				c += max(n.minLen-int(f.n), 0)
			}
		case fNumber:
			if !numberDone(f.st) {
				c++
			}
		case fLiteral:
			c += int(g.lits[f.trie].dist)
		}
	}
	return c
}

func (g *Grammar) objectRest(f *frame, key *frame) int {
	n := &g.nodes[f.node]
	if n.kind != kObject { // any keys, any values
		switch f.st {
		case oKey:
			return 3 // the key's own share is its frame's; then `:0}`
		case oAfterKey:
			return 3
		case oComma:
			return 5 // `"":0}`
		}
		return 1
	}
	R := n.required &^ f.seen
	r := bits.OnesCount64(R)
	base := g.objectCost(n, R)
	switch f.st {
	case oOpen:
		return base + max(r-1, 0) + 1
	case oAfterKey:
		return 1 + g.nodes[n.props[f.trie].node].min + base + r + 1
	case oValue, oAfterValue:
		return base + r + 1
	case oComma:
		if r > 0 {
			return base + r - 1 + 1
		}
		best := 1 << 30
		for free := ^f.seen & (1<<len(n.props) - 1); free != 0; {
			i := bits.TrailingZeros64(free)
			free &^= 1 << i
			best = min(best, g.objectCost(n, 1<<i))
		}
		return best + 1
	case oKey:
		best := 1 << 30
		depth := int(g.lits[key.trie].depth)
		for cand := g.lits[key.trie].below &^ f.seen; cand != 0; {
			i := bits.TrailingZeros64(cand)
			cand &^= 1 << i
			rest, rr := R&^(1<<i), r
			if R&(1<<i) != 0 {
				rr--
			}
			c := len(n.props[i].name) - depth + 1 + 1 + g.nodes[n.props[i].node].min + g.objectCost(n, rest) + rr + 1
			best = min(best, c)
		}
		return best
	}
	return 1
}

func (g *Grammar) arrayRest(f *frame) int {
	n := &g.nodes[f.node]
	minItems, itemMin := 0, 1
	if n.kind == kArray {
		minItems, itemMin = n.minItems, g.itemMin(n)
	}
	switch f.st {
	case aOpen:
		if minItems == 0 {
			return 1
		}
		return minItems*itemMin + minItems - 1 + 1
	case aComma:
		k := max(minItems-int(f.n), 1)
		return k*itemMin + k - 1 + 1
	}
	k := max(minItems-int(f.n), 0)
	return k*(1+itemMin) + 1
}
