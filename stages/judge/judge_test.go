package judge

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	_ "github.com/evolm/evolm/serving/openai" // the openai backend

	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/pipeline/pipelinetest"
	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/serving/roles"
)

// fakeJudgeBackend is a test double: generative replies are looked up by
// the response text the prompt carries, and yes/no log-probs come from a
// fixed table.
type fakeJudgeBackend struct {
	replies map[string]string // response text → reply
	yes     float64           // P(" yes") given to every criterion
	calls   int
	seen    [][]backend.Message // every generative request's messages
	suffix  []string            // every yes/no suffix
	prefix  [][]string          // per Score call, each request's prefix
}

func (f *fakeJudgeBackend) Generate(_ context.Context, reqs []backend.GenerateRequest) ([]backend.GenerateResponse, error) {
	f.calls++
	out := make([]backend.GenerateResponse, len(reqs))
	for i, r := range reqs {
		out[i] = backend.GenerateResponse{ID: r.ID, Model: "fake-judge"}
		f.seen = append(f.seen, r.Messages)
		user := r.Messages[len(r.Messages)-1].Content
		for resp, reply := range f.replies {
			// "Answer to evaluate:" in the official judge prompt, <response> in evolm's.
			if strings.Contains(user, "Answer to evaluate: "+resp+"\n\n") || strings.Contains(user, "<response>\n"+resp+"\n</response>") {
				out[i].Completions = []backend.Completion{{Text: reply, FinishReason: backend.FinishStop, Tokens: 3}}
			}
		}
		if out[i].Completions == nil {
			out[i].Failure = &backend.RowFailure{Reason: backend.FailureRejected, Message: "HTTP 400: prompt too long"}
		}
	}
	return out, nil
}

func (f *fakeJudgeBackend) Score(_ context.Context, reqs []backend.ScoreRequest) ([]backend.ScoreResponse, error) {
	f.calls++
	out := make([]backend.ScoreResponse, len(reqs))
	f.prefix = append(f.prefix, nil)
	for i, r := range reqs {
		f.prefix[len(f.prefix)-1] = append(f.prefix[len(f.prefix)-1], r.Prefix)
		out[i] = backend.ScoreResponse{ID: r.ID, Model: "fake-judge"}
		f.suffix = append(f.suffix, r.Suffixes...)
		for range r.Suffixes {
			lps := make([]float64, len(r.Candidates))
			for j, c := range r.Candidates {
				switch c {
				case " yes":
					lps[j] = math.Log(f.yes)
				case " no":
					lps[j] = math.Log(1 - f.yes)
				default:
					lps[j] = math.Inf(-1)
				}
			}
			out[i].LogProbs = append(out[i].LogProbs, lps)
		}
	}
	return out, nil
}

func newJudge(t *testing.T, mode string, fb *fakeJudgeBackend, extra ...any) *judge {
	t.Helper()
	values := map[string]any{"roles.judge.model": "fake", "roles.judge.mode": mode}
	for i := 0; i+1 < len(extra); i += 2 {
		values[extra[i].(string)] = extra[i+1]
	}
	st := pipelinetest.FromConfig(t, Name, values, newFromConfig)
	b := roles.NewBackend("fake", "fake-judge", fb, fb, nil, nil)
	return &judge{Stage: st, b: b, version: st.prompts.Template(st.promptName()).Version}
}

func crit(ws ...float64) []schemas.Criterion {
	out := make([]schemas.Criterion, len(ws))
	for i, w := range ws {
		out[i] = schemas.Criterion{Criterion: fmt.Sprintf("criterion %d", i), Weight: w}
	}
	return out
}

// result is the part of a judgment the tests compare.
type result struct {
	ID     string
	Score  *float64
	Reason string // score_missing_reason up to its first ':'
	Per    []float64
}

func results(js []schemas.Judgment) []result {
	out := make([]result, len(js))
	for i, j := range js {
		out[i] = result{ID: j.JudgmentID, Score: j.Score, Per: j.CriterionScores}
		if j.ScoreMissingReason != nil {
			out[i].Reason, _, _ = strings.Cut(*j.ScoreMissingReason, ":")
		}
	}
	return out
}

func f64(v float64) *float64 { return &v }

func TestJudgeBadInput(t *testing.T) {
	ctx := context.Background()
	failed := "backend rejected: too long"
	resps := []Response{
		{ID: "r-good", ItemID: "q", Question: "Q?", HasQuestion: true, Text: "good answer"},
		{ID: "r-notjson", ItemID: "q", Question: "Q?", HasQuestion: true, Text: "rambling answer"},
		{ID: "r-range", ItemID: "q", Question: "Q?", HasQuestion: true, Text: "overrated answer"},
		{ID: "r-nan", ItemID: "q", Question: "Q?", HasQuestion: true, Text: "nan answer"},
		{ID: "r-rejected", ItemID: "q", Question: "Q?", HasQuestion: true, Text: "unknown to the double"},
		{ID: "r-failed", ItemID: "q", Question: "Q?", HasQuestion: true, Text: "", Failed: &failed},
		{ID: "r-norubric", ItemID: "other", Question: "Q?", HasQuestion: true, Text: "good answer"},
	}
	byItem := map[string][]schemas.Rubric{"q": {{RubricID: "ok", ItemID: "q", Criteria: crit(0.25, 0.75)}}}
	fb := &fakeJudgeBackend{yes: 0.8, replies: map[string]string{
		"good answer":      `<think>hmm</think>{"reasoning": "fine", "score": 0.75}`,
		"rambling answer":  "I think it is pretty good overall.",
		"overrated answer": `{"reasoning": "great", "score": 1.5}`,
		"nan answer":       `{"reasoning": "?", "score": NaN}`,
	}}
	got, unrubric, err := newJudge(t, schemas.JudgeGenerative, fb).judge(ctx, resps, byItem)
	if err != nil {
		t.Fatal(err)
	}
	want := []result{
		{ID: "r-good|ok", Score: f64(0.75), Per: []float64{}},
		{ID: "r-notjson|ok", Reason: "not_json", Per: []float64{}},
		{ID: "r-range|ok", Reason: "score_out_of_range", Per: []float64{}},
		{ID: "r-nan|ok", Reason: "score_not_finite", Per: []float64{}},
		{ID: "r-rejected|ok", Reason: "backend rejected", Per: []float64{}},
		{ID: "r-failed|ok", Reason: "response_failed", Per: []float64{}},
	}
	if d := cmp.Diff(want, results(got)); d != "" {
		t.Errorf("generative judgments (-want +got):\n%s", d)
	}
	if unrubric != 1 {
		t.Errorf("responses without a rubric = %d, want 1", unrubric)
	}
	for _, j := range got {
		if j.JudgeModel != "fake-judge" || j.JudgeMode != schemas.JudgeGenerative || !strings.HasPrefix(j.PromptVersion, "judge_generative.official@v3+sha256:") {
			t.Errorf("%s: identity %q %q %q", j.JudgmentID, j.JudgeModel, j.JudgeMode, j.PromptVersion)
		}
	}
	if got[1].RawText != "I think it is pretty good overall." {
		t.Errorf("raw text not kept: %q", got[1].RawText)
	}
}

func TestJudgeRubricFailures(t *testing.T) {
	ctx := context.Background()
	resps := []Response{{ID: "r", ItemID: "q", Question: "Q?", HasQuestion: true, Text: "good answer"}}
	byItem := map[string][]schemas.Rubric{"q": {
		{RubricID: "a-ok", SampleIdx: 0, Criteria: crit(1, 3)},
		{RubricID: "b-zero", SampleIdx: 1, Criteria: crit(0, 0)},
		{RubricID: "c-empty", SampleIdx: 2, Criteria: []schemas.Criterion{}},
		{RubricID: "d-negative", SampleIdx: 3, Criteria: crit(-1, 2)},
	}}
	for _, mode := range []string{schemas.JudgeYesNo, schemas.JudgeGenerative} {
		t.Run(mode, func(t *testing.T) {
			fb := &fakeJudgeBackend{yes: 0.8, replies: map[string]string{"good answer": `{"score": 0.5}`}}
			got, _, err := newJudge(t, mode, fb).judge(ctx, resps, byItem)
			if err != nil {
				t.Fatal(err)
			}
			okRow := result{ID: "r|a-ok", Score: f64(0.5), Per: []float64{}}
			if mode == schemas.JudgeYesNo {
				okRow = result{ID: "r|a-ok", Score: f64(0.8), Per: []float64{0.8, 0.8}}
			}
			want := []result{
				okRow,
				{ID: "r|b-zero", Reason: "zero_weights", Per: []float64{}},
				{ID: "r|c-empty", Reason: "empty_rubric", Per: []float64{}},
				{ID: "r|d-negative", Reason: "invalid_weight", Per: []float64{}},
			}
			if d := cmp.Diff(want, results(got), cmp.Comparer(func(a, b float64) bool { return math.Abs(a-b) < 1e-12 })); d != "" {
				t.Errorf("judgments (-want +got):\n%s", d)
			}
			for _, j := range got {
				if j.Score != nil && math.IsNaN(*j.Score) {
					t.Errorf("%s: NaN score", j.JudgmentID)
				}
			}
			if fb.calls != 1 {
				t.Errorf("backend calls = %d, want 1 (only the valid rubric is sent)", fb.calls)
			}
		})
	}
}

// TestYesNoSendsAResponsesRubricsTogether checks the order the torch
// backend's prefix sharing relies on: in the rubric phase each answer of a
// pair is judged under all the pair's rubrics, and those requests reach the
// backend consecutively, in one call, with the same prefix.
func TestYesNoSendsAResponsesRubricsTogether(t *testing.T) {
	var resps []Response
	byItem := map[string][]schemas.Rubric{}
	for p := range 2 {
		item := fmt.Sprintf("pair%d", p)
		for _, side := range []string{"chosen", "rejected"} {
			resps = append(resps, Response{ID: item + "/" + side, ItemID: item, Question: "Q" + item + "?", HasQuestion: true, Text: side + " answer of " + item})
		}
		for r := range 3 {
			byItem[item] = append(byItem[item], schemas.Rubric{RubricID: fmt.Sprintf("%s-r%d", item, r), SampleIdx: int32(r), Criteria: crit(1, 2)})
		}
	}
	fb := &fakeJudgeBackend{yes: 0.7}
	if _, _, err := newJudge(t, schemas.JudgeYesNo, fb).judge(context.Background(), resps, byItem); err != nil {
		t.Fatal(err)
	}
	if len(fb.prefix) != 1 || len(fb.prefix[0]) != 12 {
		t.Fatalf("Score calls %v, want one of 12 requests", fb.prefix)
	}
	got := fb.prefix[0]
	for i := 0; i < 12; i += 3 {
		if got[i] != got[i+1] || got[i] != got[i+2] || (i > 0 && got[i] == got[i-1]) {
			t.Errorf("requests %d..%d: prefixes not shared by one answer's three rubrics alone", i, i+2)
		}
		if !strings.Contains(got[i], resps[i/3].Text) {
			t.Errorf("requests %d..%d: prefix does not hold answer %q", i, i+2, resps[i/3].Text)
		}
	}
}

func TestJudgeMissingQuestionIsAnError(t *testing.T) {
	_, _, err := newJudge(t, schemas.JudgeYesNo, &fakeJudgeBackend{}).judge(context.Background(),
		[]Response{{ID: "r", ItemID: "q", Text: "x"}},
		map[string][]schemas.Rubric{"q": {{RubricID: "a", Criteria: crit(1, 1)}}})
	if err == nil || !strings.Contains(err.Error(), "prompt q is not in the prompts input") {
		t.Errorf("error = %v", err)
	}
}

func TestJudgeEndpointDown(t *testing.T) {
	cfg, err := pipeline.StageConfig(Name, map[string]any{"roles.judge.model": "judge", "roles.judge.mode": schemas.JudgeYesNo, "roles.judge.backend": "openai",
		"roles.judge.endpoints": []string{"http://127.0.0.1:1/v1"}, "roles.judge.max_attempts": 2, "roles.judge.request_timeout": "2s"})
	if err != nil {
		t.Fatal(err)
	}
	st, err := newFromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := roles.Open(st.judge, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	j := &judge{Stage: st, b: b, version: "v"}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, _, err = j.judge(ctx, []Response{{ID: "r", ItemID: "q", Question: "Q", HasQuestion: true, Text: "x"}},
		map[string][]schemas.Rubric{"q": {{RubricID: "a", Criteria: crit(1, 1)}}})
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") || !strings.Contains(err.Error(), "attempts failed") {
		t.Errorf("error = %v, want the exhausted endpoint named", err)
	}
}

func TestJudgeConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   string
	}{
		{"no model", map[string]any{}, "roles.judge.model"},
		{"openai without endpoints", map[string]any{"roles.judge.model": "m", "roles.judge.backend": "openai"}, "roles.judge.endpoints"},
		{"bad prompt override", map[string]any{"roles.judge.model": "m", "roles.judge.prompt_files": []string{"judge_yesno"}}, "name=path"},
		{"another role's prompt", map[string]any{"roles.judge.model": "m", "roles.judge.prompt_files": []string{"policy=x.tmpl"}}, "roles.policy.prompt_files"},
		{"unknown prompt variant", map[string]any{"roles.judge.model": "m", "roles.judge.prompt_variant": "assistant"}, "roles.judge.prompt_variant"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := pipeline.StageConfig(Name, tc.values)
			if err == nil {
				_, err = newFromConfig(cfg)
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v, want it to name %q", err, tc.want)
			}
		})
	}
}

// TestJudgeSeesScoringLevels: the judge is sent the whole rubric, each
// criterion's scoring levels included — from the rubrics table's
// scoring_levels, or from the raw text of a version-1 row that has none — in
// a system and a user message; the yes/no judge sees them per criterion; the
// evolm variant, chosen by config, sends one user message without them.
func TestJudgeSeesScoringLevels(t *testing.T) {
	ctx := context.Background()
	resps := []Response{{ID: "r", ItemID: "q", Question: "Q?", HasQuestion: true, Text: "good answer"}}
	levels := [][]schemas.Level{{{Score: "1.0", Text: "full marks one"}, {Score: "0.0", Text: "none one"}}, {{Score: "1.0", Text: "full marks two"}}}
	raw := `{"criteria": [{"criterion": "criterion 0", "weight": 0.5, "scoring_levels": {"1.0": "full marks one", "0.0": "none one"}}, {"criterion": "criterion 1", "weight": 0.5, "scoring_levels": {"1.0": "full marks two"}}]}`
	byItem := map[string][]schemas.Rubric{"q": {
		{RubricID: "v2", Criteria: crit(0.5, 0.5), ScoringLevels: levels},
		{RubricID: "v1", Criteria: crit(0.5, 0.5), RawText: raw},
	}}
	fb := &fakeJudgeBackend{replies: map[string]string{"good answer": `{"reasoning": "ok", "score": 0.5}`}}
	got, _, err := newJudge(t, schemas.JudgeGenerative, fb).judge(ctx, resps, byItem)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Score == nil || got[1].Score == nil {
		t.Fatalf("judgments = %+v", got)
	}
	if len(fb.seen) != 2 {
		t.Fatalf("%d requests, want 2", len(fb.seen))
	}
	for k, msgs := range fb.seen {
		if len(msgs) != 2 || msgs[0].Role != "system" || msgs[1].Role != "user" {
			t.Fatalf("request %d: messages %v, want system and user", k, msgs)
		}
		// The generator's text as written (v1); a row that kept no text
		// shows its criteria and levels as rubric JSON (v2).
		wants := []string{"Rubric: " + raw + "\n\n", "Question: Q?\n\n"}
		if !strings.Contains(msgs[1].Content, raw) {
			wants = []string{`"criterion": "criterion 0", "weight": 0.50, "scoring_levels": {"1.0": "full marks one", "0.0": "none one"}`,
				`"criterion": "criterion 1", "weight": 0.50, "scoring_levels": {"1.0": "full marks two"}`, "Question: Q?\n\n"}
		}
		for _, want := range wants {
			if !strings.Contains(msgs[1].Content, want) {
				t.Errorf("request %d lacks %q:\n%s", k, want, msgs[1].Content)
			}
		}
	}
	if n := strings.Count(fb.seen[0][1].Content+fb.seen[1][1].Content, "Rubric: "+raw+"\n\n"); n != 1 {
		t.Errorf("%d requests show the generator's text, want 1 (v1)", n)
	}

	yn := &fakeJudgeBackend{yes: 0.5}
	if _, _, err := newJudge(t, schemas.JudgeYesNo, yn).judge(ctx, resps, byItem); err != nil {
		t.Fatal(err)
	}
	if len(yn.suffix) != 4 || !strings.Contains(yn.suffix[0], "- 1.0: full marks one\n- 0.0: none one") || !strings.Contains(yn.suffix[3], "- 1.0: full marks two") {
		t.Errorf("yes/no suffixes %q lack the scoring levels", yn.suffix)
	}

	ev := &fakeJudgeBackend{replies: fb.replies}
	j := newJudge(t, schemas.JudgeGenerative, ev, "roles.judge.prompt_variant", "evolm")
	got, _, err = j.judge(ctx, resps, byItem)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(got[0].PromptVersion, "judge_generative.evolm@v1+sha256:") {
		t.Errorf("evolm variant: prompt version %q", got[0].PromptVersion)
	}
	if len(ev.seen[0]) != 1 || strings.Contains(ev.seen[0][0].Content, "full marks") || !strings.Contains(ev.seen[0][0].Content, "(weight 0.50) criterion 0") {
		t.Errorf("evolm variant sent %v", ev.seen[0])
	}
}
