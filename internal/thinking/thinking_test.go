package thinking

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSplit(t *testing.T) {
	tests := []struct {
		in   string
		want Thinking
	}{
		{"<think>\nstep 1\nstep 2\n</think>\n\n{\"a\": 1}", Thinking{Reasoning: "step 1\nstep 2", Answer: "{\"a\": 1}", Closed: true}},
		{"plain answer", Thinking{Answer: "plain answer", Closed: true}},
		{"<think>\n\n</think>\n\nanswer", Thinking{Reasoning: "", Answer: "answer", Closed: true}},
		{"<think>\nstill thinking when cut off", Thinking{Reasoning: "still thinking when cut off", Answer: "", Closed: false}},
		{"prefix <think>x", Thinking{Reasoning: "x", Answer: "prefix ", Closed: false}},
		{"no opening</think>\nanswer", Thinking{Reasoning: "no opening", Answer: "answer", Closed: true}},
		{"<think>a</think>b</think>\n\nc", Thinking{Reasoning: "a", Answer: "c", Closed: true}},
	}
	for _, tc := range tests {
		if diff := cmp.Diff(tc.want, Split(tc.in)); diff != "" {
			t.Errorf("Split(%q) (-want +got):\n%s", tc.in, diff)
		}
		if got := Strip(tc.in); got != tc.want.Answer {
			t.Errorf("Strip(%q) = %q, want %q", tc.in, got, tc.want.Answer)
		}
	}
}
