// Package jsonobj finds JSON objects embedded in a model's reply: prose,
// Markdown fences and <think> remnants around them are skipped. The rubric
// parser (package schemas) and the judge parser (package stages/prompts)
// both extract through it, so that "a JSON object in the reply" means one
// thing.
package jsonobj

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/kaptinlin/jsonrepair"
)

// Object is a JSON object with its values left undecoded.
type Object = map[string]json.RawMessage

// ErrNoJSON is returned when no JSON object can be extracted.
var ErrNoJSON = errors.New("no JSON object found")

// All returns every top-level JSON object embedded in s, in order (objects
// inside an object are not returned separately). A '{' that does not start a
// valid object is skipped, and the search goes on from the next '{', which
// may be inside it.
func All(s string) []Object {
	var out []Object
	for i := 0; ; {
		obj, end := next(s, i)
		if obj == nil {
			return out
		}
		out = append(out, obj)
		i = end
	}
}

// First returns the first JSON object embedded in s (All(s)[0]), or an error
// wrapping ErrNoJSON.
func First(s string) (Object, error) {
	if obj, _ := next(s, 0); obj != nil {
		return obj, nil
	}
	return nil, ErrNoJSON
}

// next decodes the first valid object that starts at a '{' at or after
// s[from:] and returns it with the offset just past it; nil when none.
func next(s string, from int) (Object, int) {
	for i := from; i < len(s); i++ {
		j := strings.IndexByte(s[i:], '{')
		if j < 0 {
			return nil, len(s)
		}
		i += j
		dec := json.NewDecoder(strings.NewReader(s[i:]))
		var obj Object
		if dec.Decode(&obj) == nil && obj != nil {
			return obj, i + int(dec.InputOffset())
		}
	}
	return nil, len(s)
}

// Repaired is the official EVOLM extract_json_from_response: the span from
// the first '{' to the last '}', repaired (trailing commas, single quotes,
// comments, Python constants …) by github.com/kaptinlin/jsonrepair, a port of
// josdejong/jsonrepair standing in for Python's json_repair, must be one JSON
// object. Errors wrap ErrNoJSON.
func Repaired(s string) (Object, error) {
	start, end := strings.IndexByte(s, '{'), strings.LastIndexByte(s, '}')
	if start < 0 || end < start {
		return nil, ErrNoJSON
	}
	fixed, err := jsonrepair.Repair(s[start : end+1])
	if err != nil {
		return nil, fmt.Errorf("%w: unrepairable: %v", ErrNoJSON, err)
	}
	var obj Object
	if err := json.Unmarshal([]byte(fixed), &obj); err != nil {
		// The repairer passes numbers like .5 through; Python's json_repair
		// reads them.
		obj = nil
		if json.Unmarshal([]byte(leadingZeros(fixed)), &obj) != nil {
			return nil, fmt.Errorf("%w: the repaired text is not one object", ErrNoJSON)
		}
	}
	if obj == nil {
		return nil, fmt.Errorf("%w: the repaired text is not one object", ErrNoJSON)
	}
	return obj, nil
}

// leadingZeros writes a 0 before every number outside strings that starts
// with a bare '.' (".5" → "0.5", "-.5" → "-0.5").
func leadingZeros(s string) string {
	var b strings.Builder
	inStr, esc := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case esc:
			esc = false
		case inStr && c == '\\':
			esc = true
		case c == '"':
			inStr = !inStr
		case !inStr && c == '.' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9' && (i == 0 || !(s[i-1] >= '0' && s[i-1] <= '9')):
			b.WriteByte('0')
		}
		b.WriteByte(c)
	}
	return b.String()
}
