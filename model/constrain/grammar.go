// Package constrain is structured output: it restricts a sample's tokens so
// that its text is a JSON value of a schema (response_format json_schema,
// vLLM's guided_json), any JSON object (json_object), or one of given
// strings (guided_choice).
//
// A Grammar is a byte-level recognizer compiled from the schema, with the
// tokenizer's vocabulary as a byte trie (Vocab); a Constraint is one
// sample's position in it. At each step Allow walks the vocabulary trie
// with the recognizer, so that each token prefix is read once, and allows
// exactly the tokens whose bytes the recognizer accepts. Special tokens are
// never allowed (the engine adds its stop tokens once the value is
// complete).
//
// The budget. Allow is told how many tokens may still come, and allows a
// token only if the value can still be completed after it within them: the
// recognizer knows the fewest bytes that complete any state (cost), and
// every byte is a token of a byte-level BPE vocabulary. So a sample whose
// max_tokens is at least MinTokens always ends with a complete value, and
// its text always parses and validates: the engine never needs to cut one
// off.
//
// What a schema may say. Types object, array, string, number, integer,
// boolean and null (one or several); properties, required and
// additionalProperties false (xgrammar's strict mode: undeclared keys are
// never generated, and additionalProperties absent means false); items,
// minItems, maxItems; minLength, maxLength; enum and const (written as
// compact JSON); anyOf and oneOf whose alternatives start with different
// characters; local $ref without recursion; annotations (title,
// description, default, examples …). Keywords that constrain values in
// ways the recognizer cannot (pattern, format, minimum, multipleOf,
// allOf …) make Compile fail with the keyword's name, so a request is
// refused rather than answered with output that may not match. Properties
// come in any order, each at most once; whitespace between tokens comes in
// runs of at most 24 bytes; strings hold no \u escapes of surrogates.
package constrain

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strings"
	"sync"
)

// Grammar is a compiled constraint over one vocabulary. It is safe for
// concurrent use; its Constraints are not.
type Grammar struct {
	nodes   []snode
	lits    []lnode
	root    int32
	anyNode int32 // a kAny node: the values of json_object
	anyLit  int32 // the trie of true, false, null
	vocab   *Vocab

	mu    sync.Mutex
	cache map[string]*maskEntry // allowed tokens by recognizer state (Allow)
}

// maskEntry is the tokens allowed in one state without a budget, and the
// largest cost after any of them: the entry holds under a budget that
// covers it.
type maskEntry struct {
	bits     []uint64
	maxAfter int
}

// maxCache bounds the cached masks of a Grammar (each V/8 bytes).
const maxCache = 256

func newGrammar(v *Vocab) *Grammar {
	g := &Grammar{vocab: v, cache: map[string]*maskEntry{}}
	g.anyLit = g.newTrie([]string{"true", "false", "null"})
	g.anyNode = g.add(snode{kind: kAny, items: -1})
	return g
}

// Schema compiles a JSON schema (a JSON object or boolean) over v.
func Schema(schema []byte, v *Vocab) (*Grammar, error) {
	var root any
	dec := json.NewDecoder(strings.NewReader(string(schema)))
	dec.UseNumber()
	if err := dec.Decode(&root); err != nil {
		return nil, fmt.Errorf("json schema: %w", err)
	}
	g := newGrammar(v)
	c := &compiler{g: g, refs: map[string]int32{}}
	c.root, _ = root.(map[string]any)
	id, err := c.compile(root, "#")
	if err != nil {
		return nil, fmt.Errorf("json schema: %w", err)
	}
	g.root = id
	return g, nil
}

// Object is any JSON object (response_format json_object).
func Object(v *Vocab) *Grammar {
	g := newGrammar(v)
	g.root = g.add(snode{kind: kUnion, alts: []int32{g.anyNode}})
	// Only '{' starts a value of the root.
	g.nodes[g.root].first = [4]uint64{}
	g.nodes[g.root].first['{'/64] |= 1 << ('{' % 64)
	g.nodes[g.root].min = 2
	return g
}

// Choice is exactly one of the strings (vLLM's guided_choice), as text.
func Choice(choices []string, v *Vocab) (*Grammar, error) {
	if len(choices) == 0 {
		return nil, errors.New("guided_choice: no choices")
	}
	for i, c := range choices {
		if c == "" {
			return nil, fmt.Errorf("guided_choice: choice %d is empty", i)
		}
	}
	g := newGrammar(v)
	g.root = g.add(snode{kind: kLiteral, lit: g.newTrie(choices)})
	return g, nil
}

// MinTokens is the fewest tokens of a complete value: a request whose
// max_tokens is smaller cannot be answered.
func (g *Grammar) MinTokens() int { return g.nodes[g.root].min }

// Constraint is one sample's position in a Grammar; it implements
// generate.Constraint.
type Constraint struct {
	g  *Grammar
	st []frame
	// levels are the DFS's stacks, one per depth of the vocabulary trie.
	levels [][]frame
}

// New returns a constraint at the start of a value.
func (g *Grammar) New() *Constraint {
	return &Constraint{g: g, st: []frame{{kind: fValue, node: g.root, trie: -1}}}
}

// Accept advances past token id.
func (c *Constraint) Accept(id int) error {
	v := c.g.vocab
	if id < 0 || id >= len(v.tokens) || len(v.tokens[id]) == 0 {
		return fmt.Errorf("token %d has no text the constraint can take", id)
	}
	for _, b := range v.tokens[id] {
		if !c.g.feed(&c.st, b) {
			return fmt.Errorf("token %d (%q) does not continue the value", id, v.tokens[id])
		}
	}
	return nil
}

// Complete reports whether the text so far is a whole value.
func (c *Constraint) Complete() bool { return c.g.complete(c.st) }

// Allow sets allow[id] for every token that may come next with at most
// remaining tokens left (this one included), and reports whether the value
// is complete already.
func (c *Constraint) Allow(allow []bool, remaining int) bool {
	g := c.g
	key := g.key(c.st)
	g.mu.Lock()
	e := g.cache[key]
	g.mu.Unlock()
	if e == nil {
		e = c.walk(math.MaxInt32)
		g.mu.Lock()
		if len(g.cache) >= maxCache {
			clear(g.cache)
		}
		g.cache[key] = e
		g.mu.Unlock()
	}
	if e.maxAfter > remaining-1 {
		e = c.walk(remaining)
	}
	for w, word := range e.bits {
		for word != 0 {
			i := bits.TrailingZeros64(word)
			word &^= 1 << i
			allow[w*64+i] = true
		}
	}
	return c.Complete()
}

// walk returns the tokens allowed with at most remaining tokens left.
func (c *Constraint) walk(remaining int) *maskEntry {
	v := c.g.vocab
	e := &maskEntry{bits: make([]uint64, (v.size+63)/64)}
	if len(c.levels) < v.maxLen+1 {
		c.levels = make([][]frame, v.maxLen+1)
	}
	c.levels[0] = append(c.levels[0][:0], c.st...)
	c.dfs(0, 0, remaining, e)
	return e
}

func (c *Constraint) dfs(node int32, depth, remaining int, e *maskEntry) {
	g, v := c.g, c.g.vocab
	n := v.nodes[node]
	for _, ed := range v.edges[n.edge0 : n.edge0+n.nedge] {
		next := append(c.levels[depth+1][:0], c.levels[depth]...)
		ok := g.feed(&next, ed.b)
		c.levels[depth+1] = next
		if !ok {
			continue
		}
		child := v.nodes[ed.child]
		if child.nid > 0 {
			if after := g.cost(next); after <= remaining-1 {
				e.maxAfter = max(e.maxAfter, after)
				for _, id := range v.ids[child.id0 : child.id0+child.nid] {
					e.bits[id/64] |= 1 << (id % 64)
				}
			}
		}
		if child.nedge > 0 {
			c.dfs(ed.child, depth+1, remaining, e)
			// dfs may have grown the slice at depth+2 only; ours is intact.
		}
	}
}

// key encodes a recognizer state for the mask cache, leaving out the
// counts that no limit reads.
func (g *Grammar) key(st []frame) string {
	var b strings.Builder
	for _, f := range st {
		n := f.n
		switch node := &g.nodes[f.node]; {
		case f.kind == fString && (f.key || node.kind != kString || node.minLen == 0 && node.maxLen < 0):
			n = 0
		case f.kind == fArray && (node.kind != kArray || node.minItems == 0 && node.maxItems < 0):
			n = 0
		}
		var key byte
		if f.key {
			key = 1
		}
		fmt.Fprintf(&b, "%d.%d.%d.%d.%d.%d.%d.%d.%d.%d.%d|", f.kind, f.st, f.ws, key, f.pend, f.lo, f.hi, f.node, n, f.trie, f.seen)
	}
	return b.String()
}
