package toyworld

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/schemas"
)

func TestSplitsAreDisjointAndSeeded(t *testing.T) {
	a, b, c := Split(1), Split(1), Split(2)
	if d := cmp.Diff(a, b); d != "" {
		t.Fatalf("same seed, different splits (-first +second):\n%s", d)
	}
	if cmp.Equal(a.HeldOut, c.HeldOut) {
		t.Fatal("seeds 1 and 2 hold out the same questions")
	}
	seen := map[string]string{}
	for name, qs := range map[string][]Question{"held-out": a.HeldOut, "rl": a.RL, "sft": a.SFT} {
		for _, q := range qs {
			if prev, dup := seen[q.Text]; dup {
				t.Fatalf("%q in %s and %s", q.Text, prev, name)
			}
			seen[q.Text] = name
			for _, d := range q.Distractors {
				if d == q.Answer {
					t.Fatalf("%s: distractor %s is the answer", q.ID, d)
				}
			}
		}
	}
	if len(a.HeldOut) != HeldOutSize || len(a.RL) != RLSize || len(seen) != 6198 {
		t.Fatalf("sizes: held-out %d, rl %d, all %d", len(a.HeldOut), len(a.RL), len(seen))
	}
	for _, q := range universe() {
		if q.Text == "What is the largest of 17, 42 and 8?" && (q.Answer != "42" || !strings.Contains(strings.Join(q.Distractors, ","), "41")) {
			t.Fatalf("largest of 17, 42 and 8: %+v", q)
		}
		if q.Text == "What number comes after 41?" && q.Answer != "42" {
			t.Fatalf("after 41: %+v", q)
		}
	}
}

// TestWrittenData: every rubric of the warm-start data passes R_format and
// states its question's answer in the dealbreaker; every judge label is
// what the criterion says of the response; the held-out files agree.
func TestWrittenData(t *testing.T) {
	set, err := LoadPrompts(filepath.Join(testutil.Root(t), "datasets", "toyworld", "prompts"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := Write(dir, Options{Seed: 3, Prompts: set, JudgePerQuestion: 1}); err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, line := range lines(t, filepath.Join(dir, PolicySFTFile)) {
		var ex struct {
			Kind     string
			Messages []struct{ Role, Content string }
		}
		if err := json.Unmarshal([]byte(line), &ex); err != nil {
			t.Fatal(err)
		}
		kinds[ex.Kind]++
		last := ex.Messages[len(ex.Messages)-1]
		if last.Role != "assistant" {
			t.Fatalf("%s: last turn %q", ex.Kind, last.Role)
		}
		if ex.Kind == "rubric" {
			cs, err := schemas.ValidateRubric(last.Content)
			if err != nil {
				t.Fatalf("rubric %s fails R_format: %v", last.Content, err)
			}
			q := strings.TrimSpace(strings.TrimPrefix(ex.Messages[0].Content, "Write a rubric for: "))
			if want := AnswerCriterion(answerOf(t, q)); cs[0].Criterion != want {
				t.Fatalf("rubric for %q: dealbreaker %q, want %q", q, cs[0].Criterion, want)
			}
		}
	}
	for _, k := range []string{"answer", "rubric", "question_inference", "rubric_guided"} {
		if kinds[k] == 0 {
			t.Errorf("no %s chats (%v)", k, kinds)
		}
	}
	num := regexp.MustCompile(`Criterion: (.*)\nResponse: (.*)\nMet:$`)
	yes := 0
	judge := lines(t, filepath.Join(dir, JudgeSFTFile))
	for _, line := range judge {
		var ex struct{ Prompt, Completion string }
		if err := json.Unmarshal([]byte(line), &ex); err != nil {
			t.Fatal(err)
		}
		m := num.FindStringSubmatch(ex.Prompt)
		if m == nil {
			t.Fatalf("judge prompt %q", ex.Prompt)
		}
		crit, resp := m[1], m[2]
		want := " no"
		switch {
		case crit == FormatCriterion && regexp.MustCompile(`^\d+$`).MatchString(resp):
			want = " yes"
		case crit != FormatCriterion && strings.Contains(crit, " "+regexp.MustCompile(`\d+`).FindString(resp)+"."):
			want = " yes"
		}
		if ex.Completion != want {
			t.Fatalf("%q: %q, want %q", ex.Prompt, ex.Completion, want)
		}
		if want == " yes" {
			yes++
		}
	}
	if f := float64(yes) / float64(len(judge)); f < 0.4 || f > 0.6 {
		t.Errorf("judge data: %.2f yes, want about half", f)
	}
	if n := len(lines(t, filepath.Join(dir, HeldOutPairsFile))); n != HeldOutSize {
		t.Errorf("%d held-out pairs", n)
	}
}

func answerOf(t *testing.T, question string) string {
	for _, q := range universe() {
		if q.Text == question {
			return q.Answer
		}
	}
	t.Fatalf("no question %q", question)
	return ""
}

func lines(t *testing.T, path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}
