package prompts

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
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
	for _, n := range Names {
		re := regexp.MustCompile(`^` + string(n) + `@v1\+sha256:[0-9a-f]{8}$`)
		if !re.MatchString(v[string(n)]) {
			t.Errorf("version of %s = %q, want %s", n, v[string(n)], re)
		}
		if src := s.Template(n).Source; src != "embedded" {
			t.Errorf("%s source = %q", n, src)
		}
	}
}

func TestRender(t *testing.T) {
	s := mustDefault(t)
	cs := []Criterion{{"Gives the value 42.", 3}, {"Cites the formula.", 1}}

	if p, err := s.Policy(); err != nil || p != "" {
		t.Errorf("Policy() = %q, %v; want the empty system prompt", p, err)
	}
	p, err := s.PolicyWithRubric(cs)
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "policy_with_rubric", p, "1. (weight 0.75) Gives the value 42.\n2. (weight 0.25) Cites the formula.\n")

	q, err := s.RubricForQuestion("How far is the Moon?")
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "rubric_question", q, "<question>\nHow far is the Moon?\n</question>", `{"criteria": [{"criterion": `, `"weight"`, `"scoring_levels"`, "sum to 1", "2 to 6 criteria")

	pr, err := s.RubricForPair("Q?", "first {{answer}}", "second")
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "rubric_pair", pr, "<response_a>\nfirst {{answer}}\n</response_a>", "<response_b>\nsecond\n</response_b>")

	j, err := s.JudgeGenerative("Q?", "R.", cs)
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "judge_generative", j, "<response>\nR.\n</response>", "(weight 0.75) Gives the value 42.", `"score": <number from 0 to 1>`)

	qi, err := s.QuestionInference("Paris is the capital.")
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "question_inference", qi, "<response>\nParis is the capital.\n</response>")
}

func TestJudgeYesNoSharesPrefix(t *testing.T) {
	s := mustDefault(t)
	prefix, sufs, err := s.JudgeYesNo("What is 2+2?", "It is 4.", []Criterion{{"Says 4.", 1}, {"Is brief.", 0}})
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
		{"empty", nil, ReasonEmptyRubric},
		{"zero weights", []Criterion{{"a", 0}, {"b", 0}}, ReasonZeroWeights},
		{"negative weight", []Criterion{{"a", -1}, {"b", 2}}, ReasonBadWeight},
	}
	for _, tt := range tests {
		if _, err := s.JudgeGenerative("q", "r", tt.cs); ReasonOf(err) != tt.want {
			t.Errorf("JudgeGenerative %s: err = %v, want %s", tt.name, err, tt.want)
		}
		if _, err := s.PolicyWithRubric(tt.cs); ReasonOf(err) != tt.want {
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
	if err != nil || got != "What was asked? 42" {
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
	if got, _ := ds.QuestionInference("a"); got != "Q? a" || !strings.HasPrefix(ds.Template(QuestionInference).Version, "question_inference@v2+") {
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
