package prompts

import (
	"encoding/json"
	"regexp"
	"strings"
	"unicode/utf8"
)

// The official EVOLM code removes a rubric generator's reasoning before it
// shows the rubric to anyone, in two ways: the judge gets
// _remove_redacted_reasoning's text (open_instruct/search_rewards/
// rubric_judge_rewards.py), the policy of a rubric-guided pair
// remove_thinking_section's. JudgeRubricText and PolicyRubricText are those
// rules, written here from their description.

var (
	closedThink   = regexp.MustCompile(`(?is)<\s*think\s*>.*?<\s*/\s*think\s*>`)
	openThink     = regexp.MustCompile(`(?i)<\s*think\s*>`)
	orphanThink   = regexp.MustCompile(`(?i)<\s*/?\s*think\s*>`)
	structuredTag = []*regexp.Regexp{
		regexp.MustCompile(`(?i)<\s*RUBRIC\s*>`), regexp.MustCompile(`(?i)<\s*/\s*RUBRIC\s*>`),
		regexp.MustCompile(`(?i)<\s*EVALUATION\s*>`), regexp.MustCompile(`(?i)<\s*/\s*EVALUATION\s*>`),
	}
	criteriaStart = regexp.MustCompile(`\{\s*"criteria"\s*:`)
)

// Thresholds of the official rule, in characters (Unicode code points).
const (
	reasoningPrefixChars = 200  // a rubric object starting further in has a reasoning prefix
	thinkingFallback     = 8000 // a text over twice this keeps its last thinkingFallback characters
)

// JudgeRubricText is the rubric text the official judge sees: the
// generator's output with every closed <think>…</think> removed; after an
// unclosed <think>, the text from the first RUBRIC or EVALUATION tag that
// follows it, or else only the text before it; stray think tags dropped;
// when a {"criteria": object starts more than 200 characters in and is
// valid JSON, that object alone; and of a text over 16,000 characters its
// last 8,000.
func JudgeRubricText(text string) string {
	if text == "" {
		return text
	}
	cleaned := closedThink.ReplaceAllString(text, "")
	if loc := openThink.FindStringIndex(cleaned); loc != nil {
		before, tail := strings.TrimSpace(cleaned[:loc[0]]), cleaned[loc[1]:]
		first := -1
		for _, re := range structuredTag {
			if m := re.FindStringIndex(tail); m != nil && (first < 0 || m[0] < first) {
				first = m[0]
			}
		}
		if first >= 0 {
			cleaned = tail[first:]
		} else {
			cleaned = before
		}
	}
	cleaned = orphanThink.ReplaceAllString(cleaned, "")
	if m := criteriaStart.FindStringIndex(cleaned); m != nil && utf8.RuneCountInString(cleaned[:m[0]]) > reasoningPrefixChars {
		if obj, ok := balancedObject(cleaned, m[0]); ok {
			return obj
		}
	}
	if n := utf8.RuneCountInString(cleaned); n > 2*thinkingFallback {
		cleaned = string([]rune(cleaned)[n-thinkingFallback:])
	}
	return cleaned
}

// balancedObject returns the text from start (a '{') to the brace that
// closes it, counting every brace (as the official code does, strings
// included), when that text is valid JSON.
func balancedObject(s string, start int) (string, bool) {
	depth := 0
	for j := start; j < len(s); j++ {
		switch s[j] {
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				obj := s[start : j+1]
				return obj, json.Valid([]byte(obj))
			}
		}
	}
	return "", false
}

// PolicyRubricText is the rubric text the official code shows the policy
// for a+ of a rubric-guided pair (remove_thinking_section): the output
// without "<|assistant|>", the text after the last </think> and after the
// last </evaluation>, <answer> tags removed, white space trimmed.
func PolicyRubricText(text string) string {
	text = strings.TrimSpace(strings.ReplaceAll(text, "<|assistant|>", ""))
	if i := strings.LastIndex(text, "</think>"); i >= 0 {
		text = text[i+len("</think>"):]
	}
	if i := strings.LastIndex(text, "</evaluation>"); i >= 0 {
		text = text[i+len("</evaluation>"):]
	}
	text = strings.ReplaceAll(strings.ReplaceAll(text, "<answer>", ""), "</answer>", "")
	return strings.TrimSpace(text)
}
