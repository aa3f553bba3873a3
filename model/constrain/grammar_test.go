package constrain

import (
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// testVocab is every single byte plus multi-byte pieces that cross JSON
// structure (`":`, `", "`, `{"`, `true`, digits, words, UTF-8), the way a
// BPE vocabulary's tokens do; id 0 stays out (a special token).
func testVocab() *Vocab {
	toks := [][]byte{nil}
	for b := 1; b < 256; b++ {
		toks = append(toks, []byte{byte(b)})
	}
	for _, s := range []string{`":`, `": `, `", "`, `{"`, `"}`, `}}`, `]}`, `["`, `"]`, `true`, `false`, `null`, `tr`, `ue`,
		`12`, `345`, `0.`, `e-`, `name`, `criterion`, `weight`, `criteria`, ` the`, `ing`, `é`, "\u4e2d", `\n`, `\"`, `\u00`,
		`{"criteria": [`, `, `, `",`, `1.0`, `-1`, `yes`, `no`, `maybe`, `"yes"`, `\ud83d`, "\xe4\xb8", "\xad"} {
		toks = append(toks, []byte(s))
	}
	return NewVocab(toks)
}

var schemas = []string{
	`{"type":"object","properties":{"criteria":{"type":"array","minItems":2,"maxItems":4,"items":{"type":"object","properties":{"criterion":{"type":"string","maxLength":40},"weight":{"type":"number"}},"required":["criterion","weight"]}}},"required":["criteria"]}`,
	`{"type":"object","properties":{"answer":{"enum":["yes","no",1,null,true]},"n":{"type":"integer"},"tags":{"type":"array","items":{"type":"string","minLength":2}},"opt":{"type":["string","null"]}},"required":["answer","n"],"additionalProperties":false}`,
	`{"$defs":{"pt":{"type":"object","properties":{"x":{"type":"number"},"y":{"type":"number"}},"required":["x","y"]}},"type":"array","items":{"$ref":"#/$defs/pt"},"minItems":1}`,
	`{"anyOf":[{"type":"string","maxLength":5},{"type":"integer"},{"type":"object","properties":{"k":{"const":"v"}},"required":["k"]}]}`,
	`{"type":"boolean"}`,
	`{"type":"number"}`,
	`{"type":"object"}`,
	`{"type":"string","minLength":3,"maxLength":6}`,
}

// TestRandomWalksValidate samples random allowed tokens under random token
// budgets and requires every finished text to parse and validate against
// its schema (santhosh-tekuri/jsonschema), and every budget of at least
// MinTokens to finish.
func TestRandomWalksValidate(t *testing.T) {
	v := testVocab()
	for si, schema := range schemas {
		g, err := Schema([]byte(schema), v)
		if err != nil {
			t.Fatalf("schema %d: %v", si, err)
		}
		val, err := NewValidator([]byte(schema))
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(uint64(si), 7))
		for walk := range 200 {
			budget := g.MinTokens() + rng.IntN(30)
			text := randomWalk(t, g, v, budget, rng)
			if err := val.Validate(text); err != nil {
				t.Fatalf("schema %d walk %d (budget %d): %q does not validate: %v", si, walk, budget, text, err)
			}
		}
	}
}

// randomWalk samples allowed tokens, preferring the long ones, until the
// value is complete and a coin says stop, or the budget is spent.
func randomWalk(t *testing.T, g *Grammar, v *Vocab, budget int, rng *rand.Rand) string {
	t.Helper()
	c := g.New()
	var text strings.Builder
	allow := make([]bool, v.Size())
	for used := 0; used < budget; used++ {
		clear(allow)
		complete := c.Allow(allow, budget-used)
		if complete && rng.IntN(3) == 0 {
			return text.String()
		}
		var ids []int
		for id, ok := range allow {
			if ok {
				ids = append(ids, id)
			}
		}
		if len(ids) == 0 {
			if !complete {
				t.Fatalf("no token allowed after %q with %d tokens left", text.String(), budget-used)
			}
			return text.String()
		}
		id := ids[rng.IntN(len(ids))]
		if err := c.Accept(id); err != nil {
			t.Fatalf("after %q: allowed token %q refused: %v", text.String(), v.tokens[id], err)
		}
		text.Write(v.tokens[id])
	}
	if !c.Complete() {
		t.Fatalf("budget %d spent on an incomplete value %q", budget, text.String())
	}
	return text.String()
}

// TestCostIsExact checks, on the states random walks pass through, that
// cost is the length of the shortest byte string that completes the value
// (found by breadth-first search over bytes).
func TestCostIsExact(t *testing.T) {
	v := testVocab()
	checked := 0
	defer func() { t.Logf("%d states checked", checked) }()
	for si, schema := range schemas {
		g, err := Schema([]byte(schema), v)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(uint64(si), 11))
		alpha := alphabet(schema)
		for walk := range 20 {
			c := g.New()
			for step := 0; step < 12; step++ {
				// The search is exponential in the answer: states that need
				// more than 24 bytes are left to the others.
				if got := g.cost(c.st); got <= 24 {
					checked++
					if want := shortest(g, c.st, alpha); want != got {
						t.Fatalf("schema %d walk %d: state %s: cost %d, shortest completion %d", si, walk, g.key(c.st), got, want)
					}
				}
				allow := make([]bool, v.Size())
				c.Allow(allow, 1000)
				var ids []int
				for id, ok := range allow {
					if ok {
						ids = append(ids, id)
					}
				}
				if len(ids) == 0 {
					break
				}
				if err := c.Accept(ids[rng.IntN(len(ids))]); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// alphabet is enough bytes for a shortest completion under schema:
// structure, the digits, the letters of the schema's text (property names,
// literals), and the continuation bytes a UTF-8 character in progress may
// need. Whitespace never shortens one.
func alphabet(schema string) []byte {
	set := map[byte]bool{}
	for _, b := range []byte("{}[]\":,.-0123456789aeEtrufalsn\x80\x90\xa0" + schema) {
		set[b] = true
	}
	var out []byte
	for b := range set {
		if !isWS(b) {
			out = append(out, b)
		}
	}
	slices.Sort(out)
	return out
}

// shortest is the fewest bytes after which st is complete, by BFS over
// alphabet.
func shortest(g *Grammar, st []frame, alphabet []byte) int {
	type item struct {
		st []frame
		d  int
	}
	seen := map[string]bool{g.key(st): true}
	q := []item{{slices.Clone(st), 0}}
	for len(q) > 0 {
		it := q[0]
		q = q[1:]
		if g.complete(it.st) {
			return it.d
		}
		for _, b := range alphabet {
			next := slices.Clone(it.st)
			if !g.feed(&next, b) {
				continue
			}
			if k := g.key(next); !seen[k] && it.d < 200 {
				seen[k] = true
				q = append(q, item{next, it.d + 1})
			}
		}
	}
	return -1
}

func TestObjectAndChoice(t *testing.T) {
	v := testVocab()
	rng := rand.New(rand.NewPCG(3, 4))
	g := Object(v)
	for range 100 {
		text := randomWalk(t, g, v, 2+rng.IntN(40), rng)
		var m map[string]any
		dec := json.NewDecoder(strings.NewReader(text))
		dec.UseNumber()
		if err := dec.Decode(&m); err != nil {
			t.Fatalf("json_object walk %q: %v", text, err)
		}
	}
	choices := []string{"yes", "no", "maybe", "yes sir"}
	g, err := Choice(choices, v)
	if err != nil {
		t.Fatal(err)
	}
	for range 100 {
		if text := randomWalk(t, g, v, 10, rng); !slices.Contains(choices, text) {
			t.Fatalf("choice walk %q is not a choice", text)
		}
	}
}

func TestRefusedSchemas(t *testing.T) {
	v := testVocab()
	for _, tc := range []struct{ schema, want string }{
		{`{"type":"string","pattern":"^a"}`, `"pattern"`},
		{`{"type":"integer","minimum":0}`, `"minimum"`},
		{`{"type":"object","additionalProperties":true}`, "additionalProperties"},
		{`{"anyOf":[{"type":"integer"},{"type":"number"}]}`, "start alike"},
		{`{"$defs":{"n":{"type":"array","items":{"$ref":"#/$defs/n"}}},"$ref":"#/$defs/n"}`, "recursive"},
		{`{"type":"object","required":["x"]}`, `"x"`},
		{`{"type":"string","format":"date"}`, `"format"`},
		{`false`, "admits no value"},
		{`{"type":"strin"}`, `"strin"`},
	} {
		_, err := Schema([]byte(tc.schema), v)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %s", tc.schema, err, tc.want)
		}
	}
}
