package pipeline

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cast"
)

func suggest(key string, known map[string]keyInfo) string {
	best, bestD := "", 4
	for k := range known {
		if d := levenshtein(key, k); d < bestD {
			best, bestD = k, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %s?)", best)
}

func levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

func splitList(s string) []string {
	s = strings.TrimSpace(strings.Trim(strings.TrimSpace(s), "[]"))
	if s == "" {
		return []string{}
	}
	parts := strings.Split(s, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}

// coerce converts a raw value to the Go type of t.
func coerce(t FieldType, raw any) (any, error) {
	switch t {
	case TypeString:
		switch raw.(type) {
		case map[string]any, []any, []string:
			return nil, fmt.Errorf("want string, got %v", raw)
		}
		return cast.ToStringE(raw)
	case TypeInt:
		if f, ok := raw.(float64); ok && f != float64(int(f)) {
			return nil, fmt.Errorf("want int, got %v", raw)
		}
		n, err := cast.ToIntE(raw)
		if err != nil {
			return nil, fmt.Errorf("want int, got %q", fmt.Sprint(raw))
		}
		return n, nil
	case TypeFloat:
		f, err := cast.ToFloat64E(raw)
		if err != nil {
			return nil, fmt.Errorf("want float, got %q", fmt.Sprint(raw))
		}
		// NaN passes every range check (all comparisons are false) and
		// cannot be hashed; Inf is no setting either.
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("want a finite float, got %v", f)
		}
		// -0 prints as "-0", which YAML reads back as the integer 0: one
		// zero keeps a printed config's hash (found by FuzzLoadConfig).
		return f + 0, nil
	case TypeBool:
		b, err := cast.ToBoolE(raw)
		if err != nil {
			return nil, fmt.Errorf("want bool, got %q", fmt.Sprint(raw))
		}
		return b, nil
	case TypeDuration:
		if s, ok := raw.(string); ok {
			d, err := time.ParseDuration(s)
			if err != nil {
				return nil, fmt.Errorf("want duration (e.g. 90s), got %q", s)
			}
			return d, nil
		}
		if d, ok := raw.(time.Duration); ok {
			return d, nil
		}
		return nil, fmt.Errorf("want duration (e.g. 90s), got %v", raw)
	case TypeStrings:
		switch x := raw.(type) {
		case nil:
			return []string{}, nil
		case string:
			return splitList(x), nil
		}
		s, err := cast.ToStringSliceE(raw)
		if err != nil {
			return nil, fmt.Errorf("want list of strings, got %v", raw)
		}
		return s, nil
	}
	return nil, fmt.Errorf("unknown field type %q", t)
}

// check checks v (of f's Go type) against f's enum and bounds.
func (f Field) check(v any) error {
	if err := f.checkEnum(v); err != nil {
		return err
	}
	return f.checkBounds(v)
}

// checkBounds checks v against Min and Max. A NaN fails every bound.
func (f Field) checkBounds(v any) error {
	if f.Min == nil && f.Max == nil {
		return nil
	}
	var x float64
	switch n := v.(type) {
	case int:
		x = float64(n)
	case float64:
		x = n
	case time.Duration:
		x = n.Seconds()
	default:
		return nil
	}
	lo, hi := f.Min != nil, f.Max != nil
	ok := true
	if lo {
		ok = ok && (x > *f.Min || !f.ExclusiveMin && x == *f.Min)
	}
	if hi {
		ok = ok && (x < *f.Max || !f.ExclusiveMax && x == *f.Max)
	}
	if ok {
		return nil
	}
	return fmt.Errorf("%v, want %s", v, f.BoundsText())
}

// BoundsText renders Min and Max: "> 0", "≥ 1", "in (0, 1]"; "" when
// unbounded.
func (f Field) BoundsText() string {
	num := func(p *float64) string {
		switch f.Type {
		case TypeDuration:
			return time.Duration(*p * float64(time.Second)).String()
		case TypeInt:
			return strconv.FormatInt(int64(*p), 10)
		}
		return strconv.FormatFloat(*p, 'g', -1, 64)
	}
	switch {
	case f.Min != nil && f.Max != nil:
		l, r := "[", "]"
		if f.ExclusiveMin {
			l = "("
		}
		if f.ExclusiveMax {
			r = ")"
		}
		return "in " + l + num(f.Min) + ", " + num(f.Max) + r
	case f.Min != nil && f.ExclusiveMin:
		return "> " + num(f.Min)
	case f.Min != nil:
		return "≥ " + num(f.Min)
	case f.Max != nil && f.ExclusiveMax:
		return "< " + num(f.Max)
	case f.Max != nil:
		return "≤ " + num(f.Max)
	}
	return ""
}

func (f Field) checkEnum(v any) error {
	if len(f.Enum) == 0 {
		return nil
	}
	s, _ := v.(string)
	for _, e := range f.Enum {
		if s == e {
			return nil
		}
	}
	return fmt.Errorf("%q is not one of %s", s, strings.Join(f.Enum, ", "))
}

func isZero(v any) bool {
	switch x := v.(type) {
	case string:
		return x == ""
	case []string:
		return len(x) == 0
	}
	return false
}
