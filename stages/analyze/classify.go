package analyze

import (
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Class is the classification of one rubric criterion. Abstract excludes the
// other two; Concrete and Constraint may both hold.
type Class struct {
	Abstract   bool // a label with no content ("Accuracy", "Clarity and conciseness")
	Concrete   bool // carries an expected value (number, quoted string, "the answer is …", named entity)
	Constraint bool // states a constraint (must, must not, at most, only, avoid …)
}

// genericWords are the words an abstract label is made of: quality
// dimensions, generic nouns of a rubric and function words. A short phrase of
// only these words names a dimension without saying what is expected.
var genericWords = setOf(`
a an and the of to in for with on by or its overall general
accuracy accurate clarity clear helpfulness helpful relevance relevant completeness complete
correctness correct conciseness concise coherence coherent quality structure structured
organization organized organisation formatting format tone style grammar depth detail details
detailed creativity creative originality engagement engaging safety safe harmlessness harmless
honesty honest fluency fluent readability readable consistency consistent specificity specific
thoroughness thorough precision precise efficiency efficient logic logical flow reasoning
explanation explanations response answer answers content code writing language factual factuality
instruction instructions following adherence compliance use usage user question prompt task request
presentation focus insight insightfulness usefulness useful comprehensiveness comprehensive
professionalism professional empathy empathetic persuasiveness persuasive brevity length
appropriateness appropriate sensitivity ethics ethical objectivity neutrality balance balanced
evidence support sources citations examples example context understanding final solution
well-structured well-organized well-written step-by-step level quality-wise readability
`)

// predicateWords are verbs, modals and copulas: a phrase containing one says
// something about the response, so it is not a bare label.
var predicateWords = setOf(`
is are be being been was were has have had does do did can could will would shall should must may might
includes include including contains contain mentions mention states state provides provide explains explain
uses identifies identify gives give lists list describes describe addresses address avoids avoid
answers cites cite computes compute calculates calculate shows show demonstrates demonstrate defines define
follows follow offers offer presents present recommends recommend suggests suggest acknowledges acknowledge
refuses refuse declines decline asks ask notes note discusses discuss compares compare concludes conclude
correctly clearly accurately properly explicitly directly fully briefly
`)

// articles and the like at the start of a sentence, where capitalization says
// nothing about a named entity.
var functionWords = setOf(`a an the this that these those it its i in on at of for to with by from as and or not no`)

var (
	// A number: 42, 3.14, 1,000, -7, 15%, 1/2 (digits anywhere in a token).
	numberRE = regexp.MustCompile(`\d`)
	// A number quantifying a constraint ("at most 100 words", "under 3
	// sentences"): such a number is a limit, not an expected value.
	quantifiedRE = regexp.MustCompile(`(?i)\b(?:at (?:most|least)|no (?:more|fewer|less|longer|shorter) than|(?:fewer|less|more|longer|shorter) than|exactly|under|over|within|up to|exceed(?:s|ing)?|not exceed|maximum of|minimum of|max(?:imum)?|min(?:imum)?|between)\s+\d[\d,.]*(?:\s*(?:and|-|to)\s*\d[\d,.]*)?`)
	// Quoted text: "…", “…”, ‘…’, `…`, or '…' not inside a word (so "user's" is
	// not a quote).
	quoteRE = regexp.MustCompile("\"[^\"]+\"|“[^”]+”|‘[^’]+’|`[^`]+`|(?:^|[\\s(\\[:])'[^']+'(?:$|[\\s.,;:!?)\\]])")
	// An expected value stated outright.
	answerRE = regexp.MustCompile(`(?i)\b(?:the (?:final |correct )?(?:answer|result|solution|value|output) (?:is|of|equals|should be|must be)|(?:answer|result) of\b|equals?\b|is equal to)|[=≈≤≥<>^√∑∫]`)
	// Constraint cues.
	constraintRE = regexp.MustCompile(`(?i)\b(?:must|must not|mustn't|should not|shouldn't|shall not|never|do not|does not|don't|doesn't|avoids?|avoiding|at most|at least|no more than|no fewer than|no less than|no longer than|fewer than|exactly|only|without|limit(?:s|ed)? to|refrains?|excludes?|excluding|forbid(?:s|den)?|prohibit(?:s|ed)?|strictly|under \d+|within \d+|maximum of|minimum of|required to|is required|are required|not exceed|exceed(?:s|ing)? no)\b`)
	wordRE       = regexp.MustCompile(`[\p{L}\p{N}][\p{L}\p{N}'’-]*`)
	labelColonRE = regexp.MustCompile(`^([^:]{1,60}):\s*(.*)$`)
)

func setOf(s string) map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(s) {
		m[w] = true
	}
	return m
}

// Classify classifies one criterion by the rules in the package doc.
func Classify(criterion string) Class {
	s := strings.Join(strings.Fields(criterion), " ")
	// "Label: description" is judged by its description when it has one.
	if m := labelColonRE.FindStringSubmatch(s); m != nil && strings.TrimSpace(m[2]) != "" {
		s = m[2]
	} else if m != nil {
		s = m[1]
	}
	s = strings.TrimRight(s, " .;:!")
	c := Class{
		Constraint: constraintRE.MatchString(s),
		Concrete:   concrete(s),
	}
	if !c.Constraint && !c.Concrete && abstract(s) {
		c.Abstract = true
	}
	return c
}

func concrete(s string) bool {
	if quoteRE.MatchString(s) || answerRE.MatchString(s) {
		return true
	}
	if numberRE.MatchString(quantifiedRE.ReplaceAllString(s, "")) {
		return true
	}
	return hasNamedEntity(s)
}

// hasNamedEntity reports a capitalized word that is not the first word of a
// sentence and not a generic rubric word: a proper name (Paris, Python,
// Treaty of Versailles).
func hasNamedEntity(s string) bool {
	sentenceStart := true
	for _, loc := range wordRE.FindAllStringIndex(s, -1) {
		w := s[loc[0]:loc[1]]
		start := sentenceStart
		// The next word starts a sentence if this one is followed by . ! ? or :
		rest := strings.TrimLeft(s[loc[1]:], " ")
		sentenceStart = strings.HasPrefix(rest, ".") || strings.HasPrefix(rest, "!") || strings.HasPrefix(rest, "?") || strings.HasPrefix(rest, ":")
		r, _ := utf8.DecodeRuneInString(w)
		if !unicode.IsUpper(r) || start {
			continue
		}
		lw := strings.ToLower(w)
		if genericWords[lw] || predicateWords[lw] || functionWords[lw] {
			continue
		}
		if isAllCapsShort(w) && genericAcronym[w] {
			continue
		}
		return true
	}
	return false
}

// genericAcronym are capitalized tokens that name no entity.
var genericAcronym = map[string]bool{"I": true, "AI": true, "OK": true}

func isAllCapsShort(w string) bool {
	return len(w) <= 3 && strings.ToUpper(w) == w
}

// abstract reports a bare label: no predicate, at most six words, and either
// every word generic, or at most three words (any nouns or adjectives:
// "Emotional resonance").
func abstract(s string) bool {
	words := wordRE.FindAllString(s, -1)
	if len(words) == 0 || len(words) > 6 {
		return false
	}
	allGeneric := true
	for _, w := range words {
		lw := strings.TrimSuffix(strings.TrimSuffix(strings.ToLower(w), "'s"), "’s")
		if predicateWords[lw] {
			return false
		}
		if !genericWords[lw] {
			allGeneric = false
		}
	}
	return allGeneric || len(words) <= 3
}
