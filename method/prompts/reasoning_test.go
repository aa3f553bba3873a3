package prompts

import (
	"strings"
	"testing"
)

func TestJudgeRubricText(t *testing.T) {
	obj := `{"criteria": [{"criterion": "a {b}", "weight": 1.0}]}`
	prose := strings.Repeat("I weigh the options. ", 12) // 252 characters
	long := strings.Repeat("é", 2*thinkingFallback+1)
	tests := []struct{ name, in, want string }{
		{"empty", "", ""},
		{"closed think removed", "<think>plan {x}</think>\n" + obj, "\n" + obj},
		{"think tags any case and spacing", "< THINK >a</ think >" + obj, obj},
		{"unclosed think: the text before it", "before <think> still thinking " + obj, "before"},
		{"unclosed think: from a RUBRIC tag after it", "x<think>hmm <RUBRIC>a</RUBRIC> b", "<RUBRIC>a</RUBRIC> b"},
		{"orphan close dropped", "a</think>b", "ab"},
		{"short prefix kept", "Here it is: " + obj, "Here it is: " + obj},
		{"long prefix: the object alone", prose + obj + " done", obj},
		{"long prefix, invalid object kept whole", prose + `{"criteria": [oops]}`, prose + `{"criteria": [oops]}`},
		{"very long: the last 8000 characters", long, long[len(long)-2*thinkingFallback:]},
	}
	for _, tt := range tests {
		if got := JudgeRubricText(tt.in); got != tt.want {
			t.Errorf("%s: JudgeRubricText = %.80q…, want %.80q…", tt.name, got, tt.want)
		}
	}
}

func TestPolicyRubricText(t *testing.T) {
	tests := []struct{ in, want string }{
		{"<think>a</think>\n\n{\"criteria\": []}\n", `{"criteria": []}`},
		{"<|assistant|><think>a</think>x</think> <answer>R</answer> ", "R"},
		{"<evaluation>e</evaluation>rubric", "rubric"},
		{"<think>never closed", "<think>never closed"},
	}
	for _, tt := range tests {
		if got := PolicyRubricText(tt.in); got != tt.want {
			t.Errorf("PolicyRubricText(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
