package prompts

import (
	"bytes"
	"fmt"
	"math"
	"strings"

	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/serving/backend"
)

// Rubric is a rubric as prompts show it.
type Rubric struct {
	// Text is the rubric as the generator wrote it, its reasoning removed
	// (JudgeRubricText, PolicyRubricText): what the official code shows.
	Text string
	// Criteria are the criteria parsed from it (none when it has no usable
	// ones); prompts that list criteria renormalize their weights.
	Criteria []Criterion
}

// Criterion is the part of a rubric criterion that prompts show: the
// criterion, its weight and its scoring levels (may be empty).
type Criterion struct {
	Criterion string
	Weight    float64
	Levels    []schemas.Level
}

// The data each template renders. Field names are the templates' fields.
type (
	questionData struct{ Question string }
	answerData   struct{ Answer string }
	rubricData   struct {
		Rubric   string
		Criteria []Criterion
	}
	pairData  struct{ Question, ResponseA, ResponseB string }
	judgeData struct {
		Question, Response, Rubric string
		Criteria                   []Criterion
	}
	yesNoData struct {
		Question, Response, Criterion string
		Levels                        []schemas.Level
	}
)

var sampleCriteria = []Criterion{{Criterion: "Says 4.", Weight: 1, Levels: []schemas.Level{{Score: "1.0", Text: "Says 4"}, {Score: "0.0", Text: "Does not"}}}}

const sampleRubric = `{"criteria": [{"criterion": "Says 4.", "weight": 1.0, "scoring_levels": {"1.0": "Says 4", "0.0": "Does not"}}]}`

// sample is the data an override is test-rendered with when loaded.
var sample = map[Name]any{
	Policy:            struct{}{},
	PolicyWithRubric:  rubricData{Rubric: sampleRubric, Criteria: sampleCriteria},
	RubricQuestion:    questionData{Question: "What is 2+2?"},
	RubricPair:        pairData{Question: "What is 2+2?", ResponseA: "4", ResponseB: "5"},
	JudgeGenerative:   judgeData{Question: "What is 2+2?", Response: "4", Rubric: sampleRubric, Criteria: sampleCriteria},
	QuestionInference: answerData{Answer: "4"},
}

// systemNames are the prompts that render to a system prompt only (the
// policy's: its user turns are the prompt's own).
var systemNames = map[Name]bool{Policy: true, PolicyWithRubric: true}

// check renders a template on its sample data.
func (s *Set) check(n Name) error {
	switch {
	case n == JudgeYesNo:
		_, _, err := s.JudgeYesNo("What is 2+2?", "4", sampleCriteria)
		return err
	case systemNames[n]:
		if s.tmpls[n].tmpl.Lookup("user") != nil {
			return fmt.Errorf(`defines a "user" template: the %s prompt is a system prompt, and the user turns are the prompt's own`, n)
		}
		_, err := s.system(n, sample[n])
		return err
	}
	_, err := s.chat(n, sample[n])
	return err
}

func (s *Set) render(n Name, sub string, data any) (string, error) {
	t := s.tmpls[n]
	if t == nil {
		return "", fmt.Errorf("prompt %s: not loaded", n)
	}
	var b bytes.Buffer
	var err error
	if sub == "" {
		err = t.tmpl.Execute(&b, data)
	} else {
		err = t.tmpl.ExecuteTemplate(&b, sub, data)
	}
	if err != nil {
		return "", fmt.Errorf("prompt %s: render: %w", t.Version, err)
	}
	return b.String(), nil
}

// chat renders a chat prompt: the "system" template when the file defines
// one and it renders to more than white space, then the user message (the
// "user" template, or the whole file).
func (s *Set) chat(n Name, data any) ([]backend.Message, error) {
	t := s.tmpls[n]
	if t == nil {
		return nil, fmt.Errorf("prompt %s: not loaded", n)
	}
	var msgs []backend.Message
	if t.tmpl.Lookup("system") != nil {
		sys, err := s.render(n, "system", data)
		if err != nil {
			return nil, err
		}
		if strings.TrimSpace(sys) != "" {
			msgs = append(msgs, backend.Message{Role: "system", Content: sys})
		}
	}
	sub := ""
	if t.tmpl.Lookup("user") != nil {
		sub = "user"
	}
	user, err := s.render(n, sub, data)
	if err != nil {
		return nil, err
	}
	return append(msgs, backend.Message{Role: "user", Content: user}), nil
}

// system renders a system prompt: the "system" template exactly when the
// file defines one, else the whole file without surrounding white space;
// "" (or only white space) means send none.
func (s *Set) system(n Name, data any) (string, error) {
	t := s.tmpls[n]
	if t == nil {
		return "", fmt.Errorf("prompt %s: not loaded", n)
	}
	if t.tmpl.Lookup("system") != nil {
		return s.render(n, "system", data)
	}
	p, err := s.render(n, "", data)
	return strings.TrimSpace(p), err
}

// Policy renders the policy's system prompt; "" (or only white space) means
// send none.
func (s *Set) Policy() (string, error) { return s.system(Policy, struct{}{}) }

// PolicyWithRubric renders the policy's system prompt carrying a rubric, for
// a+ of the rubric-guided strategy (the user turn is the question). The
// rubric's criteria may be empty; their weights are renormalized.
func (s *Set) PolicyWithRubric(r Rubric) (string, error) {
	cs, err := normalized(r.Criteria)
	if err != nil {
		return "", fmt.Errorf("prompt %s: %w", PolicyWithRubric, err)
	}
	return s.system(PolicyWithRubric, rubricData{Rubric: r.Text, Criteria: cs})
}

// RubricForQuestion renders the rubric generator's messages for a question:
// a system message when the variant has one (official: the instructions and
// a worked example, with the bare question as the user message), then the
// user message.
func (s *Set) RubricForQuestion(question string) ([]backend.Message, error) {
	return s.chat(RubricQuestion, questionData{Question: question})
}

// RubricForPair renders the rubric generator's messages for a question and
// two responses, shown in the order given.
func (s *Set) RubricForPair(question, a, b string) ([]backend.Message, error) {
	return s.chat(RubricPair, pairData{Question: question, ResponseA: a, ResponseB: b})
}

// JudgeGenerative renders the generative judge's messages for one response
// under a rubric: a system message when the variant has one, then the user
// message. The rubric's criteria (weights renormalized, scoring levels kept)
// may be empty: the official judge is asked even under a rubric it cannot
// parse, and the caller decides whether to ask.
func (s *Set) JudgeGenerative(question, response string, r Rubric) ([]backend.Message, error) {
	cs, err := normalized(r.Criteria)
	if err != nil {
		return nil, fmt.Errorf("prompt %s: %w", JudgeGenerative, err)
	}
	return s.chat(JudgeGenerative, judgeData{Question: question, Response: response, Rubric: r.Text, Criteria: cs})
}

// JudgeYesNo renders the yes/no judge's prompt for every criterion of a
// rubric: the shared prefix and one suffix per criterion, so that
// prefix+suffixes[k] asks about criterion k and ends where the answer token
// goes (backend.ScoreRequest's shape).
func (s *Set) JudgeYesNo(question, response string, cs []Criterion) (prefix string, suffixes []string, err error) {
	if len(cs) == 0 {
		return "", nil, fmt.Errorf("prompt %s: %w", JudgeYesNo, &ScoreError{Reason: ReasonEmptyRubric})
	}
	prefix, err = s.render(JudgeYesNo, "prefix", yesNoData{Question: question, Response: response})
	if err != nil {
		return "", nil, err
	}
	for _, c := range cs {
		suf, err := s.render(JudgeYesNo, "suffix", yesNoData{Question: question, Response: response, Criterion: c.Criterion, Levels: c.Levels})
		if err != nil {
			return "", nil, err
		}
		suffixes = append(suffixes, suf)
	}
	return prefix, suffixes, nil
}

// QuestionInference renders the back-translation messages for an answer: a
// system message when the template has one, then the user message.
func (s *Set) QuestionInference(answer string) ([]backend.Message, error) {
	return s.chat(QuestionInference, answerData{Answer: answer})
}

// Contents are what `evolm prompts show` fills a prompt with: the official
// format_messages content keys question, answer and rubric.
type Contents struct {
	Question, Answer, Rubric string
}

// ShowNames are the prompts Show renders.
var ShowNames = []Name{Policy, PolicyWithRubric, RubricQuestion, JudgeGenerative, QuestionInference}

// Show returns the chat messages prompt n sends for c, as the loop sends
// them: the policy's prompts are followed by the question as the user turn
// (a system prompt that renders to nothing is not sent), and the rubric is
// inserted as given, its criteria parsed from it under format f for the
// prompts that list them.
func (s *Set) Show(n Name, c Contents, f schemas.RubricFormat) ([]backend.Message, error) {
	withQuestion := func(sys string, err error) ([]backend.Message, error) {
		if err != nil {
			return nil, err
		}
		var msgs []backend.Message
		if strings.TrimSpace(sys) != "" {
			msgs = append(msgs, backend.Message{Role: "system", Content: sys})
		}
		return append(msgs, backend.Message{Role: "user", Content: c.Question}), nil
	}
	r := Rubric{Text: c.Rubric, Criteria: ParsedCriteria(c.Rubric, f)}
	switch n {
	case Policy:
		return withQuestion(s.Policy())
	case PolicyWithRubric:
		return withQuestion(s.PolicyWithRubric(r))
	case RubricQuestion:
		return s.RubricForQuestion(c.Question)
	case JudgeGenerative:
		return s.JudgeGenerative(c.Question, c.Answer, r)
	case QuestionInference:
		return s.QuestionInference(c.Answer)
	}
	names := make([]string, len(ShowNames))
	for i, sn := range ShowNames {
		names[i] = string(sn)
	}
	return nil, fmt.Errorf("prompt %q: want one of %s", n, strings.Join(names, ", "))
}

// ParsedCriteria returns the criteria of a generated rubric under format f,
// with their scoring levels, or none when it has no usable criteria (no
// criterion, or a weight that is not positive and finite).
func ParsedCriteria(raw string, f schemas.RubricFormat) []Criterion {
	pcs, _ := schemas.ParseRubric(raw, f)
	out := make([]Criterion, 0, len(pcs))
	for _, c := range pcs {
		if !(c.Weight > 0) || math.IsInf(c.Weight, 0) {
			return nil
		}
		out = append(out, Criterion{Criterion: c.Criterion, Weight: c.Weight, Levels: c.Levels})
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// normalized returns the criteria with weights scaled to sum to 1 (none for
// none). It fails on a weight that is negative or not finite, and on
// weights that sum to zero.
func normalized(cs []Criterion) ([]Criterion, error) {
	if len(cs) == 0 {
		return nil, nil
	}
	ws := make([]float64, len(cs))
	for i, c := range cs {
		ws[i] = c.Weight
	}
	ws, err := normalizeWeights(ws)
	if err != nil {
		return nil, err
	}
	out := make([]Criterion, len(cs))
	for i, c := range cs {
		out[i] = Criterion{Criterion: c.Criterion, Weight: ws[i], Levels: c.Levels}
	}
	return out, nil
}

// normalizeWeights scales weights to sum to 1.
func normalizeWeights(ws []float64) ([]float64, error) {
	if len(ws) == 0 {
		return nil, &ScoreError{Reason: ReasonEmptyRubric}
	}
	var sum float64
	for i, w := range ws {
		if math.IsNaN(w) || math.IsInf(w, 0) || w < 0 {
			return nil, &ScoreError{Reason: ReasonBadWeight, Detail: fmt.Sprintf("criterion %d has weight %v", i, w)}
		}
		sum += w
	}
	if sum == 0 {
		return nil, &ScoreError{Reason: ReasonZeroWeights, Detail: fmt.Sprintf("%d criteria, all weights 0", len(ws))}
	}
	out := make([]float64, len(ws))
	for i, w := range ws {
		out[i] = w / sum
	}
	return out, nil
}
