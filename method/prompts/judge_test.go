package prompts

import (
	"encoding/json"
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/serving/backend"
)

func TestParseJudge(t *testing.T) {
	tests := []struct {
		name       string
		reply      string
		want       Verdict
		wantReason Reason
	}{
		{"plain", `{"reasoning": "ok", "score": 0.75}`, Verdict{0.75, "ok"}, ""},
		{"think stripped", "<think>maybe {\"score\": 0.1}</think>\n{\"reasoning\": \"r\", \"score\": 0.6}", Verdict{0.6, "r"}, ""},
		{"bare close from template", "I think {\"score\": 0.2}</think>{\"score\": 0.9}", Verdict{Score: 0.9}, ""},
		{"fenced with prose", "Here is my verdict:\n```json\n{\"reasoning\": \"x\", \"score\": 1}\n```\nDone.", Verdict{1, "x"}, ""},
		{"last scored object wins", `{"score": 0.2} then revised {"criteria": {"a": 1}} {"score": 0.4}`, Verdict{Score: 0.4}, ""},
		{"numeric string", `{"score": " 0.3 "}`, Verdict{Score: 0.3}, ""},
		{"zero", `{"score": 0}`, Verdict{Score: 0}, ""},
		{"float error above one clamped", `{"score": 1.0000000000000002}`, Verdict{Score: 1}, ""},
		{"non-string reasoning ignored", `{"reasoning": ["a"], "score": 0.5}`, Verdict{Score: 0.5}, ""},
		{"not json", "The response is good. Score: 0.8", Verdict{}, ReasonNotJSON},
		{"empty", "", Verdict{}, ReasonNotJSON},
		{"truncated json", `{"reasoning": "abc", "score": 0.`, Verdict{}, ReasonNotJSON},
		{"unclosed think", `<think>{"score": 0.5} hmm`, Verdict{}, ReasonNotJSON},
		{"no score key", `{"reasoning": "fine", "rating": 0.5}`, Verdict{}, ReasonMissingScore},
		{"nested score only", `{"result": {"score": 0.5}}`, Verdict{}, ReasonMissingScore},
		{"score out of range high", `{"score": 8}`, Verdict{}, ReasonScoreOutOfRange},
		{"score out of range low", `{"score": -0.1}`, Verdict{}, ReasonScoreOutOfRange},
		{"score out of range on 10 scale", `{"reasoning": "good", "score": "7/10"}`, Verdict{}, ReasonScoreNotNumber},
		{"score NaN bare", `{"reasoning": "?", "score": NaN}`, Verdict{}, ReasonScoreNotFinite},
		{"score NaN string", `{"score": "NaN"}`, Verdict{}, ReasonScoreNotFinite},
		{"score Infinity bare", `{"score": -Infinity}`, Verdict{}, ReasonScoreNotFinite},
		{"score overflows", `{"score": 1e999}`, Verdict{}, ReasonScoreNotFinite},
		{"score bool", `{"score": true}`, Verdict{}, ReasonScoreNotNumber},
		{"score null", `{"score": null}`, Verdict{}, ReasonScoreNotNumber},
		{"score word", `{"score": "high"}`, Verdict{}, ReasonScoreNotNumber},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseJudge(tt.reply)
			if r := ReasonOf(err); r != tt.wantReason {
				t.Fatalf("ParseJudge(%q) error %v, want reason %q", tt.reply, err, tt.wantReason)
			}
			if err != nil && !errors.Is(err, tt.wantReason) {
				t.Errorf("errors.Is(%v, %q) = false", err, tt.wantReason)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseJudge(%q) (-want +got):\n%s", tt.reply, diff)
			}
		})
	}
}

func TestPYes(t *testing.T) {
	inf := math.Inf(-1)
	yn := YesNo{Yes: []string{" yes", " Yes"}, No: []string{" no", " No"}}
	tests := []struct {
		name       string
		lps        []float64
		want       float64
		wantReason Reason
		wantErr    bool
	}{
		{"even", []float64{math.Log(0.3), inf, math.Log(0.3), inf}, 0.5, "", false},
		{"variants summed", []float64{math.Log(0.2), math.Log(0.2), math.Log(0.1), inf}, 0.8, "", false},
		{"only yes", []float64{-3, inf, inf, inf}, 1, "", false},
		{"only no", []float64{inf, inf, -0.1, -9}, 0, "", false},
		{"large gap stays finite", []float64{-1000, inf, 0, inf}, 0, "", false},
		{"neither", []float64{inf, inf, inf, inf}, 0, ReasonNoYesNoMass, true},
		{"nan", []float64{math.NaN(), inf, -1, inf}, 0, "", true},
		{"wrong length", []float64{-1, -1}, 0, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := yn.PYes(tt.lps)
			if (err != nil) != tt.wantErr || ReasonOf(err) != tt.wantReason {
				t.Fatalf("PYes error %v, want error %v reason %q", err, tt.wantErr, tt.wantReason)
			}
			if math.Abs(got-tt.want) > 1e-12 || math.IsNaN(got) {
				t.Errorf("PYes = %v, want %v", got, tt.want)
			}
			// The judge asks for log-probs among the candidates: the
			// same P(yes).
			if len(tt.lps) == len(yn.Candidates()) {
				among := slices.Clone(tt.lps)
				backend.AmongCandidates(yn.Candidates(), among)
				got2, err2 := yn.PYes(among)
				if (err2 != nil) != tt.wantErr || math.Abs(got2-got) > 1e-12 {
					t.Errorf("among the candidates: PYes = %v, %v; over the vocabulary %v, %v", got2, err2, got, err)
				}
			}
		})
	}
}

func TestWeightedScore(t *testing.T) {
	tests := []struct {
		name       string
		weights    []float64
		scores     []float64
		want       float64
		wantReason Reason
		wantErr    bool
	}{
		{"sums to one", []float64{0.25, 0.75}, []float64{1, 0}, 0.25, "", false},
		{"renormalized", []float64{1, 3}, []float64{1, 0}, 0.25, "", false},
		{"one zero weight", []float64{0, 2}, []float64{1, 0.5}, 0.5, "", false},
		{"no criteria", nil, nil, 0, ReasonEmptyRubric, true},
		{"zero weights", []float64{0, 0}, []float64{1, 1}, 0, ReasonZeroWeights, true},
		{"negative weight", []float64{-1, 2}, []float64{1, 1}, 0, ReasonBadWeight, true},
		{"nan weight", []float64{math.NaN(), 1}, []float64{1, 1}, 0, ReasonBadWeight, true},
		{"nan score", []float64{1, 1}, []float64{math.NaN(), 1}, 0, ReasonScoreNotFinite, true},
		{"score out of range", []float64{1, 1}, []float64{2, 1}, 0, ReasonScoreOutOfRange, true},
		{"length mismatch", []float64{1}, []float64{1, 1}, 0, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := WeightedScore(tt.weights, tt.scores)
			if (err != nil) != tt.wantErr || ReasonOf(err) != tt.wantReason {
				t.Fatalf("WeightedScore error %v, want error %v reason %q", err, tt.wantErr, tt.wantReason)
			}
			if math.Abs(got-tt.want) > 1e-12 || math.IsNaN(got) {
				t.Errorf("WeightedScore = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestYesNoScore(t *testing.T) {
	inf := math.Inf(-1)
	yn := DefaultYesNo
	row := func(pYes, pNo float64) []float64 {
		r := make([]float64, len(yn.Candidates()))
		for i := range r {
			r[i] = inf
		}
		r[0], r[len(yn.Yes)] = math.Log(pYes), math.Log(pNo)
		return r
	}
	total, per, err := YesNoScore(yn, []float64{0.5, 1.5}, [][]float64{row(0.6, 0.2), row(0.1, 0.4)})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]float64{0.75, 0.2}, per, cmp.Comparer(func(a, b float64) bool { return math.Abs(a-b) < 1e-12 })); diff != "" {
		t.Errorf("per criterion (-want +got):\n%s", diff)
	}
	if want := 0.25*0.75 + 0.75*0.2; math.Abs(total-want) > 1e-12 {
		t.Errorf("total = %v, want %v", total, want)
	}
	for _, tc := range []struct {
		name    string
		weights []float64
		lps     [][]float64
		reason  Reason
	}{
		{"empty rubric", nil, nil, ReasonEmptyRubric},
		{"zero weights", []float64{0, 0}, [][]float64{row(0.5, 0.5), row(0.5, 0.5)}, ReasonZeroWeights},
		{"no mass", []float64{1}, [][]float64{{inf, inf, inf, inf, inf, inf, inf, inf}}, ReasonNoYesNoMass},
	} {
		if _, _, err := YesNoScore(yn, tc.weights, tc.lps); ReasonOf(err) != tc.reason {
			t.Errorf("%s: err = %v, want reason %q", tc.name, err, tc.reason)
		}
	}
}

// officialReplies are judge replies on which the official reading and
// evolm's differ, or that test the official one's edges.
var officialReplies = []struct {
	name, reply string
	want        *float64 // nil: missing
	reason      Reason
}{
	{"plain", `{"reasoning": "ok", "score": 0.75}`, ptr(0.75), ""},
	{"out of range kept", `{"reasoning": "great", "score": 1.7}`, ptr(1.7), ""},
	{"negative kept", `{"score": -0.2}`, ptr(-0.2), ""},
	{"ten scale kept", `Score: {"score": 8}`, ptr(8), ""},
	{"numeric string", `{"score": " 0.3 "}`, ptr(0.3), ""},
	{"boolean", `{"score": true}`, ptr(1), ""},
	{"repaired single quotes", `{'reasoning': 'x', 'score': 0.4,}`, ptr(0.4), ""},
	{"brace in the thinking", "<think>use {braces}</think>\n{\"score\": 0.6}", ptr(0.6), ""},
	{"draft with other keys: a list", "<think>{\"score\": 0.5} hmm</think>{\"reasoning\": \"r\", \"score\": 0.9}", nil, ReasonNotJSON},
	{"draft with the same keys: replaced", "<think>{\"reasoning\": \"d\", \"score\": 0.5}</think>{\"reasoning\": \"r\", \"score\": 0.9}", ptr(0.9), ""},
	{"int then float: not the same shape", `{"score": 1} {"score": 0.5}`, nil, ReasonNotJSON},
	{"unquoted keys draft", `{a: 1} text {"score": 0.9}`, nil, ReasonNotJSON},
	{"truncated", `{"reasoning": "abc", "score": 0.`, nil, ReasonNotJSON},
	{"thinking without braces", "<think>fine</think>\n{\"score\": 0.6}", ptr(0.6), ""},
	{"no json", "Score: 0.8", nil, ReasonNotJSON},
	{"no score", `{"rating": 0.5}`, nil, ReasonMissingScore},
	{"word", `{"score": "high"}`, nil, ReasonScoreNotNumber},
	{"nan string", `{"score": "nan"}`, nil, ReasonScoreNotFinite},
}

func ptr(f float64) *float64 { return &f }

// TestParseJudgeOfficial: the official reading keeps scores outside [0, 1]
// and reads the raw reply, thinking included.
func TestParseJudgeOfficial(t *testing.T) {
	for _, tt := range officialReplies {
		t.Run(tt.name, func(t *testing.T) {
			v, err := ReplyOfficial.Parse(tt.reply)
			if ReasonOf(err) != tt.reason {
				t.Fatalf("reason %q (%v), want %q", ReasonOf(err), err, tt.reason)
			}
			if tt.want != nil && v.Score != *tt.want {
				t.Errorf("score %v, want %v", v.Score, *tt.want)
			}
		})
	}
	if _, err := JudgeReply("lenient").Parse("{}"); err == nil {
		t.Error("an unknown reading parses")
	}
}

// TestParseJudgeOfficialMatchesReference runs the official reading in
// Python, with the json_repair the official code imports, on every reply.
func TestParseJudgeOfficialMatchesReference(t *testing.T) {
	var in []string
	for _, tt := range officialReplies {
		in = append(in, tt.reply)
	}
	body, _ := json.Marshal(in)
	var ref []*float64
	if err := json.Unmarshal(testutil.RunPythonInput(t, "judge_reply_reference.py", body), &ref); err != nil || len(ref) != len(in) {
		t.Fatalf("reference output: %v (%d for %d)", err, len(ref), len(in))
	}
	for i, tt := range officialReplies {
		v, err := ParseJudgeOfficial(tt.reply)
		switch {
		case ref[i] == nil && err == nil:
			t.Errorf("%s: the official code gets no score, evolm %v", tt.name, v.Score)
		case ref[i] != nil && (err != nil || v.Score != *ref[i]):
			t.Errorf("%s: the official code reads %v, evolm %v (%v)", tt.name, *ref[i], v.Score, err)
		}
	}
}
