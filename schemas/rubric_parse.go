package schemas

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/evolm/evolm/internal/jsonobj"
)

// RubricFormat selects how R_format reads a generator's output.
type RubricFormat string

const (
	// FormatStrict needs a well-formed JSON object (evolm's rule): a non-empty
	// string criterion and a JSON-number weight in every entry.
	FormatStrict RubricFormat = "strict"
	// FormatLenient accepts what the official EVOLM check accepts
	// (is_valid_rubric_format over extract_json_from_response): the span from
	// the first '{' to the last '}' is repaired into JSON, a weight may be a
	// numeric string, and a criterion may be any value.
	FormatLenient RubricFormat = "lenient"
)

// RubricFormats lists the formats, for config enums.
var RubricFormats = []string{string(FormatStrict), string(FormatLenient)}

// ParseRubricFormat checks a format name.
func ParseRubricFormat(s string) (RubricFormat, error) {
	switch f := RubricFormat(s); f {
	case FormatStrict, FormatLenient:
		return f, nil
	}
	return "", fmt.Errorf("rubric format %q: want %s", s, strings.Join(RubricFormats, " or "))
}

// Level is one scoring level of a criterion: the score as written (a key of
// "scoring_levels", e.g. "0.5") and what earns it.
type Level struct {
	Score string
	Text  string
}

// ParsedCriterion is one criterion of a parsed rubric, its scoring levels in
// the order the generator wrote them.
type ParsedCriterion struct {
	Criterion string
	Weight    float64
	Levels    []Level
}

// ValidateRubricAs is ValidateRubric under a format.
func ValidateRubricAs(raw string, f RubricFormat) ([]Criterion, error) {
	pcs, err := ParseRubric(raw, f)
	if pcs == nil {
		return nil, err
	}
	out := make([]Criterion, len(pcs))
	for i, c := range pcs {
		out[i] = Criterion{Criterion: c.Criterion, Weight: c.Weight}
	}
	return out, err
}

// ParseRubric applies the R_format rules of ValidateRubric under format f and
// returns the criteria with their scoring levels. As ValidateRubric, it
// returns the criteria when only the weight-sum rule fails, and a nil error
// exactly when R_format = 1.
//
// Lenient differs from strict in these ways, each the official behaviour:
//
//   - the JSON is the span from the first '{' to the last '}' of the text
//     (none, or a last '}' before the first '{': no JSON), repaired
//     (unquoted keys, single quotes, trailing commas, missing brackets,
//     comments, Python constants …) by github.com/kaptinlin/jsonrepair, a
//     port of josdejong/jsonrepair, standing in for Python's json_repair;
//   - a weight is anything Python's float() reads: a number, a numeric string
//     ("0.4", " .25 ", "1e-1", "1_0"), or a boolean (true is 1);
//   - a criterion may be any value, empty or not a string (a non-string is
//     kept as its JSON text, null as "").
//
// One official quirk is not kept: a "nan" weight passes the official check
// (a NaN sum compares false with the tolerance); here it fails, because the
// weights feed the judge.
func ParseRubric(raw string, f RubricFormat) ([]ParsedCriterion, error) {
	body := StripThink(raw)
	var obj map[string]json.RawMessage
	switch f {
	case FormatStrict:
		o, err := jsonobj.First(body)
		if err != nil {
			return nil, err
		}
		obj = o
	case FormatLenient:
		o, err := jsonobj.Repaired(body)
		if err != nil {
			return nil, err
		}
		obj = o
	default:
		return nil, fmt.Errorf("rubric format %q: want %s", f, strings.Join(RubricFormats, " or "))
	}
	critRaw, ok := obj["criteria"]
	if !ok {
		return nil, errors.New(`no "criteria" key`)
	}
	var entries []json.RawMessage
	if err := json.Unmarshal(critRaw, &entries); err != nil {
		return nil, fmt.Errorf(`"criteria" is not a list`)
	}
	if len(entries) < MinCriteria {
		return nil, fmt.Errorf(`"criteria" has %d entries, want at least %d`, len(entries), MinCriteria)
	}
	out := make([]ParsedCriterion, len(entries))
	sum := 0.0
	for i, e := range entries {
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(e, &fields); err != nil || fields == nil {
			return nil, fmt.Errorf("criteria[%d] is not an object", i)
		}
		c, ok := fields["criterion"]
		if !ok {
			return nil, fmt.Errorf(`criteria[%d] has no "criterion"`, i)
		}
		w, ok := fields["weight"]
		if !ok {
			return nil, fmt.Errorf(`criteria[%d] has no "weight"`, i)
		}
		pc := &out[i]
		if f == FormatStrict {
			if err := json.Unmarshal(c, &pc.Criterion); err != nil {
				return nil, fmt.Errorf(`criteria[%d].criterion is not a string`, i)
			}
			if strings.TrimSpace(pc.Criterion) == "" {
				return nil, fmt.Errorf(`criteria[%d].criterion is empty`, i)
			}
			if err := json.Unmarshal(w, &pc.Weight); err != nil {
				return nil, fmt.Errorf(`criteria[%d].weight is not a number: %s`, i, w)
			}
		} else {
			pc.Criterion = looseText(c)
			wt, err := pythonFloat(w)
			if err != nil {
				return nil, fmt.Errorf(`criteria[%d].weight %s: %v`, i, w, err)
			}
			pc.Weight = wt
		}
		if !(pc.Weight > 0) || math.IsInf(pc.Weight, 0) {
			return nil, fmt.Errorf(`criteria[%d].weight is %g, want > 0`, i, pc.Weight)
		}
		if lv, ok := fields["scoring_levels"]; ok {
			pc.Levels = levels(lv)
		}
		sum += pc.Weight
	}
	if math.Abs(sum-1) > WeightSumTol+weightSumEpsilo {
		return out, fmt.Errorf("weights sum to %g, want 1 ± %g", sum, WeightSumTol)
	}
	return out, nil
}

// looseText is a criterion value as text: a string as is, null as "", any
// other value as its compact JSON.
func looseText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	raw = bytes.TrimSpace(raw)
	if string(raw) == "null" {
		return ""
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}

// pyFloat is the text Python's float() reads (after stripping spaces):
// decimal digits with single underscores between them, an optional fraction
// and exponent, or inf, infinity and nan, signed, in any case.
var pyFloat = regexp.MustCompile(`(?i)^[+-]?(?:(?:\d(?:_?\d)*(?:\.(?:\d(?:_?\d)*)?)?|\.\d(?:_?\d)*)(?:e[+-]?\d(?:_?\d)*)?|inf|infinity|nan)$`)

// PythonFloat reads a JSON value as Python's float() does: a number, a
// boolean (true is 1) or a numeric string. NaN and ±Inf come back as such.
// The official EVOLM code reads rubric weights and judge scores with it.
func PythonFloat(raw json.RawMessage) (float64, error) { return pythonFloat(raw) }

func pythonFloat(raw json.RawMessage) (float64, error) {
	raw = bytes.TrimSpace(raw)
	switch string(raw) {
	case "true":
		return 1, nil
	case "false":
		return 0, nil
	}
	var f float64
	if json.Unmarshal(raw, &f) == nil {
		return f, nil
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return 0, errors.New("not a number or a numeric string")
	}
	t := strings.TrimSpace(s)
	if !pyFloat.MatchString(t) {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	v, err := strconv.ParseFloat(strings.ReplaceAll(t, "_", ""), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	return v, nil
}

// levels reads a "scoring_levels" object in written order; any other value
// gives none. A level's text is its string, or its JSON when not a string.
func levels(raw json.RawMessage) []Level {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil
	}
	var out []Level
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return out
		}
		key, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return out
		}
		out = append(out, Level{Score: key, Text: looseText(v)})
	}
	return out
}

// RubricLevels returns the scoring levels of each criterion of a generated
// rubric, read strictly and, failing that, leniently; nil when the text has
// no parseable criteria. Stages that keep only the parsed criteria (the
// rubrics table) use it to show a judge the whole rubric.
func RubricLevels(raw string) [][]Level {
	pcs, _ := ParseRubric(raw, FormatStrict)
	if pcs == nil {
		pcs, _ = ParseRubric(raw, FormatLenient)
	}
	if pcs == nil {
		return nil
	}
	out := make([][]Level, len(pcs))
	for i, c := range pcs {
		out[i] = c.Levels
	}
	return out
}

// Enum lists the formats (a config key's allowed values).
func (RubricFormat) Enum() []string { return RubricFormats }
