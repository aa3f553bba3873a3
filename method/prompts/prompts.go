// Package prompts holds the role prompts of EVOLM (README.md, "The method") and the parsing
// of what the judge writes back.
//
// Each role's prompt is a text/template file of the project's own under
// templates/, embedded in the binary. A run may override any of them with a
// file of its own (Load, or LoadDir for every <role>.tmpl in a directory;
// `evolm prompts import` writes such files from the official EVOLM code,
// Imported). Every template starts with a header comment
//
//	{{- /* evolm-prompt name=<role> [variant=<v>] version=<n> ... */ -}}
//
// and has a version string, "<role>@v<n>+sha256:<first 8 hex of the file>"
// ("<role>.<variant>@v<n>+…" when the header names a variant), that stages
// record in their output metadata, so a table always says which prompt, in
// which variant, produced it, and an edited file can never pass for the
// original.
//
// Roles: policy (system prompt, may be empty), policy_with_rubric (system
// prompt carrying the rubric, for the rubric-guided pair strategy),
// rubric_question and rubric_pair (the rubric generator, for a question and
// for a question with two responses), judge_generative (the JSON
// {"reasoning", "score"} judge), judge_yesno (one criterion at a time, split
// into a shared prefix and a per-criterion suffix that ends where the answer
// token goes) and question_inference (back-translation).
//
// # Chat prompts
//
// Every prompt but judge_yesno renders to chat messages. A file may define a
// "system" template, sent as the system message when it renders to more
// than white space, and a "user" template; a file that defines no "user"
// template is the user message as a whole (so a one-message override
// written for version 1 still works). The policy's prompts (policy,
// policy_with_rubric) are system prompts only: the user turns are the
// prompt's own. Their "system" template is sent exactly as it renders; a
// file without one is the system prompt as a whole, white space trimmed.
//
// A rubric reaches a prompt as the generator wrote it (Rubric.Text, the
// official code's choice) and as parsed criteria (Rubric.Criteria, weights
// renormalized): the default templates show the text, evolm's first prompts
// the criteria. JudgeRubricText and PolicyRubricText are the official code's
// ways of removing the generator's reasoning from the text.
//
// # Variants
//
// Some prompts come in named variants, chosen per model role with
// roles.<role>.prompt_variant (Options.Variants here); a prompt_files
// override of a prompt wins over its variant. The embedded template of variant
// v of prompt p is templates/<p>.<v>.tmpl.
//
//   - rubric_generator: official (default) or evolm. official follows the
//     official EVOLM code's rubric_generation_v3 prompt in evolm's words: the
//     instructions and a worked example in the system message, the bare
//     question as the user message, 2 to 5 atomic criteria written from the
//     question alone, each with scoring levels, and a dealbreaker criterion
//     of high weight (about 0.8) stating the expected answer of a question
//     whose short answer can be checked. It says nothing about how specific
//     criteria should be, since the paper reports that shift as an outcome
//     of training. evolm is evolm's first prompt (one user message, 2 to 6
//     criteria, "name the concrete facts … no bare labels"), kept byte for
//     byte.
//   - judge: official (default) or evolm. official follows the official
//     judge: a one-line system message, then the question, the rubric as the
//     generator wrote it and the answer, then the grading instructions and
//     two worked examples, with no rule the official judge lacks. Its yes/no
//     judge shows each criterion with its scoring levels. evolm is evolm's
//     first judge prompts, which show each criterion as "(weight w)
//     criterion" only.
//   - policy: none (default) sends no system prompt; assistant sends the
//     one-line "You are a helpful assistant." system prompt of the official
//     code.
//
// Rendering fails rather than emitting a broken prompt: templates run with
// missingkey=error, and an override is rendered on sample data when loaded.
package prompts

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
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

// Variant names. Each role prompt with alternatives has a default variant
// (listed first in Variants); the others are chosen per model role with
// roles.<role>.prompt_variant.
const (
	// VariantOfficial lays the rubric generator's and the judge's prompts out
	// as the official EVOLM code does (default).
	VariantOfficial = "official"
	// VariantEvolm is evolm's first prompt of the rubric generator and the
	// judge, kept as it was.
	VariantEvolm = "evolm"
	// VariantNone sends the policy no system prompt (default).
	VariantNone = "none"
	// VariantAssistant sends the policy a one-line assistant system prompt,
	// as the official code does.
	VariantAssistant = "assistant"
)

// Variants lists, for every role prompt with alternatives, its variant
// names, the default first. The embedded template of variant v of prompt n is
// templates/<n>.<v>.tmpl; a prompt with no entry has one template,
// templates/<n>.tmpl.
var Variants = map[Name][]string{
	Policy:          {VariantNone, VariantAssistant},
	RubricQuestion:  {VariantOfficial, VariantEvolm},
	RubricPair:      {VariantOfficial, VariantEvolm},
	JudgeGenerative: {VariantOfficial, VariantEvolm},
	JudgeYesNo:      {VariantOfficial, VariantEvolm},
}

// Template is one loaded role prompt.
type Template struct {
	Name Name
	// Variant is the variant the header names ("" when it names none, as an
	// override may).
	Variant string
	// Version is "<name>@v<n>+sha256:<8 hex>", or with a variant
	// "<name>.<variant>@v<n>+sha256:<8 hex>".
	Version string
	Source  string // "embedded" or the override's path
	tmpl    *template.Template
}

// Set is a complete set of role prompts.
type Set struct {
	tmpls map[Name]*Template
}

var header = regexp.MustCompile(`^\{\{-?\s*/\*\s*evolm-prompt\s+name=(\S+)(?:\s+variant=(\S+))?\s+version=(\S+)`)

var funcs = template.FuncMap{
	"inc":        func(i int) int { return i + 1 },
	"weight":     formatWeight,
	"rubricJSON": RubricJSON,
}

func formatWeight(w float64) string { return strconv.FormatFloat(w, 'f', 2, 64) }

// RubricJSON renders criteria as the rubric JSON the generator writes
// (README.md, "The method"), one criterion a line: criterion, weight (two decimals) and,
// when it has any, its scoring levels in their order.
func RubricJSON(cs []Criterion) (string, error) {
	str := func(v string) (string, error) {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v); err != nil {
			return "", err
		}
		return strings.TrimSuffix(b.String(), "\n"), nil
	}
	var b strings.Builder
	b.WriteString(`{"criteria": [`)
	for i, c := range cs {
		if i > 0 {
			b.WriteByte(',')
		}
		crit, err := str(c.Criterion)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "\n  {\"criterion\": %s, \"weight\": %s", crit, formatWeight(c.Weight))
		if len(c.Levels) > 0 {
			b.WriteString(`, "scoring_levels": {`)
			for k, l := range c.Levels {
				if k > 0 {
					b.WriteString(", ")
				}
				score, err := str(l.Score)
				if err != nil {
					return "", err
				}
				text, err := str(l.Text)
				if err != nil {
					return "", err
				}
				b.WriteString(score + ": " + text)
			}
			b.WriteByte('}')
		}
		b.WriteByte('}')
	}
	b.WriteString("\n]}")
	return b.String(), nil
}

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
	variant, tag := string(m[2]), string(name)
	if variant != "" {
		tag += "." + variant
	}
	return &Template{Name: name, Variant: variant, Version: fmt.Sprintf("%s@v%s+sha256:%s", tag, m[3], hex.EncodeToString(sum[:4])),
		Source: source, tmpl: t}, nil
}

// Default returns the embedded prompts, each in its default variant.
func Default() (*Set, error) { return Load(nil) }

// Options chooses the prompts of a Set.
type Options struct {
	// Overrides maps a role prompt to the path of a template file of its
	// own; an override wins over Variants.
	Overrides map[Name]string
	// Variants maps a role prompt to one of its Variants; a prompt without
	// an entry gets its default (the first).
	Variants map[Name]string
}

// Load returns the embedded prompts with some replaced by files: overrides
// maps a role to the path of its template. An override must carry the
// header, parse, and render the role's sample data.
func Load(overrides map[Name]string) (*Set, error) { return LoadOptions(Options{Overrides: overrides}) }

// LoadOptions returns the prompts o chooses: for each role prompt its
// override, else its embedded template in the chosen (or default) variant.
func LoadOptions(o Options) (*Set, error) {
	s := &Set{tmpls: make(map[Name]*Template, len(Names))}
	known := make(map[Name]bool, len(Names))
	for _, n := range Names {
		known[n] = true
	}
	for n := range o.Overrides {
		if !known[n] {
			return nil, fmt.Errorf("prompt override for unknown role %q (roles: %v)", n, Names)
		}
	}
	for n, v := range o.Variants {
		if !known[n] {
			return nil, fmt.Errorf("prompt variant for unknown role %q (roles: %v)", n, Names)
		}
		if !slices.Contains(Variants[n], v) {
			if len(Variants[n]) == 0 {
				return nil, fmt.Errorf("prompt %s has no variants (asked for %q)", n, v)
			}
			return nil, fmt.Errorf("prompt %s: unknown variant %q (variants: %s)", n, v, strings.Join(Variants[n], ", "))
		}
	}
	for _, n := range Names {
		var (
			src    []byte
			source = "embedded"
			err    error
		)
		if path, ok := o.Overrides[n]; ok {
			source = path
			src, err = os.ReadFile(path)
		} else {
			src, err = embedded.ReadFile(embeddedPath(n, o.Variants[n]))
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

// embeddedPath is the embedded template of prompt n in variant v ("" for
// the default).
func embeddedPath(n Name, v string) string {
	vs := Variants[n]
	if len(vs) == 0 {
		return "templates/" + string(n) + ".tmpl"
	}
	if v == "" {
		v = vs[0]
	}
	return "templates/" + string(n) + "." + v + ".tmpl"
}

// LoadDir is Load with every <role>.tmpl file found in dir as an override;
// roles without a file keep the embedded prompt. A file <role>.<name>.tmpl
// is an alternative for a role (`evolm prompts import` writes one per
// official rubric prompt) and is not loaded. A .tmpl file that names no role
// is an error, so a misspelt override is not silently ignored.
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
		if role, _, alt := strings.Cut(name, "."); alt && slices.Contains(Names, Name(role)) {
			continue
		}
		overrides[Name(name)] = filepath.Join(dir, e.Name())
	}
	return Load(overrides)
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
