package constrain

import (
	"slices"
	"sort"
)

// Vocab is a tokenizer's vocabulary as byte strings, held in a byte trie so
// that a mask walks each shared prefix once.
type Vocab struct {
	tokens [][]byte
	size   int
	nodes  []vnode
	edges  []vedge
	ids    []int32
	maxLen int
}

type vnode struct {
	edge0, nedge int32 // children: edges[edge0 : edge0+nedge], by byte
	id0, nid     int32 // tokens that end here: ids[id0 : id0+nid]
}

type vedge struct {
	b     byte
	child int32
}

// NewVocab builds the trie of tokens: tokens[id] is the byte string token
// id decodes to; nil or empty keeps id out of every mask (special tokens,
// ids past the tokenizer's).
func NewVocab(tokens [][]byte) *Vocab {
	order := make([]int, 0, len(tokens))
	for id, t := range tokens {
		if len(t) > 0 {
			order = append(order, id)
		}
	}
	sort.Slice(order, func(a, b int) bool {
		if c := slices.Compare(tokens[order[a]], tokens[order[b]]); c != 0 {
			return c < 0
		}
		return order[a] < order[b]
	})
	v := &Vocab{tokens: tokens, size: len(tokens)}
	// Built recursively over the sorted tokens: the tokens under a node
	// are a contiguous run sharing the node's prefix.
	type item struct {
		node   int32
		lo, hi int // run of order
		depth  int
	}
	v.nodes = append(v.nodes, vnode{})
	stack := []item{{0, 0, len(order), 0}}
	for len(stack) > 0 {
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		lo := it.lo
		n := &v.nodes[it.node]
		n.id0 = int32(len(v.ids))
		for lo < it.hi && len(tokens[order[lo]]) == it.depth {
			v.ids = append(v.ids, int32(order[lo]))
			lo++
		}
		n.nid = int32(len(v.ids)) - n.id0
		v.maxLen = max(v.maxLen, it.depth)
		var kids []item
		var bytes []byte
		for lo < it.hi {
			b := tokens[order[lo]][it.depth]
			hi := lo
			for hi < it.hi && tokens[order[hi]][it.depth] == b {
				hi++
			}
			child := int32(len(v.nodes))
			v.nodes = append(v.nodes, vnode{})
			kids = append(kids, item{child, lo, hi, it.depth + 1})
			bytes = append(bytes, b)
			lo = hi
		}
		n = &v.nodes[it.node]
		n.edge0, n.nedge = int32(len(v.edges)), int32(len(kids))
		for k, kid := range kids {
			v.edges = append(v.edges, vedge{bytes[k], kid.node})
		}
		for k := len(kids) - 1; k >= 0; k-- {
			stack = append(stack, kids[k])
		}
	}
	return v
}

// Size is the number of token ids (the mask length).
func (v *Vocab) Size() int { return v.size }
