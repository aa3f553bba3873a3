package analyze

import (
	"bytes"
	"encoding/json"
	"maps"
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The official definitions (stellalisy/EvoLM scripts/eval/rubric_aggregate_stats.py),
// written for Go; see the package doc, "Official definitions".

// LabelOnlyMaxLen is the official label-only threshold: a criterion of at
// most this many characters (Unicode code points) is a bare label.
const LabelOnlyMaxLen = 40

var (
	// thinkRE removes <think>…</think> blocks, non-greedy, across lines.
	thinkRE = regexp.MustCompile(`(?s)<think>.*?</think>`)
	// pySpace is Python's \s on str patterns (Py_UNICODE_ISSPACE): ASCII
	// whitespace, \x1c-\x1f, U+0085 and the Unicode separators (Z*).
	pySpace = `[\t\n\v\f\r\x{1c}-\x{1f}\x{85}\p{Z}]`
	// criterionRE is the official regex fallback, one (criterion, weight)
	// pair per match; Python's \d (any decimal digit, Nd) is \p{Nd}.
	criterionRE = regexp.MustCompile(`"criterion"` + pySpace + `*:` + pySpace + `*"((?:[^"\\]|\\.)*)"` +
		pySpace + `*,` + pySpace + `*"weight"` + pySpace + `*:` + pySpace + `*([\p{Nd}.]+)`)
	// specificRE is the official "specific value" pattern
	// \d+\.?\d*|= |equals |formula|equation|code|pattern|exact|verbatim
	// (IGNORECASE): as a search it holds iff the text has a decimal digit or
	// one of the words.
	specificRE = regexp.MustCompile(`(?i)\p{Nd}|= |equals |formula|equation|code|pattern|exact|verbatim`)
	// constraintWords are the alternatives of the official constraint
	// pattern \bavoid\w*\b|\bexclud\w*\b|\bkeyword\b|\bmust not\b|\bshould not\b
	// |\bdo not\b|\bprohibit\b|\brestrict\b|\bforbid\w*\b (IGNORECASE). A
	// stem followed by \w*\b needs a word boundary before it only (the greedy
	// \w* always ends at one); a whole word needs one on both sides.
	constraintWords = []struct {
		re    *regexp.Regexp
		whole bool
	}{
		{regexp.MustCompile(`(?i)avoid`), false},
		{regexp.MustCompile(`(?i)exclud`), false},
		{regexp.MustCompile(`(?i)keyword`), true},
		{regexp.MustCompile(`(?i)must not`), true},
		{regexp.MustCompile(`(?i)should not`), true},
		{regexp.MustCompile(`(?i)do not`), true},
		{regexp.MustCompile(`(?i)prohibit`), true},
		{regexp.MustCompile(`(?i)restrict`), true},
		{regexp.MustCompile(`(?i)forbid`), false},
	}
	// pyFold maps the letters Python's IGNORECASE matches to an ASCII letter
	// of the patterns and Go's (?i) does not: U+0130 (İ, lowercase i) and
	// U+0131 (ı, in sre's i/ı equivalence). Both are word characters, as
	// is i, so word boundaries are unchanged. (Go's (?i) already matches
	// U+212A, the Kelvin sign, for k and U+017F, long s, for s, as Python does.)
	pyFold = strings.NewReplacer("\u0130", "i", "\u0131", "i")
)

// StripThinking removes <think>…</think> blocks and surrounding whitespace,
// as the official strip_thinking does.
func StripThinking(text string) string {
	return strings.TrimSpace(thinkRE.ReplaceAllString(text, ""))
}

// OfficialCriteria returns the criterion texts of a rubric generator's raw
// output as the official extract_criteria reads them: after stripping
// <think> blocks, the span from the first '{' to the brace that closes it
// (braces counted naively, inside strings too) is parsed as JSON and its
// "criteria" list is taken; when there is no '{', the braces never close,
// or the span is not valid JSON, the criteria are the matches of the
// regex fallback "criterion": "…", "weight": <digits and dots>, with \"
// unescaped and \n turned into a space. Where the official script would
// raise (an entry that is not an object, a criterion that is not a string,
// a "criteria" that is not a list), the entry's text is "" and a
// non-list counts as no criteria.
func OfficialCriteria(raw string) []string {
	cleaned := StripThinking(raw)
	if start := strings.IndexByte(cleaned, '{'); start >= 0 {
		depth := 0
		// '{' and '}' are ASCII, so a byte scan visits them as Python's
		// code-point scan does.
		for i := start; i < len(cleaned); i++ {
			switch cleaned[i] {
			case '{':
				depth++
			case '}':
				depth--
			}
			if depth == 0 {
				if cs, ok := jsonCriteria(cleaned[start : i+1]); ok {
					return cs
				}
				break
			}
		}
	}
	var out []string
	for _, m := range criterionRE.FindAllStringSubmatch(cleaned, -1) {
		t := strings.ReplaceAll(m[1], `\"`, `"`)
		out = append(out, strings.ReplaceAll(t, `\n`, " "))
	}
	return out
}

// jsonCriteria parses span as the official json.loads(span).get("criteria",
// []) does; ok is false when span is not valid JSON.
func jsonCriteria(span string) (_ []string, ok bool) {
	dec := json.NewDecoder(bytes.NewReader([]byte(span)))
	dec.UseNumber() // Python parses any number; float64 would reject 1e400
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		return nil, false
	}
	list, _ := obj["criteria"].([]any)
	out := make([]string, len(list))
	for i, c := range list {
		if m, isObj := c.(map[string]any); isObj {
			out[i], _ = m["criterion"].(string)
		}
	}
	return out, true
}

// IsSpecific reports whether a criterion matches the official "specific"
// pattern: a decimal digit, "= ", "equals ", formula, equation, code,
// pattern, exact or verbatim, case-insensitive.
func IsSpecific(criterion string) bool {
	return specificRE.MatchString(pyFold.Replace(criterion))
}

// IsConstraint reports whether a criterion matches the official constraint
// pattern: avoid…, exclud…, forbid… (a word starting so), or the whole words
// keyword, must not, should not, do not, prohibit, restrict,
// case-insensitive, with Python's Unicode word boundaries.
func IsConstraint(criterion string) bool {
	s := pyFold.Replace(criterion)
	for _, w := range constraintWords {
		// No alternative overlaps itself, so the non-overlapping matches
		// are all its occurrences.
		for _, loc := range w.re.FindAllStringIndex(s, -1) {
			if isPyWordBefore(s, loc[0]) {
				continue
			}
			if w.whole && isPyWordAt(s, loc[1]) {
				continue
			}
			return true
		}
	}
	return false
}

// IsLabelOnly reports whether a criterion has at most LabelOnlyMaxLen
// characters (code points, as Python's len).
func IsLabelOnly(criterion string) bool {
	return utf8.RuneCountInString(criterion) <= LabelOnlyMaxLen
}

// isPyWord is Python's \w on str patterns: alphanumeric (letters, and
// characters with a numeric value) or underscore.
func isPyWord(r rune) bool {
	return r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r)
}

func isPyWordBefore(s string, i int) bool {
	if i == 0 {
		return false
	}
	r, _ := utf8.DecodeLastRuneInString(s[:i])
	return isPyWord(r)
}

func isPyWordAt(s string, i int) bool {
	if i >= len(s) {
		return false
	}
	r, _ := utf8.DecodeRuneInString(s[i:])
	return isPyWord(r)
}

// OfficialRubric are the official statistics of one rubric (the official
// compute_rubric_stats), percentages over its criteria; all zero for a
// rubric without criteria.
type OfficialRubric struct {
	Criteria        int     // criteria_count
	AvgCriterionLen float64 // avg_criterion_len, in code points
	LabelOnlyPct    float64 // label_only_pct
	SpecificPct     float64 // specific_pct
	ConstraintPct   float64 // constraint_pct
}

// OfficialRubricStats computes the official statistics of a rubric from
// the generator's raw output (OfficialCriteria).
func OfficialRubricStats(raw string) OfficialRubric {
	return OfficialCriteriaStats(OfficialCriteria(raw))
}

// OfficialCriteriaStats computes the official statistics of a criteria list.
func OfficialCriteriaStats(criteria []string) OfficialRubric {
	n := len(criteria)
	if n == 0 {
		return OfficialRubric{}
	}
	var chars, label, spec, cons int
	for _, t := range criteria {
		chars += utf8.RuneCountInString(t)
		if IsLabelOnly(t) {
			label++
		}
		if IsSpecific(t) {
			spec++
		}
		if IsConstraint(t) {
			cons++
		}
	}
	pct := func(k int) float64 { return float64(k) / float64(n) * 100 }
	return OfficialRubric{Criteria: n, AvgCriterionLen: float64(chars) / float64(n),
		LabelOnlyPct: pct(label), SpecificPct: pct(spec), ConstraintPct: pct(cons)}
}

// PromptAverager averages official rubric statistics per prompt (over the
// prompt's rubrics), then over prompts: the official aggregate has one
// rubric per prompt, and a prompt with several rubrics (candidates of the
// rubric phase, repeated samples) counts once.
type PromptAverager struct {
	items   map[string]*promptSum
	Rubrics int64
}

type promptSum struct {
	n   int
	sum [5]float64
}

func (r OfficialRubric) vec() [5]float64 {
	return [5]float64{float64(r.Criteria), r.AvgCriterionLen, r.LabelOnlyPct, r.SpecificPct, r.ConstraintPct}
}

// Add accounts for one rubric of prompt item.
func (p *PromptAverager) Add(item string, r OfficialRubric) {
	if p.items == nil {
		p.items = map[string]*promptSum{}
	}
	s := p.items[item]
	if s == nil {
		s = &promptSum{}
		p.items[item] = s
	}
	s.n++
	for i, v := range r.vec() {
		s.sum[i] += v
	}
	p.Rubrics++
}

// OfficialSummary is the official aggregate of a set of rubrics: each
// statistic averaged per prompt, then over prompts.
type OfficialSummary struct {
	Rubrics, Prompts int64
	CriteriaCount    float64 // criteria per rubric
	AvgCriterionLen  float64
	LabelOnlyPct     float64
	SpecificPct      float64
	ConstraintPct    float64
}

// Summary returns the mean over prompts of each prompt's mean; all zero
// when no rubric was added.
func (p *PromptAverager) Summary() OfficialSummary {
	out := OfficialSummary{Rubrics: p.Rubrics, Prompts: int64(len(p.items))}
	if len(p.items) == 0 {
		return out
	}
	// Sum in a fixed order so that the result does not depend on map order.
	var mean [5]float64
	for _, k := range slices.Sorted(maps.Keys(p.items)) {
		s := p.items[k]
		for i := range mean {
			mean[i] += s.sum[i] / float64(s.n)
		}
	}
	for i := range mean {
		mean[i] /= float64(len(p.items))
	}
	out.CriteriaCount, out.AvgCriterionLen, out.LabelOnlyPct, out.SpecificPct, out.ConstraintPct = mean[0], mean[1], mean[2], mean[3], mean[4]
	return out
}
