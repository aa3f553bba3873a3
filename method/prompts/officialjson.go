package prompts

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/kaptinlin/jsonrepair"
)

// officialJSON is the JSON the official code's extract_json_from_response
// finds in a judge reply: the span from the first '{' to the last '}',
// read by Python's json_repair. A span holding one object is that object,
// repaired. A span holding several (a judge that thinks often writes braces
// before its verdict) is read as json_repair reads consecutive top-level
// values: each balanced {…} is repaired on its own, one that is empty or
// cannot be repaired is dropped, one with the same shape as the value before
// it (the same keys, recursively, and the same JSON types, an integer and a
// fraction being different types as in Python) replaces it, and more than
// one value left is a list, which has no "score". ok is false when there is
// no object to read.
func officialJSON(reply string) (obj map[string]json.RawMessage, ok bool) {
	start, end := strings.IndexByte(reply, '{'), strings.LastIndexByte(reply, '}')
	if start < 0 || end < start {
		return nil, false
	}
	span := reply[start : end+1]
	if o, ok := repairedObject(span); ok {
		return o, true
	}
	var vals []map[string]json.RawMessage
	for i := 0; i < len(span); {
		if span[i] != '{' {
			i++
			continue
		}
		j := balancedEnd(span, i)
		o, _ := repairedObject(span[i:j])
		i = j
		switch {
		case len(o) == 0:
			if len(vals) == 0 {
				vals = append(vals, o) // json_repair keeps a falsy first value until the next one
			}
			continue
		case len(vals) > 0 && (len(vals[len(vals)-1]) == 0 || sameShape(vals[len(vals)-1], o)):
			vals = vals[:len(vals)-1]
		}
		vals = append(vals, o)
	}
	if len(vals) != 1 || len(vals[0]) == 0 {
		return nil, false
	}
	return vals[0], true
}

// repairedObject repairs s into one JSON object.
func repairedObject(s string) (map[string]json.RawMessage, bool) {
	fixed, err := jsonrepair.Repair(s)
	if err != nil {
		return nil, false
	}
	var o map[string]json.RawMessage
	if json.Unmarshal([]byte(fixed), &o) != nil || o == nil {
		return nil, false
	}
	return o, true
}

// balancedEnd returns the index after the brace that closes the '{' at
// start (strings skipped), or len(s) when none does.
func balancedEnd(s string, start int) int {
	depth, inStr, esc := 0, false, false
	for j := start; j < len(s); j++ {
		c := s[j]
		switch {
		case esc:
			esc = false
		case inStr && c == '\\':
			esc = true
		case c == '"':
			inStr = !inStr
		case inStr:
		case c == '{':
			depth++
		case c == '}':
			if depth--; depth == 0 {
				return j + 1
			}
		}
	}
	return len(s)
}

// sameShape is json_repair's ObjectComparer.is_same_object on two objects.
func sameShape(a, b map[string]json.RawMessage) bool {
	return sameValueShape(decode(mustRaw(a)), decode(mustRaw(b)))
}

func mustRaw(o map[string]json.RawMessage) []byte {
	b, _ := json.Marshal(o)
	return b
}

func decode(b []byte) any {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	_ = dec.Decode(&v)
	return v
}

// sameValueShape compares the types (Python's: int and float differ) and,
// for objects and arrays, the keys or lengths and the members.
func sameValueShape(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !sameValueShape(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !sameValueShape(x[i], y[i]) {
				return false
			}
		}
		return true
	case json.Number:
		y, ok := b.(json.Number)
		return ok && isInt(x) == isInt(y)
	case nil:
		return b == nil
	case string:
		_, ok := b.(string)
		return ok
	case bool:
		_, ok := b.(bool)
		return ok
	}
	return false
}

func isInt(n json.Number) bool { return !strings.ContainsAny(string(n), ".eE") }
