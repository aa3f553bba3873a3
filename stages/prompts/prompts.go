// Package prompts holds the role prompts of EVOLM (README.md, "The method") and the parsing
// of what the judge writes back.
//
// Each role's prompt is a text/template file of the project's own under
// templates/, embedded in the binary. A run may override any of them with a
// file of its own (Load, or LoadDir for every <role>.tmpl in a directory).
// Every template starts with a header comment
//
//	{{- /* evolm-prompt name=<role> version=<n> ... */ -}}
//
// and has a version string, "<role>@v<n>+sha256:<first 8 hex of the file>",
// that stages record in their output metadata, so a table always says which
// prompt produced it, and an edited file can never pass for the original.
//
// Roles: policy (system prompt, may be empty), policy_with_rubric (system
// prompt carrying the rubric, for the rubric-guided pair strategy),
// rubric_question and rubric_pair (the rubric generator, for a question and
// for a question with two responses), judge_generative (the JSON
// {"reasoning", "score"} judge), judge_yesno (one criterion at a time, split
// into a shared prefix and a per-criterion suffix that ends where the answer
// token goes) and question_inference (back-translation).
//
// Rendering fails rather than emitting a broken prompt: templates run with
// missingkey=error, and an override is rendered on sample data when loaded.
package prompts

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"text/template"
)

//go:embed templates/*.tmpl
var embedded embed.FS

// Name names a role prompt; it is also the template's file name without .tmpl.
type Name string

const (
	Policy            Name = "policy"
	PolicyWithRubric  Name = "policy_with_rubric"
	RubricQuestion    Name = "rubric_question"
	RubricPair        Name = "rubric_pair"
	JudgeGenerative   Name = "judge_generative"
	JudgeYesNo        Name = "judge_yesno"
	QuestionInference Name = "question_inference"
)

// Names lists every role prompt.
var Names = []Name{Policy, PolicyWithRubric, RubricQuestion, RubricPair, JudgeGenerative, JudgeYesNo, QuestionInference}

// Criterion is the part of a rubric criterion that prompts show.
type Criterion struct {
	Criterion string
	Weight    float64
}

// Template is one loaded role prompt.
type Template struct {
	Name    Name
	Version string // "<name>@v<n>+sha256:<8 hex>"
	Source  string // "embedded" or the override's path
	tmpl    *template.Template
}

// Set is a complete set of role prompts.
type Set struct {
	tmpls map[Name]*Template
}

var header = regexp.MustCompile(`^\{\{-?\s*/\*\s*evolm-prompt\s+name=(\S+)\s+version=(\S+)`)

var funcs = template.FuncMap{
	"inc":    func(i int) int { return i + 1 },
	"weight": func(w float64) string { return strconv.FormatFloat(w, 'f', 2, 64) },
}

// sample is the data an override is test-rendered with when loaded.
var sample = map[Name]any{
	Policy:            struct{}{},
	PolicyWithRubric:  rubricData{Criteria: []Criterion{{"States the answer.", 0.5}, {"Shows the steps.", 0.5}}},
	RubricQuestion:    questionData{Question: "What is 2+2?"},
	RubricPair:        pairData{Question: "What is 2+2?", ResponseA: "4", ResponseB: "5"},
	JudgeGenerative:   judgeData{Question: "What is 2+2?", Response: "4", Criteria: []Criterion{{"Says 4.", 1}}},
	QuestionInference: answerData{Answer: "4"},
}

type (
	questionData struct{ Question string }
	answerData   struct{ Answer string }
	rubricData   struct{ Criteria []Criterion }
	pairData     struct{ Question, ResponseA, ResponseB string }
	judgeData    struct {
		Question, Response string
		Criteria           []Criterion
	}
	yesNoData struct{ Question, Response, Criterion string }
)

func parse(name Name, src []byte, source string) (*Template, error) {
	m := header.FindSubmatch(src)
	if m == nil {
		return nil, fmt.Errorf("prompt %s (%s): missing header {{/* evolm-prompt name=%s version=N */}}", name, source, name)
	}
	if Name(m[1]) != name {
		return nil, fmt.Errorf("prompt %s (%s): header names %q", name, source, m[1])
	}
	t, err := template.New(string(name)).Funcs(funcs).Option("missingkey=error").Parse(string(src))
	if err != nil {
		return nil, fmt.Errorf("prompt %s (%s): %w", name, source, err)
	}
	sum := sha256.Sum256(src)
	return &Template{Name: name, Version: fmt.Sprintf("%s@v%s+sha256:%s", name, m[2], hex.EncodeToString(sum[:4])),
		Source: source, tmpl: t}, nil
}

// Default returns the embedded prompts.
func Default() (*Set, error) { return Load(nil) }

// Load returns the embedded prompts with some replaced by files: overrides
// maps a role to the path of its template. An override must carry the
// header, parse, and render the role's sample data.
func Load(overrides map[Name]string) (*Set, error) {
	s := &Set{tmpls: make(map[Name]*Template, len(Names))}
	known := make(map[Name]bool, len(Names))
	for _, n := range Names {
		known[n] = true
	}
	for n := range overrides {
		if !known[n] {
			return nil, fmt.Errorf("prompt override for unknown role %q (roles: %v)", n, Names)
		}
	}
	for _, n := range Names {
		var (
			src    []byte
			source = "embedded"
			err    error
		)
		if path, ok := overrides[n]; ok {
			source = path
			src, err = os.ReadFile(path)
		} else {
			src, err = embedded.ReadFile("templates/" + string(n) + ".tmpl")
		}
		if err != nil {
			return nil, fmt.Errorf("prompt %s: %w", n, err)
		}
		t, err := parse(n, src, source)
		if err != nil {
			return nil, err
		}
		s.tmpls[n] = t
		if err := s.check(n); err != nil {
			return nil, fmt.Errorf("prompt %s (%s): %w", n, source, err)
		}
	}
	return s, nil
}

// LoadDir is Load with every <role>.tmpl file found in dir as an override;
// roles without a file keep the embedded prompt. A .tmpl file that names no
// role is an error, so a misspelt override is not silently ignored.
func LoadDir(dir string) (*Set, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("prompt dir: %w", err)
	}
	overrides := map[Name]string{}
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".tmpl")
		if !ok || e.IsDir() {
			continue
		}
		overrides[Name(name)] = filepath.Join(dir, e.Name())
	}
	return Load(overrides)
}

// check renders a template on its sample data.
func (s *Set) check(n Name) error {
	if n == JudgeYesNo {
		_, _, err := s.JudgeYesNo("What is 2+2?", "4", []Criterion{{"Says 4.", 1}})
		return err
	}
	_, err := s.render(n, "", sample[n])
	return err
}

// Template returns the loaded template of a role.
func (s *Set) Template(n Name) *Template { return s.tmpls[n] }

// Versions maps each role to its version string, for output metadata.
func (s *Set) Versions() map[string]string {
	out := make(map[string]string, len(s.tmpls))
	for n, t := range s.tmpls {
		out[string(n)] = t.Version
	}
	return out
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

// normalized returns the criteria with weights scaled to sum to 1. It fails
// on an empty rubric, a weight that is negative or not finite, and weights
// that sum to zero.
func normalized(cs []Criterion) ([]Criterion, error) {
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
		out[i] = Criterion{Criterion: c.Criterion, Weight: ws[i]}
	}
	return out, nil
}

// Policy renders the policy's system prompt; "" means send none.
func (s *Set) Policy() (string, error) { return s.render(Policy, "", struct{}{}) }

// PolicyWithRubric renders the policy's system prompt carrying a rubric.
func (s *Set) PolicyWithRubric(cs []Criterion) (string, error) {
	n, err := normalized(cs)
	if err != nil {
		return "", fmt.Errorf("prompt %s: %w", PolicyWithRubric, err)
	}
	return s.render(PolicyWithRubric, "", rubricData{Criteria: n})
}

// RubricForQuestion renders the rubric generator's message for a question.
func (s *Set) RubricForQuestion(question string) (string, error) {
	return s.render(RubricQuestion, "", questionData{Question: question})
}

// RubricForPair renders the rubric generator's message for a question and
// two responses, shown in the order given.
func (s *Set) RubricForPair(question, a, b string) (string, error) {
	return s.render(RubricPair, "", pairData{Question: question, ResponseA: a, ResponseB: b})
}

// JudgeGenerative renders the generative judge's message.
func (s *Set) JudgeGenerative(question, response string, cs []Criterion) (string, error) {
	n, err := normalized(cs)
	if err != nil {
		return "", fmt.Errorf("prompt %s: %w", JudgeGenerative, err)
	}
	return s.render(JudgeGenerative, "", judgeData{Question: question, Response: response, Criteria: n})
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
		suf, err := s.render(JudgeYesNo, "suffix", yesNoData{Question: question, Response: response, Criterion: c.Criterion})
		if err != nil {
			return "", nil, err
		}
		suffixes = append(suffixes, suf)
	}
	return prefix, suffixes, nil
}

// QuestionInference renders the back-translation message for an answer.
func (s *Set) QuestionInference(answer string) (string, error) {
	return s.render(QuestionInference, "", answerData{Answer: answer})
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
