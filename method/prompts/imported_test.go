package prompts

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/serving/backend"
)

// officialDouble is a test double of the official format_messages: for
// each message type, the messages it returns for a content (f-strings
// insert values verbatim). Its texts hold what breaks naive templating:
// single and doubled braces, a brace right before a value, JSON examples,
// backquotes and template actions.
func officialDouble(msgType string, c Contents) []backend.Message {
	sys := func(s string) backend.Message { return backend.Message{Role: "system", Content: s} }
	user := func(s string) backend.Message { return backend.Message{Role: "user", Content: s} }
	switch msgType {
	case "policy":
		return []backend.Message{sys("Be {helpful}."), user(c.Question)}
	case "policy_with_rubric":
		return []backend.Message{sys("Be {helpful}.\n\nFollow {" + c.Rubric + "}}"), user(c.Question)}
	case "rubric_generation_v3":
		return []backend.Message{sys("Write JSON: {\"criteria\": [{\"criterion\": \"x\", \"weight\": 0.8}]} `code` {{.Question}} {{"), user(c.Question)}
	case "judge":
		return []backend.Message{sys("Judge."), user("Q: " + c.Question + "\n\nRubric: {" + c.Rubric + "}\n\nA: " + c.Answer + "\n\n{{\"score\": <float>}} {\"reasoning\": \"a {b}\", \"score\": 0.5}")}
	case "question_inference":
		return []backend.Message{user("Answer:\n\n" + c.Answer + "\n\nWhat was asked?`{")}
	}
	return nil
}

var testMarkers = map[string]string{"question": "\u27e6evolm:question:5a1\u27e7", "answer": "\u27e6evolm:answer:5a1\u27e7", "rubric": "\u27e6evolm:rubric:5a1\u27e7"}

// TestImportedRendersTheSameMessages: each imported template renders, for
// contents full of braces and template syntax, exactly the messages the
// official double returns for them.
func TestImportedRendersTheSameMessages(t *testing.T) {
	dir := t.TempDir()
	overrides := map[Name]string{}
	markerContents := Contents{Question: testMarkers["question"], Answer: testMarkers["answer"], Rubric: testMarkers["rubric"]}
	for _, r := range ImportRoles {
		src, err := Imported(r, r.MessageType, officialDouble(r.MessageType, markerContents), testMarkers, Source{Module: "m.py", SHA256: "ab"})
		if err != nil {
			t.Fatalf("%s: %v", r.Name, err)
		}
		p := filepath.Join(dir, string(r.Name)+".tmpl")
		if err := os.WriteFile(p, src, 0o644); err != nil {
			t.Fatal(err)
		}
		overrides[r.Name] = p
	}
	s, err := Load(overrides)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []Contents{
		{Question: "What is {x}?", Answer: "It is }} {{.Answer}} `raw`", Rubric: `{"criteria": [{"criterion": "a {b}", "weight": 1}]}`},
		{Question: "", Answer: "", Rubric: ""},
		{Question: "line\nbreak {{", Answer: "{", Rubric: "not json {{{{"},
	} {
		for _, r := range ImportRoles {
			got, err := s.Show(r.Name, c, schemas.FormatLenient)
			if err != nil {
				t.Fatalf("%s: %v", r.Name, err)
			}
			if d := cmp.Diff(officialDouble(r.MessageType, c), got); d != "" {
				t.Errorf("%s for %+v (-official +evolm):\n%s", r.Name, c, d)
			}
		}
	}
	if v := s.Template(JudgeGenerative).Version; !strings.HasPrefix(v, "judge_generative.judge@v1+sha256:") {
		t.Errorf("imported judge version %q", v)
	}
}

// TestImportedRefusesWhatEvolmCannotSend: each error names the message type
// and what is wrong.
func TestImportedRefusesWhatEvolmCannotSend(t *testing.T) {
	role := func(n Name) ImportRole {
		for _, r := range ImportRoles {
			if r.Name == n {
				return r
			}
		}
		t.Fatalf("no import role %s", n)
		return ImportRole{}
	}
	q, a, rb := testMarkers["question"], testMarkers["answer"], testMarkers["rubric"]
	tests := []struct {
		name string
		role Name
		msgs []backend.Message
		want string
	}{
		{"assistant turn", JudgeGenerative, []backend.Message{{Role: "user", Content: q}, {Role: "assistant", Content: "ok"}}, "messages [user, assistant]"},
		{"no user", QuestionInference, []backend.Message{{Role: "system", Content: a}}, "messages [system]"},
		{"answer in a rubric prompt", RubricQuestion, []backend.Message{{Role: "user", Content: q + a}}, `content key "answer", which this prompt does not have (it has: question)`},
		{"question in the policy's system prompt", Policy, []backend.Message{{Role: "system", Content: q}, {Role: "user", Content: q}}, `content key "question", which this prompt does not have (it has: none)`},
		{"policy user turn not the question", PolicyWithRubric, []backend.Message{{Role: "system", Content: rb}, {Role: "user", Content: "Q: " + q}}, "the user message is not the bare question"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Imported(role(tt.role), "some_type", tt.msgs, testMarkers, Source{})
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), `message type "some_type"`) {
				t.Errorf("err = %v, want one naming the message type and %q", err, tt.want)
			}
		})
	}
}

// TestSystemPromptOverride: a policy prompt's "system" template is sent
// exactly as it renders; a whole-file one is trimmed.
func TestSystemPromptOverride(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "p.tmpl")
	if err := os.WriteFile(p, []byte("{{/* evolm-prompt name=policy version=3 */}}{{define \"system\"}}  Be brief.\n{{end}}"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Load(map[Name]string{Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.Policy(); err != nil || got != "  Be brief.\n" {
		t.Errorf("Policy() = %q, %v; want the system template exactly", got, err)
	}
	msgs, err := s.Show(Policy, Contents{Question: "Hi?"}, schemas.FormatStrict)
	if d := cmp.Diff([]backend.Message{{Role: "system", Content: "  Be brief.\n"}, {Role: "user", Content: "Hi?"}}, msgs); d != "" || err != nil {
		t.Errorf("Show(policy) (-want +got), err %v:\n%s", err, d)
	}
	def := mustDefault(t)
	if msgs, _ := def.Show(Policy, Contents{Question: "Hi?"}, schemas.FormatStrict); len(msgs) != 1 {
		t.Errorf("the default policy prompt (none) sends a system message: %v", msgs)
	}
	if _, err := def.Show(RubricPair, Contents{}, schemas.FormatStrict); err == nil || !strings.Contains(err.Error(), "want one of policy, policy_with_rubric, rubric_question, judge_generative, question_inference") {
		t.Errorf("Show(rubric_pair): err = %v", err)
	}
}
