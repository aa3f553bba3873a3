package prompts

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/serving/backend"
)

func mustDefault(t *testing.T) *Set {
	t.Helper()
	s, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestDefaultVersions(t *testing.T) {
	s := mustDefault(t)
	v := s.Versions()
	if len(v) != len(Names) {
		t.Fatalf("%d versions, want %d: %v", len(v), len(Names), v)
	}
	want := map[Name]string{
		Policy: "policy.none@v1", PolicyWithRubric: "policy_with_rubric@v2", QuestionInference: "question_inference@v2",
		RubricQuestion: "rubric_question.official@v3", RubricPair: "rubric_pair.official@v3",
		JudgeGenerative: "judge_generative.official@v3", JudgeYesNo: "judge_yesno.official@v2",
	}
	for _, n := range Names {
		re := regexp.MustCompile(`^` + regexp.QuoteMeta(want[n]) + `\+sha256:[0-9a-f]{8}$`)
		if !re.MatchString(v[string(n)]) {
			t.Errorf("version of %s = %q, want %s", n, v[string(n)], re)
		}
		if src := s.Template(n).Source; src != "embedded" {
			t.Errorf("%s source = %q", n, src)
		}
		if vs := Variants[n]; len(vs) > 0 && s.Template(n).Variant != vs[0] {
			t.Errorf("%s variant = %q, want the default %q", n, s.Template(n).Variant, vs[0])
		}
	}
}

// TestVariants: every variant of every prompt loads and renders, its name
// is in its version, and an unknown variant or one for a prompt without
// variants is an error.
func TestVariants(t *testing.T) {
	for n, vs := range Variants {
		for _, v := range vs {
			s, err := LoadOptions(Options{Variants: map[Name]string{n: v}})
			if err != nil {
				t.Fatalf("%s variant %s: %v", n, v, err)
			}
			if got := s.Template(n); got.Variant != v || !strings.HasPrefix(got.Version, string(n)+"."+v+"@v") {
				t.Errorf("%s variant %s: template variant %q version %q", n, v, got.Variant, got.Version)
			}
		}
	}
	for _, tt := range []struct {
		v    map[Name]string
		want string
	}{
		{map[Name]string{RubricQuestion: "paper"}, `prompt rubric_question: unknown variant "paper" (variants: official, evolm)`},
		{map[Name]string{QuestionInference: "official"}, "prompt question_inference has no variants"},
		{map[Name]string{"critic": "official"}, `unknown role "critic"`},
	} {
		if _, err := LoadOptions(Options{Variants: tt.v}); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("LoadOptions(%v): err = %v, want %q", tt.v, err, tt.want)
		}
	}
	// An override wins over the variant.
	dir := t.TempDir()
	p := filepath.Join(dir, "rq.tmpl")
	if err := os.WriteFile(p, []byte("{{/* evolm-prompt name=rubric_question version=9 */ -}}\nRubric for: {{.Question}}"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := LoadOptions(Options{Overrides: map[Name]string{RubricQuestion: p}, Variants: map[Name]string{RubricQuestion: VariantEvolm}})
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := s.RubricForQuestion("q?")
	if err != nil || len(msgs) != 1 || msgs[0] != (backend.Message{Role: "user", Content: "Rubric for: q?"}) {
		t.Errorf("override with a variant set renders %v, %v", msgs, err)
	}
	if got := s.Template(RubricQuestion); got.Variant != "" || !strings.HasPrefix(got.Version, "rubric_question@v9+sha256:") {
		t.Errorf("override template variant %q version %q", got.Variant, got.Version)
	}
}

func TestRender(t *testing.T) {
	s := mustDefault(t)
	cs := []Criterion{{Criterion: "Gives the value 42.", Weight: 3}, {Criterion: "Cites the formula.", Weight: 1}}

	if p, err := s.Policy(); err != nil || p != "" {
		t.Errorf("Policy() = %q, %v; want the empty system prompt", p, err)
	}
	// The policy sees the rubric as the generator wrote it, scoring levels
	// and all, not the parsed criteria.
	text := `{"criteria": [{"criterion": "Gives the value 42.", "weight": 3, "scoring_levels": {"1.0": "42 {exactly}", "0.0": "other"}}]}`
	p, err := s.PolicyWithRubric(Rubric{Text: text, Criteria: cs})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(p, "You are a helpful assistant.\n\n") || !strings.HasSuffix(p, "\n\n"+text) {
		t.Errorf("policy_with_rubric = %q, want the assistant line, one instruction and the rubric text last", p)
	}
	if strings.Contains(p, "(weight") || strings.Contains(p, "do not mention") {
		t.Errorf("policy_with_rubric lists parsed criteria or adds a rule the official prompt lacks:\n%s", p)
	}

	pr, err := s.RubricForPair("Q?", "first {{answer}}", "second")
	if err != nil {
		t.Fatal(err)
	}
	if len(pr) != 2 || pr[0].Role != "system" || pr[1].Role != "user" {
		t.Fatalf("rubric_pair messages = %v, want system and user", pr)
	}
	mustContain(t, "rubric_pair system", pr[0].Content, "2 to 5 criteria", "The dealbreaker", "from the question only, without assuming what the answer is", `"scoring_levels"`)
	mustContain(t, "rubric_pair user", pr[1].Content, "Q?\n\n<response_a>\nfirst {{answer}}\n</response_a>", "<response_b>\nsecond\n</response_b>")

	qi, err := s.QuestionInference("Paris is the capital.")
	if err != nil {
		t.Fatal(err)
	}
	if len(qi) != 2 || qi[0].Role != "system" || qi[1].Role != "user" {
		t.Fatalf("question_inference messages = %v, want system and user (as the official code sends)", qi)
	}
	mustContain(t, "question_inference system", qi[0].Content, "question only")
	mustContain(t, "question_inference user", qi[1].Content, "\n\nParis is the capital.\n\n")
}

// TestRubricPromptOfficial: the default rubric prompt has the official
// layout and substance (rubric_generation_v3): the instructions and a worked
// example in the system message, the bare question as the user message, 2
// to 5 criteria with scoring levels, a dealbreaker of weight about 0.8 that
// states the expected answer of a checkable question, and none of evolm's
// steering.
func TestRubricPromptOfficial(t *testing.T) {
	s := mustDefault(t)
	q := "How far is the Moon?\nAnswer in km."
	msgs, err := s.RubricForQuestion(q)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 2 || msgs[0].Role != "system" || msgs[1].Role != "user" {
		t.Fatalf("messages = %v, want a system and a user message", msgs)
	}
	if msgs[1].Content != q {
		t.Errorf("user message = %q, want the bare question %q", msgs[1].Content, q)
	}
	sys := msgs[0].Content
	mustContain(t, "rubric_question system", sys,
		"2 to 5 criteria", "Each criterion checks one thing", "Write the criteria from the question only, without assuming what the answer is",
		"weights sum to 1.0", "The dealbreaker", `states that answer, as in "The final answer is equivalent to 100"`, "such as 0.8",
		"A rubric may have no dealbreaker", "scoring levels", `{"criteria": [{"criterion": `, `"weight"`, `"scoring_levels"`,
		`Example. Question: "How should I store leftover cooked rice`)
	for _, steer := range []string{"2 to 6", "concrete facts", "bare labels", `"accuracy"`, "THIS question"} {
		if strings.Contains(sys, steer) {
			t.Errorf("official rubric prompt steers with %q", steer)
		}
	}
	// The worked example is a rubric that passes R_format, with 5 to 10
	// criteria, each with scoring levels.
	ex := sys[strings.Index(sys, "Example. Question:"):]
	ex = ex[strings.Index(ex, "\n")+1:]
	crit, err := schemas.ValidateRubric(ex)
	if err != nil || len(crit) < 2 || len(crit) > 5 {
		t.Errorf("worked example: %d criteria, err %v", len(crit), err)
	}
	for i, lv := range schemas.RubricLevels(ex) {
		if len(lv) < 2 {
			t.Errorf("worked example criterion %d has levels %v", i, lv)
		}
	}
}

// TestRubricPromptEvolm: the evolm variant reproduces evolm's first rubric
// prompts byte for byte, as one user message.
func TestRubricPromptEvolm(t *testing.T) {
	s, err := LoadOptions(Options{Variants: map[Name]string{RubricQuestion: VariantEvolm, RubricPair: VariantEvolm}})
	if err != nil {
		t.Fatal(err)
	}
	golden := func(name string) string {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	q, err := s.RubricForQuestion("How far is the Moon?")
	if err != nil {
		t.Fatal(err)
	}
	if want := golden("rubric_question.evolm.golden"); len(q) != 1 || q[0].Role != "user" || q[0].Content != want {
		t.Errorf("evolm rubric_question = %q\nwant one user message %q", q, want)
	}
	pr, err := s.RubricForPair("Q?", "first", "second")
	if err != nil {
		t.Fatal(err)
	}
	if want := golden("rubric_pair.evolm.golden"); len(pr) != 1 || pr[0].Role != "user" || pr[0].Content != want {
		t.Errorf("evolm rubric_pair = %q\nwant one user message %q", pr, want)
	}
	if v := s.Template(RubricQuestion).Version; !strings.HasPrefix(v, "rubric_question.evolm@v1+sha256:") {
		t.Errorf("evolm version %q", v)
	}
}

// TestJudgeOfficialLayout: the default generative judge has the official
// layout: a one-line system message; a user message with the question, the
// rubric exactly as given (scoring levels, braces and all) and the answer,
// then the instructions, with no rule the official judge lacks. The yes/no
// judge shows each criterion's levels.
func TestJudgeOfficialLayout(t *testing.T) {
	s := mustDefault(t)
	cs := []Criterion{
		{Criterion: "Gives the value 42.", Weight: 3, Levels: []schemas.Level{
			{Score: "1.0", Text: "States 42 with the unit"}, {Score: "0.5", Text: "States 42 without the unit"}, {Score: "0.0", Text: "Another value or none"}}},
		{Criterion: `Cites "the formula" <E=mc^2>.`, Weight: 1},
	}
	text := "{\"criteria\": [{\"criterion\": \"Gives the value 42.\", \"weight\": 0.75, \"scoring_levels\": {\"1.0\": \"States 42\"}}]} {{.Rubric}} }}"
	msgs, err := s.JudgeGenerative("Q?", "R.", Rubric{Text: text, Criteria: cs})
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 2 || msgs[0].Role != "system" || msgs[1].Role != "user" {
		t.Fatalf("judge messages = %v, want system and user", msgs)
	}
	if strings.Contains(msgs[0].Content, "\n") {
		t.Errorf("judge system message %q, want one line", msgs[0].Content)
	}
	user := msgs[1].Content
	if want := "Question: Q?\n\nRubric: " + text + "\n\nAnswer to evaluate: R.\n\n"; !strings.HasPrefix(user, want) {
		t.Errorf("judge user message starts %q, want %q", user[:min(len(user), len(want))], want)
	}
	mustContain(t, "judge user", user, "multiply the rating by the criterion's weight", "Example 1", "Example 2", `"score": 0.85}`,
		`{"reasoning": "<for each criterion: rating × weight; then the sum>", "score": <number from 0.0 to 1.0>}`)
	for _, extra := range []string{"Grade only what the rubric asks", "as it is written", "between two levels", "<rubric>"} {
		if strings.Contains(user, extra) {
			t.Errorf("judge prompt adds %q, which the official judge lacks", extra)
		}
	}
	// A rubric that has no usable criteria is still shown as written.
	if msgs, err := s.JudgeGenerative("Q?", "R.", Rubric{Text: "be nice"}); err != nil || !strings.Contains(msgs[1].Content, "Rubric: be nice\n") {
		t.Errorf("judge under an unparsed rubric: %v, %v", msgs, err)
	}

	_, sufs, err := s.JudgeYesNo("Q?", "R.", cs)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"Criterion: Gives the value 42.\nScoring levels:\n- 1.0: States 42 with the unit\n- 0.5: States 42 without the unit\n- 0.0: Another value or none\n\nDoes the response meet this criterion? Answer yes or no.\nAnswer:",
		"Criterion: Cites \"the formula\" <E=mc^2>.\n\nDoes the response meet this criterion? Answer yes or no.\nAnswer:",
	}
	if diff := cmp.Diff(want, sufs); diff != "" {
		t.Errorf("yes/no suffixes (-want +got):\n%s", diff)
	}
}

// TestJudgeEvolm: the evolm judge variant is evolm's first prompt: one user
// message with "(weight w) criterion" lines and no scoring levels.
func TestJudgeEvolm(t *testing.T) {
	s, err := LoadOptions(Options{Variants: map[Name]string{JudgeGenerative: VariantEvolm, JudgeYesNo: VariantEvolm}})
	if err != nil {
		t.Fatal(err)
	}
	cs := []Criterion{{Criterion: "Gives the value 42.", Weight: 3, Levels: []schemas.Level{{Score: "1.0", Text: "States 42"}}}, {Criterion: "Cites the formula.", Weight: 1}}
	j, err := s.JudgeGenerative("Q?", "R.", Rubric{Text: "ignored", Criteria: cs})
	if err != nil {
		t.Fatal(err)
	}
	if len(j) != 1 || j[0].Role != "user" {
		t.Fatalf("evolm judge messages = %v, want one user message", j)
	}
	mustContain(t, "judge_generative", j[0].Content, "<response>\nR.\n</response>", "Rubric:\n1. (weight 0.75) Gives the value 42.\n2. (weight 0.25) Cites the formula.\n", `"score": <number from 0 to 1>`)
	if strings.Contains(j[0].Content, "States 42") {
		t.Errorf("evolm judge shows scoring levels:\n%s", j[0].Content)
	}
}

func TestPolicyAssistant(t *testing.T) {
	s, err := LoadOptions(Options{Variants: map[Name]string{Policy: VariantAssistant}})
	if err != nil {
		t.Fatal(err)
	}
	if p, err := s.Policy(); err != nil || p != "You are a helpful assistant." {
		t.Errorf("assistant Policy() = %q, %v", p, err)
	}
}

func TestJudgeYesNoSharesPrefix(t *testing.T) {
	s := mustDefault(t)
	prefix, sufs, err := s.JudgeYesNo("What is 2+2?", "It is 4.", []Criterion{{Criterion: "Says 4.", Weight: 1}, {Criterion: "Is brief."}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"Criterion: Says 4.\n\nDoes the response meet this criterion? Answer yes or no.\nAnswer:",
		"Criterion: Is brief.\n\nDoes the response meet this criterion? Answer yes or no.\nAnswer:",
	}
	if diff := cmp.Diff(want, sufs); diff != "" {
		t.Errorf("suffixes (-want +got):\n%s", diff)
	}
	mustContain(t, "prefix", prefix, "<question>\nWhat is 2+2?\n</question>", "<response>\nIt is 4.\n</response>")
	if !strings.HasSuffix(prefix, "</response>\n\n") || strings.Contains(prefix, "Criterion") {
		t.Errorf("prefix %q must hold only the shared part and end before the criterion", prefix)
	}
	if _, _, err := s.JudgeYesNo("q", "r", nil); ReasonOf(err) != ReasonEmptyRubric {
		t.Errorf("empty rubric: err = %v, want %s", err, ReasonEmptyRubric)
	}
}

func TestRubricErrors(t *testing.T) {
	s := mustDefault(t)
	tests := []struct {
		name string
		cs   []Criterion
		want Reason
	}{
		{"zero weights", []Criterion{{Criterion: "a"}, {Criterion: "b"}}, ReasonZeroWeights},
		{"negative weight", []Criterion{{Criterion: "a", Weight: -1}, {Criterion: "b", Weight: 2}}, ReasonBadWeight},
	}
	for _, tt := range tests {
		if _, err := s.JudgeGenerative("q", "r", Rubric{Criteria: tt.cs}); ReasonOf(err) != tt.want {
			t.Errorf("JudgeGenerative %s: err = %v, want %s", tt.name, err, tt.want)
		}
		if _, err := s.PolicyWithRubric(Rubric{Criteria: tt.cs}); ReasonOf(err) != tt.want {
			t.Errorf("PolicyWithRubric %s: err = %v, want %s", tt.name, err, tt.want)
		}
	}
}

func TestOverride(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("qi.tmpl", "{{/* evolm-prompt name=question_inference version=7 */ -}}\nWhat was asked? {{.Answer}}")
	s, err := Load(map[Name]string{QuestionInference: good})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.QuestionInference("42")
	if err != nil || len(got) != 1 || got[0] != (backend.Message{Role: "user", Content: "What was asked? 42"}) {
		t.Errorf("override renders %q, %v", got, err)
	}
	tm := s.Template(QuestionInference)
	if !strings.HasPrefix(tm.Version, "question_inference@v7+sha256:") || tm.Source != good {
		t.Errorf("override version %q source %q", tm.Version, tm.Source)
	}
	if def := mustDefault(t); s.Versions()[string(Policy)] != def.Versions()[string(Policy)] {
		t.Errorf("roles without an override must keep the embedded version")
	}

	odir := t.TempDir()
	if err := os.WriteFile(filepath.Join(odir, "question_inference.tmpl"), []byte("{{/* evolm-prompt name=question_inference version=2 */ -}}\nQ? {{.Answer}}"), 0o644); err != nil {
		t.Fatal(err)
	}
	ds, err := LoadDir(odir)
	if err != nil {
		t.Fatal(err)
	}
	// An alternative of a role (<role>.<name>.tmpl) is not an override.
	if err := os.WriteFile(filepath.Join(odir, "judge_generative.judge_v1.tmpl"), []byte("not a template {{"), 0o644); err != nil {
		t.Fatal(err)
	}
	ds, err = LoadDir(odir)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := ds.QuestionInference("a"); len(got) != 1 || got[0].Content != "Q? a" || !strings.HasPrefix(ds.Template(QuestionInference).Version, "question_inference@v2+") {
		t.Errorf("LoadDir override renders %q, version %q", got, ds.Template(QuestionInference).Version)
	}
	os.WriteFile(filepath.Join(odir, "judge_generativ.tmpl"), []byte("x"), 0o644)
	if _, err := LoadDir(odir); err == nil || !strings.Contains(err.Error(), `unknown role "judge_generativ"`) {
		t.Errorf("LoadDir with a misspelt file: err = %v", err)
	}

	tests := []struct {
		name      string
		overrides map[Name]string
		wantErr   string
	}{
		{"missing file", map[Name]string{Policy: filepath.Join(dir, "nope.tmpl")}, "no such file"},
		{"no header", map[Name]string{Policy: write("a.tmpl", "hello")}, "missing header"},
		{"wrong role in header", map[Name]string{Policy: write("b.tmpl", "{{/* evolm-prompt name=judge_yesno version=1 */}}")}, `header names "judge_yesno"`},
		{"parse error", map[Name]string{Policy: write("c.tmpl", "{{/* evolm-prompt name=policy version=1 */}}{{if}}")}, "missing value for if"},
		{"unknown field", map[Name]string{RubricQuestion: write("d.tmpl", "{{/* evolm-prompt name=rubric_question version=1 */}}{{.Questoin}}")}, "can't evaluate field Questoin"},
		{"policy with a user template", map[Name]string{Policy: write("f.tmpl", `{{/* evolm-prompt name=policy version=1 */}}{{define "system"}}S{{end}}{{define "user"}}U{{end}}`)}, `defines a "user" template`},
		{"yes/no without suffix", map[Name]string{JudgeYesNo: write("e.tmpl", `{{/* evolm-prompt name=judge_yesno version=1 */}}{{define "prefix"}}{{.Question}}{{end}}`)}, `no template "suffix"`},
		{"unknown role", map[Name]string{"critic": good}, `unknown role "critic"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(tt.overrides)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Load: err = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func mustContain(t *testing.T, what, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Errorf("%s prompt lacks %q:\n%s", what, sub, s)
		}
	}
}
