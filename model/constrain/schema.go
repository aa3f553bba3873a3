package constrain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/bits"
	"slices"
	"sort"
	"strings"
)

type kind uint8

const (
	kAny     kind = iota // any JSON value (objects with any keys)
	kObject              // an object with declared properties only
	kArray               // an array of items
	kString              // a string, with length bounds
	kNumber              // a JSON number
	kInteger             // a JSON number without fraction or exponent
	kLiteral             // one of a set of literal texts (enum, const, true/false, null)
	kUnion               // one of alternatives that start with different bytes
)

// snode is one compiled schema.
type snode struct {
	kind kind
	// kObject
	props    []prop
	keys     int32  // the trie of the property names
	required uint64 // bit i: props[i] is required
	// kArray (items < 0: any)
	items              int32
	minItems, maxItems int // maxItems < 0: no bound
	// kString (maxLen < 0: no bound)
	minLen, maxLen int
	// kLiteral
	lit int32 // the trie of the literals
	// kUnion
	alts []int32
	// first is the set of bytes a value may start with; min the fewest
	// bytes of one.
	first [4]uint64
	min   int
}

type prop struct {
	name string
	node int32
}

// trie is the literal and key tries: nodes with byte edges.
type lnode struct {
	edges []ledge
	term  int32 // index of the literal or property that ends here; -1: none
	depth int32
	dist  int32  // fewest bytes to a terminal node
	below uint64 // keys: the properties whose names pass through here
}

type ledge struct {
	b     byte
	child int32
}

func (g *Grammar) newTrie(words []string) int32 {
	root := int32(len(g.lits))
	g.lits = append(g.lits, lnode{term: -1})
	for w, s := range words {
		n := root
		for i := 0; i < len(s); i++ {
			next := int32(-1)
			for _, e := range g.lits[n].edges {
				if e.b == s[i] {
					next = e.child
					break
				}
			}
			if next < 0 {
				next = int32(len(g.lits))
				g.lits = append(g.lits, lnode{term: -1, depth: int32(i + 1)})
				g.lits[n].edges = append(g.lits[n].edges, ledge{s[i], next})
			}
			if w < 64 {
				g.lits[n].below |= 1 << w
			}
			n = next
		}
		g.lits[n].term = int32(w)
		if w < 64 {
			g.lits[n].below |= 1 << w
		}
	}
	g.setDist(root)
	return root
}

func (g *Grammar) setDist(n int32) int32 {
	d := int32(1 << 30)
	if g.lits[n].term >= 0 {
		d = 0
	}
	for _, e := range g.lits[n].edges {
		d = min(d, 1+g.setDist(e.child))
	}
	g.lits[n].dist = d
	return d
}

func (g *Grammar) litChild(n int32, b byte) int32 {
	for _, e := range g.lits[n].edges {
		if e.b == b {
			return e.child
		}
	}
	return -1
}

// compiler turns a JSON schema into snodes.
type compiler struct {
	g     *Grammar
	root  map[string]any
	refs  map[string]int32 // compiled $ref targets
	stack []string         // $refs being compiled, to refuse recursion
}

// annotations change nothing a value must be.
var annotations = map[string]bool{
	"title": true, "description": true, "default": true, "examples": true, "$schema": true, "$id": true,
	"$comment": true, "deprecated": true, "readOnly": true, "writeOnly": true, "$defs": true, "definitions": true,
}

// unenforced are the validation keywords decoding cannot enforce here: a
// schema with one is refused rather than given output that may not match.
var unenforced = []string{
	"pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
	"prefixItems", "contains", "minContains", "maxContains", "patternProperties", "propertyNames",
	"minProperties", "maxProperties", "dependentRequired", "dependentSchemas", "dependencies", "allOf",
	"not", "if", "then", "else", "unevaluatedProperties", "unevaluatedItems", "additionalItems",
	"$dynamicRef", "$recursiveRef", "contentSchema",
}

func (c *compiler) compile(v any, path string) (int32, error) {
	switch s := v.(type) {
	case bool:
		if !s {
			return 0, fmt.Errorf("%s: the schema false admits no value", path)
		}
		return c.g.add(snode{kind: kAny, items: -1}), nil
	case map[string]any:
		return c.compileObject(s, path)
	}
	return 0, fmt.Errorf("%s: a schema must be an object or a boolean, not %T", path, v)
}

func (c *compiler) compileObject(s map[string]any, path string) (int32, error) {
	for _, k := range unenforced {
		if _, ok := s[k]; ok {
			return 0, fmt.Errorf("%s: keyword %q is not supported by evolm's constrained decoding", path, k)
		}
	}
	if u, ok := s["uniqueItems"]; ok && u != false {
		return 0, fmt.Errorf("%s: keyword \"uniqueItems\" is not supported by evolm's constrained decoding", path)
	}
	if ref, ok := s["$ref"]; ok {
		if len(s) > 1 {
			for k := range s {
				if k != "$ref" && !annotations[k] {
					return 0, fmt.Errorf("%s: $ref beside %q is not supported", path, k)
				}
			}
		}
		r, _ := ref.(string)
		return c.ref(r, path)
	}
	if e, ok := s["enum"]; ok {
		vals, ok := e.([]any)
		if !ok || len(vals) == 0 {
			return 0, fmt.Errorf("%s: enum must be a non-empty array", path)
		}
		return c.literals(vals, s["type"], path)
	}
	if k, ok := s["const"]; ok {
		return c.literals([]any{k}, s["type"], path)
	}
	for _, key := range []string{"anyOf", "oneOf"} {
		if a, ok := s[key]; ok {
			alts, ok := a.([]any)
			if !ok || len(alts) == 0 {
				return 0, fmt.Errorf("%s: %s must be a non-empty array", path, key)
			}
			var ids []int32
			for i, alt := range alts {
				id, err := c.compile(alt, fmt.Sprintf("%s/%s/%d", path, key, i))
				if err != nil {
					return 0, err
				}
				ids = append(ids, id)
			}
			return c.union(ids, path+"/"+key)
		}
	}
	var types []string
	switch t := s["type"].(type) {
	case nil:
		switch {
		case s["properties"] != nil || s["required"] != nil:
			types = []string{"object"}
		case s["items"] != nil:
			types = []string{"array"}
		default:
			return c.g.add(snode{kind: kAny, items: -1}), nil
		}
	case string:
		types = []string{t}
	case []any:
		for _, x := range t {
			ts, ok := x.(string)
			if !ok {
				return 0, fmt.Errorf("%s: type entries must be strings", path)
			}
			types = append(types, ts)
		}
	default:
		return 0, fmt.Errorf("%s: type must be a string or an array of strings", path)
	}
	var ids []int32
	for _, t := range types {
		id, err := c.typed(t, s, path)
		if err != nil {
			return 0, err
		}
		ids = append(ids, id)
	}
	if len(ids) == 1 {
		return ids[0], nil
	}
	return c.union(ids, path+"/type")
}

func (c *compiler) typed(t string, s map[string]any, path string) (int32, error) {
	switch t {
	case "object":
		return c.object(s, path)
	case "array":
		n := snode{kind: kArray, items: -1, maxItems: -1}
		if it, ok := s["items"]; ok {
			id, err := c.compile(it, path+"/items")
			if err != nil {
				return 0, err
			}
			n.items = id
		}
		var err error
		if n.minItems, err = count(s, "minItems", 0, path); err != nil {
			return 0, err
		}
		if n.maxItems, err = count(s, "maxItems", -1, path); err != nil {
			return 0, err
		}
		if n.maxItems >= 0 && n.maxItems < n.minItems {
			return 0, fmt.Errorf("%s: maxItems %d < minItems %d", path, n.maxItems, n.minItems)
		}
		return c.g.add(n), nil
	case "string":
		n := snode{kind: kString}
		var err error
		if n.minLen, err = count(s, "minLength", 0, path); err != nil {
			return 0, err
		}
		if n.maxLen, err = count(s, "maxLength", -1, path); err != nil {
			return 0, err
		}
		if n.maxLen >= 0 && n.maxLen < n.minLen {
			return 0, fmt.Errorf("%s: maxLength %d < minLength %d", path, n.maxLen, n.minLen)
		}
		return c.g.add(n), nil
	case "number":
		return c.g.add(snode{kind: kNumber}), nil
	case "integer":
		return c.g.add(snode{kind: kInteger}), nil
	case "boolean":
		return c.g.add(snode{kind: kLiteral, lit: c.g.newTrie([]string{"true", "false"})}), nil
	case "null":
		return c.g.add(snode{kind: kLiteral, lit: c.g.newTrie([]string{"null"})}), nil
	}
	return 0, fmt.Errorf("%s: type %q is not a JSON schema type", path, t)
}

func (c *compiler) object(s map[string]any, path string) (int32, error) {
	switch a := s["additionalProperties"]; a {
	case nil, false:
	default:
		return 0, fmt.Errorf("%s: additionalProperties other than false is not supported by evolm's constrained decoding (undeclared keys are never generated)", path)
	}
	props, _ := s["properties"].(map[string]any)
	if s["properties"] != nil && props == nil {
		return 0, fmt.Errorf("%s: properties must be an object", path)
	}
	names := make([]string, 0, len(props))
	for k := range props {
		names = append(names, k)
	}
	sort.Strings(names)
	if len(names) > 64 {
		return 0, fmt.Errorf("%s: %d properties; evolm's constrained decoding takes at most 64", path, len(names))
	}
	n := snode{kind: kObject}
	for _, name := range names {
		if name == "" || strings.ContainsAny(name, "\"\\") || strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 }) {
			return 0, fmt.Errorf("%s: property name %q: empty names, quotes, backslashes and control characters are not supported", path, name)
		}
		id, err := c.compile(props[name], path+"/properties/"+name)
		if err != nil {
			return 0, err
		}
		n.props = append(n.props, prop{name: name, node: id})
	}
	if r, ok := s["required"]; ok {
		req, ok := r.([]any)
		if !ok {
			return 0, fmt.Errorf("%s: required must be an array of strings", path)
		}
		for _, x := range req {
			name, _ := x.(string)
			i := slices.IndexFunc(n.props, func(p prop) bool { return p.name == name })
			if i < 0 {
				return 0, fmt.Errorf("%s: required property %q is not among the properties (undeclared keys are never generated)", path, name)
			}
			n.required |= 1 << i
		}
	}
	n.keys = c.g.newTrie(names)
	return c.g.add(n), nil
}

func count(s map[string]any, key string, def int, path string) (int, error) {
	v, ok := s[key]
	if !ok {
		return def, nil
	}
	num, ok := v.(json.Number)
	if !ok {
		return 0, fmt.Errorf("%s: %s must be a non-negative integer", path, key)
	}
	i, err := num.Int64()
	if err != nil || i < 0 || i > 1<<20 {
		return 0, fmt.Errorf("%s: %s %s: want an integer in [0, %d]", path, key, num, 1<<20)
	}
	return int(i), nil
}

// literals compiles an enum: each value as its compact JSON text, kept
// when it has one of the types (if given).
func (c *compiler) literals(vals []any, types any, path string) (int32, error) {
	var words []string
	for _, v := range vals {
		if types != nil && !hasType(v, types) {
			continue
		}
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v); err != nil {
			return 0, fmt.Errorf("%s: enum value %v: %w", path, v, err)
		}
		words = append(words, strings.TrimSuffix(b.String(), "\n"))
	}
	if len(words) == 0 {
		return 0, fmt.Errorf("%s: no enum value has the schema's type", path)
	}
	return c.g.add(snode{kind: kLiteral, lit: c.g.newTrie(words)}), nil
}

func hasType(v any, types any) bool {
	var ts []any
	switch t := types.(type) {
	case string:
		ts = []any{t}
	case []any:
		ts = t
	}
	for _, t := range ts {
		switch t {
		case "string":
			if _, ok := v.(string); ok {
				return true
			}
		case "number":
			if _, ok := v.(json.Number); ok {
				return true
			}
		case "integer":
			if n, ok := v.(json.Number); ok {
				if _, err := n.Int64(); err == nil {
					return true
				}
			}
		case "boolean":
			if _, ok := v.(bool); ok {
				return true
			}
		case "null":
			if v == nil {
				return true
			}
		case "object":
			if _, ok := v.(map[string]any); ok {
				return true
			}
		case "array":
			if _, ok := v.([]any); ok {
				return true
			}
		}
	}
	return false
}

// union makes one node of alternatives, which must start with different
// bytes: the first byte of a value decides which one it is.
func (c *compiler) union(ids []int32, path string) (int32, error) {
	var flat []int32
	for _, id := range ids {
		if n := c.g.nodes[id]; n.kind == kUnion {
			flat = append(flat, n.alts...)
		} else {
			flat = append(flat, id)
		}
	}
	for i := range flat {
		for j := i + 1; j < len(flat); j++ {
			a, b := c.g.nodes[flat[i]].first, c.g.nodes[flat[j]].first
			for w := range a {
				if a[w]&b[w] != 0 {
					return 0, fmt.Errorf("%s: alternatives %d and %d can start alike; evolm's constrained decoding takes alternatives that differ in their first character (object, array, string, number, literal)", path, i, j)
				}
			}
		}
	}
	return c.g.add(snode{kind: kUnion, alts: flat}), nil
}

func (c *compiler) ref(r, path string) (int32, error) {
	if id, ok := c.refs[r]; ok {
		return id, nil
	}
	if slices.Contains(c.stack, r) {
		return 0, fmt.Errorf("%s: recursive $ref %q is not supported by evolm's constrained decoding", path, r)
	}
	var target any
	switch {
	case r == "#":
		target = c.root
	case strings.HasPrefix(r, "#/$defs/") || strings.HasPrefix(r, "#/definitions/"):
		sec, name, _ := strings.Cut(strings.TrimPrefix(r, "#/"), "/")
		defs, _ := c.root[sec].(map[string]any)
		name = strings.ReplaceAll(strings.ReplaceAll(name, "~1", "/"), "~0", "~")
		if defs == nil || defs[name] == nil {
			return 0, fmt.Errorf("%s: $ref %q names no definition", path, r)
		}
		target = defs[name]
	default:
		return 0, fmt.Errorf("%s: $ref %q: only local references (#, #/$defs/…, #/definitions/…) are supported", path, r)
	}
	c.stack = append(c.stack, r)
	id, err := c.compile(target, r)
	c.stack = c.stack[:len(c.stack)-1]
	if err != nil {
		return 0, err
	}
	c.refs[r] = id
	return id, nil
}

// add appends n with its first bytes and minimal length, and returns its
// index.
func (g *Grammar) add(n snode) int32 {
	set := func(bs string) {
		for i := 0; i < len(bs); i++ {
			n.first[bs[i]/64] |= 1 << (bs[i] % 64)
		}
	}
	const num = "-0123456789"
	switch n.kind {
	case kAny:
		set(`{["tfn` + num)
		n.min = 1
	case kObject:
		set("{")
		n.min = 2 + g.objectCost(&n, n.required) + max(bits.OnesCount64(n.required)-1, 0)
	case kArray:
		set("[")
		n.min = 2
		if n.minItems > 0 {
			n.min += n.minItems*g.itemMin(&n) + n.minItems - 1
		}
	case kString:
		set(`"`)
		n.min = 2 + n.minLen
	case kNumber, kInteger:
		set(num)
		n.min = 1
	case kLiteral:
		for _, e := range g.lits[n.lit].edges {
			set(string(e.b))
		}
		n.min = int(g.lits[n.lit].dist)
	case kUnion:
		n.min = 1 << 30
		for _, a := range n.alts {
			for w := range n.first {
				n.first[w] |= g.nodes[a].first[w]
			}
			n.min = min(n.min, g.nodes[a].min)
		}
	}
	g.nodes = append(g.nodes, n)
	return int32(len(g.nodes) - 1)
}

// itemMin is the fewest bytes of one item of array node n.
func (g *Grammar) itemMin(n *snode) int {
	if n.items < 0 {
		return 1
	}
	return g.nodes[n.items].min
}

// objectCost is Σ over the properties in set of `"name":` and the fewest
// bytes of its value.
func (g *Grammar) objectCost(n *snode, set uint64) int {
	c := 0
	for set != 0 {
		i := bits.TrailingZeros64(set)
		set &^= 1 << i
		c += len(n.props[i].name) + 3 + g.nodes[n.props[i].node].min
	}
	return c
}
