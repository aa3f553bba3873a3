package prompts

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
	"github.com/evolm/evolm/schemas"
)

// Reason says why a judge score could not be had. Stages record it next to
// a missing score (README.md, "The method": the policy phase then substitutes the group
// mean, the rubric phase drops the pair).
type Reason string

const (
	ReasonNotJSON         Reason = "not_json"           // no JSON object in the reply once <think> is stripped
	ReasonMissingScore    Reason = "missing_score"      // JSON objects, but none with a "score"
	ReasonScoreNotNumber  Reason = "score_not_number"   // "score" is not a number or a numeric string
	ReasonScoreNotFinite  Reason = "score_not_finite"   // "score" is NaN or ±Inf
	ReasonScoreOutOfRange Reason = "score_out_of_range" // "score" outside [0, 1]
	ReasonEmptyRubric     Reason = "empty_rubric"       // a rubric with no criteria
	ReasonZeroWeights     Reason = "zero_weights"       // criteria whose weights sum to 0
	ReasonBadWeight       Reason = "invalid_weight"     // a weight that is negative, NaN or ±Inf
	ReasonNoYesNoMass     Reason = "no_yes_no_mass"     // neither a yes nor a no candidate has probability
)

func (r Reason) Error() string { return string(r) }

// ScoreError is a failure to score, with its Reason; errors.Is(err, Reason)
// matches it.
type ScoreError struct {
	Reason Reason
	Detail string
}

func (e *ScoreError) Error() string {
	if e.Detail == "" {
		return string(e.Reason)
	}
	return string(e.Reason) + ": " + e.Detail
}

func (e *ScoreError) Unwrap() error { return e.Reason }

// ReasonOf returns the Reason inside err, or "" when it has none.
func ReasonOf(err error) Reason {
	var se *ScoreError
	if errors.As(err, &se) {
		return se.Reason
	}
	var r Reason
	if errors.As(err, &r) {
		return r
	}
	return ""
}

// Verdict is a parsed generative judgment.
type Verdict struct {
	Score     float64 // in [0, 1] (ParseJudgeOfficial: any finite number)
	Reasoning string  // the "reasoning" field, "" when absent
}

// scoreTolerance absorbs float error in a weighted sum written as, say,
// 1.0000000000000002; scores within it of [0, 1] are clamped.
const scoreTolerance = 1e-6

var bareNonFinite = regexp.MustCompile(`(?i)"score"\s*:\s*"?\s*[+-]?(nan|inf(inity)?)\b`)

// ParseJudge reads a generative judge's reply: it strips <think> sections
// (schemas.StripThink, the rule the rubric format uses),
// takes the last JSON object that has a "score" key, and returns the score
// if it is a finite number (or numeric string) in [0, 1]. Otherwise the
// error is a *ScoreError whose Reason says why.
func ParseJudge(reply string) (Verdict, error) {
	body := schemas.StripThink(reply)
	objs := jsonobj.All(body)
	var obj map[string]json.RawMessage
	for _, o := range objs {
		if _, ok := o["score"]; ok {
			obj = o
		}
	}
	if obj == nil {
		// JSON has no NaN, but judges imitating Python write it anyway.
		if m := bareNonFinite.FindString(body); m != "" {
			return Verdict{}, &ScoreError{Reason: ReasonScoreNotFinite, Detail: m}
		}
		if len(objs) > 0 {
			return Verdict{}, &ScoreError{Reason: ReasonMissingScore, Detail: fmt.Sprintf("%d JSON objects, none with \"score\"", len(objs))}
		}
		return Verdict{}, &ScoreError{Reason: ReasonNotJSON, Detail: excerpt(body)}
	}
	score, err := number(obj["score"])
	if err != nil {
		return Verdict{}, err
	}
	if score < -scoreTolerance || score > 1+scoreTolerance {
		return Verdict{}, &ScoreError{Reason: ReasonScoreOutOfRange, Detail: fmt.Sprintf("score %v not in [0, 1]", score)}
	}
	v := Verdict{Score: min(max(score, 0), 1)}
	if r, ok := obj["reasoning"]; ok {
		_ = json.Unmarshal(r, &v.Reasoning) // a non-string reasoning is not the score's problem
	}
	return v, nil
}

// JudgeReply names a way of reading a generative judge's reply
// (rubric.judge_reply).
type JudgeReply string

const (
	// ReplyStrict is evolm's reading, ParseJudge: thinking stripped, the
	// last JSON object with a "score", a finite score in [0, 1].
	ReplyStrict JudgeReply = "strict"
	// ReplyOfficial is the official EVOLM code's reading,
	// ParseJudgeOfficial: the span from the first '{' to the last '}' of
	// the raw reply, repaired, its "score" read as Python's float(), no
	// range check.
	ReplyOfficial JudgeReply = "official"
)

// Enum lists the readings (a config key's allowed values).
func (JudgeReply) Enum() []string { return []string{string(ReplyStrict), string(ReplyOfficial)} }

// Parse reads a judge reply under reading r ("" is ReplyStrict).
func (r JudgeReply) Parse(reply string) (Verdict, error) {
	switch r {
	case ReplyStrict, "":
		return ParseJudge(reply)
	case ReplyOfficial:
		return ParseJudgeOfficial(reply)
	}
	return Verdict{}, fmt.Errorf("judge reply reading %q: want %s or %s", r, ReplyStrict, ReplyOfficial)
}

// ParseJudgeOfficial reads a generative judge's reply as the official EVOLM
// code does (rubric_judge_rewards.py judge_answer_with_rubric over
// extract_json_from_response): the span from the first '{' to the last '}'
// of the reply as it is — thinking included, so a brace in the thinking
// starts the span there — read as json_repair reads it (officialJSON) into
// one JSON object that must have a "score"; the score is
// what Python's float() reads (a number, a numeric string, a boolean) and
// is not range checked: 1.7 and −0.2 pass through. A score that is NaN or
// ±Inf, which the official code carries as NaN into the group-mean fill, is
// a missing score here (ReasonScoreNotFinite), which the loop fills the same
// way.
func ParseJudgeOfficial(reply string) (Verdict, error) {
	obj, ok := officialJSON(reply)
	if !ok {
		return Verdict{}, &ScoreError{Reason: ReasonNotJSON, Detail: excerpt(reply)}
	}
	raw, ok := obj["score"]
	if !ok {
		return Verdict{}, &ScoreError{Reason: ReasonMissingScore, Detail: `the JSON object has no "score"`}
	}
	score, err := schemas.PythonFloat(raw)
	if err != nil {
		return Verdict{}, &ScoreError{Reason: ReasonScoreNotNumber, Detail: fmt.Sprintf("score is %s", excerpt(string(raw)))}
	}
	if math.IsNaN(score) || math.IsInf(score, 0) {
		return Verdict{}, &ScoreError{Reason: ReasonScoreNotFinite, Detail: fmt.Sprintf("score is %s", excerpt(string(raw)))}
	}
	v := Verdict{Score: score}
	if r, ok := obj["reasoning"]; ok {
		_ = json.Unmarshal(r, &v.Reasoning)
	}
	return v, nil
}

// number reads a JSON number or numeric string.
func number(raw json.RawMessage) (float64, error) {
	raw = bytes.TrimSpace(raw)
	text := string(raw)
	if len(raw) > 0 && raw[0] == '"' {
		if err := json.Unmarshal(raw, &text); err != nil {
			return 0, &ScoreError{Reason: ReasonScoreNotNumber, Detail: string(raw)}
		}
		text = strings.TrimSpace(text)
	} else if len(raw) == 0 || !(raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9') {
		return 0, &ScoreError{Reason: ReasonScoreNotNumber, Detail: fmt.Sprintf("score is %s", excerpt(string(raw)))}
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, &ScoreError{Reason: ReasonScoreNotNumber, Detail: fmt.Sprintf("score is %s", excerpt(string(raw)))}
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, &ScoreError{Reason: ReasonScoreNotFinite, Detail: fmt.Sprintf("score is %s", excerpt(string(raw)))}
	}
	return f, nil
}

func excerpt(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 80 {
		return strconv.Quote(s[:80]) + "…"
	}
	return strconv.Quote(s)
}

// YesNo lists the answer tokens of the yes/no judge. Every variant is one
// next-token event, so P(yes) sums over the Yes variants.
type YesNo struct {
	Yes, No []string
}

// DefaultYesNo covers the answers a judge may give after "Answer:".
var DefaultYesNo = YesNo{
	Yes: []string{" yes", " Yes", "yes", "Yes"},
	No:  []string{" no", " No", "no", "No"},
}

// Candidates returns Yes then No, the order PYes expects log-probs in
// (backend.ScoreRequest.Candidates).
func (yn YesNo) Candidates() []string {
	return append(append([]string(nil), yn.Yes...), yn.No...)
}

// PYes returns P(yes) / (P(yes) + P(no)) from the next-token log-probs of
// Candidates(). -Inf means no mass. It fails with ReasonNoYesNoMass when
// neither side has any, and on a NaN or positive log-prob.
func (yn YesNo) PYes(logprobs []float64) (float64, error) {
	if len(logprobs) != len(yn.Yes)+len(yn.No) {
		return 0, fmt.Errorf("yes/no: %d log-probs for %d candidates", len(logprobs), len(yn.Yes)+len(yn.No))
	}
	for i, lp := range logprobs {
		if math.IsNaN(lp) || lp > 1e-6 {
			return 0, fmt.Errorf("yes/no: candidate %d has log-prob %v", i, lp)
		}
	}
	ly := logSumExp(logprobs[:len(yn.Yes)])
	ln := logSumExp(logprobs[len(yn.Yes):])
	switch {
	case math.IsInf(ly, -1) && math.IsInf(ln, -1):
		return 0, &ScoreError{Reason: ReasonNoYesNoMass, Detail: "no yes or no candidate among the next-token log-probs"}
	case math.IsInf(ln, -1):
		return 1, nil
	case math.IsInf(ly, -1):
		return 0, nil
	}
	// 1 / (1 + exp(ln − ly)), stable for large differences.
	return 1 / (1 + math.Exp(ln-ly)), nil
}

func logSumExp(xs []float64) float64 {
	m := math.Inf(-1)
	for _, x := range xs {
		m = math.Max(m, x)
	}
	if math.IsInf(m, -1) {
		return m
	}
	var s float64
	for _, x := range xs {
		s += math.Exp(x - m)
	}
	return m + math.Log(s)
}

// WeightedScore returns Σ w_k·s_k / Σ w_k: per-criterion scores in [0, 1]
// weighted by the rubric's weights, renormalized. It fails with a
// *ScoreError for an empty rubric, zero weights, a bad weight or a score
// outside [0, 1]; it never returns NaN.
func WeightedScore(weights, scores []float64) (float64, error) {
	if len(weights) != len(scores) {
		return 0, fmt.Errorf("weighted score: %d weights for %d scores", len(weights), len(scores))
	}
	ws, err := normalizeWeights(weights)
	if err != nil {
		return 0, err
	}
	var total float64
	for k, s := range scores {
		if math.IsNaN(s) || math.IsInf(s, 0) {
			return 0, &ScoreError{Reason: ReasonScoreNotFinite, Detail: fmt.Sprintf("criterion %d score %v", k, s)}
		}
		if s < 0 || s > 1 {
			return 0, &ScoreError{Reason: ReasonScoreOutOfRange, Detail: fmt.Sprintf("criterion %d score %v", k, s)}
		}
		total += ws[k] * s
	}
	return min(max(total, 0), 1), nil
}

// YesNoScore scores a response under a rubric from the yes/no judge's
// log-probs: logprobs[k] holds criterion k's next-token log-probs of
// yn.Candidates(). It returns the weighted total and P(yes) per criterion.
func YesNoScore(yn YesNo, weights []float64, logprobs [][]float64) (total float64, perCriterion []float64, err error) {
	if len(weights) != len(logprobs) {
		return 0, nil, fmt.Errorf("yes/no score: %d weights for %d criteria", len(weights), len(logprobs))
	}
	if _, err := normalizeWeights(weights); err != nil {
		return 0, nil, err
	}
	perCriterion = make([]float64, len(logprobs))
	for k, lps := range logprobs {
		p, err := yn.PYes(lps)
		if err != nil {
			return 0, nil, fmt.Errorf("criterion %d: %w", k, err)
		}
		perCriterion[k] = p
	}
	total, err = WeightedScore(weights, perCriterion)
	if err != nil {
		return 0, nil, err
	}
	return total, perCriterion, nil
}
