package run

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/evolm/evolm/method/pairs"
	"github.com/evolm/evolm/method/schedule"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/pipeline/pipelinetest"
	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/serving/roles"
)

// The tests of this file run steps of the loop on test doubles of the
// models (scripted generators, a judge that scores by rule, a trainer that
// records its batches): fast, and exact about which code path a setting
// takes.

// genDouble is a test double of a generator: reply gives completion j of a
// request.
type genDouble struct {
	model string
	reply func(r backend.GenerateRequest, j int) (string, backend.FinishReason)
	reqs  []backend.GenerateRequest
}

func (g *genDouble) Generate(_ context.Context, reqs []backend.GenerateRequest) ([]backend.GenerateResponse, error) {
	out := make([]backend.GenerateResponse, len(reqs))
	for i, r := range reqs {
		g.reqs = append(g.reqs, r)
		out[i] = backend.GenerateResponse{ID: r.ID, Model: g.model, PromptTokens: 3}
		for j := range max(r.N, 1) {
			text, fr := g.reply(r, j)
			out[i].Completions = append(out[i].Completions, backend.Completion{Index: j, Text: text, TokenIDs: []int{1, 2}, TokenSource: backend.TokensEngine,
				FinishReason: fr, Tokens: 2, LogProbs: []backend.TokenLogProb{{LogProb: -1}, {LogProb: -1}}})
		}
	}
	return out, nil
}

// trainerDouble is a test double of a learner: it records every batch.
type trainerDouble struct{ batches [][]backend.TrainSample }

func (tr *trainerDouble) TrainStep(_ context.Context, b []backend.TrainSample) (backend.TrainStats, error) {
	tr.batches = append(tr.batches, b)
	return backend.TrainStats{Step: len(tr.batches)}, nil
}
func (tr *trainerDouble) Save(context.Context, string) (string, error) {
	return "", fmt.Errorf("not in this test")
}
func (tr *trainerDouble) SaveOptimizer(string) error { return fmt.Errorf("not in this test") }
func (tr *trainerDouble) PromptTokenIDs(msgs []backend.Message) ([]int, error) {
	return []int{len(msgs)}, nil
}

var (
	answerRE = regexp.MustCompile(`(?s)Answer to evaluate: (.*?)\n\nGrade the answer`)
	pairRE   = regexp.MustCompile(`pair-\d{6}-(\d{3})`)
)

// judgeByAnswer is a judge double's reply rule: the reply for the answer in
// the (default) judge prompt, and the rubric it was shown.
func judgeByAnswer(reply func(answer, rubric string) string) *genDouble {
	return &genDouble{model: "judge-double", reply: func(r backend.GenerateRequest, _ int) (string, backend.FinishReason) {
		user := r.Messages[len(r.Messages)-1].Content
		m := answerRE.FindStringSubmatch(user)
		if m == nil {
			return "no answer found", backend.FinishStop
		}
		rubric := user[strings.Index(user, "Rubric: ")+len("Rubric: ") : strings.Index(user, "\n\nAnswer to evaluate: ")]
		return reply(m[1], rubric), backend.FinishStop
	}}
}

// isRubricRequest tells the rubric generator's requests from the policy's.
func isRubricRequest(r backend.GenerateRequest) bool {
	return len(r.Messages) > 0 && strings.Contains(r.Messages[0].Content, "You write grading rubrics")
}

const validRubric = `{"criteria": [{"criterion": "Correct", "weight": 0.6}, {"criterion": "Brief", "weight": 0.4}]}`

// testLoop is a loop over n prompts with the given stages.run and role
// values, the policy (which also writes rubrics) and the judge doubles.
func testLoop(t *testing.T, n int, values map[string]any, policy, judgeGen backend.Generator) (*loop, *trainerDouble) {
	t.Helper()
	vals := map[string]any{"roles.policy.model": "policy-double", "roles.judge.model": "judge-double", "samples": 2, "rubric_samples": 2,
		"prompts_per_step": 2, "k": 1, "roles.judge.mode": schemas.JudgeGenerative, "memory_check": false}
	for k, v := range values {
		vals[k] = v
	}
	cfg, err := pipeline.StageConfig(Name, vals)
	if err != nil {
		t.Fatal(err)
	}
	c, err := FromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	set, err := roles.Prompts(c.Policy, c.RubricGen, c.Judge)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	run, err := pipeline.OpenRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	env := &pipeline.Env{Stage: Name, Run: run, Out: run, Mem: memory.NewGoAllocator(), Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Config: cfg}
	ps := make([]schemas.Prompt, n)
	for i := range ps {
		q := fmt.Sprintf("question %d?", i)
		ps[i] = schemas.Prompt{PromptID: fmt.Sprintf("p%02d", i), Prompt: q, Messages: []schemas.Message{{Role: "user", Content: q}}}
	}
	tr := &trainerDouble{}
	l := &loop{cfg: c, env: env, set: set, prompts: ps, stream: schedule.NewStream(n, c.Seed), ckpt: "initial"}
	l.policy = &roles.Trained{Backend: roles.NewBackend("double", "policy-double", policy, nil, nil, nil), Trainer: tr}
	l.rubric = l.policy
	l.judge = roles.NewBackend("double", "judge-double", judgeGen, nil, nil, nil)
	if l.buf, err = pairs.NewBuffer(c.ReplaySize); err != nil {
		t.Fatal(err)
	}
	return l, tr
}

func readStep[T any](t *testing.T, l *loop, tab *schemas.Table[T], step int, phase string, extra ...pipeline.Partition) []T {
	t.Helper()
	parts := append([]pipeline.Partition{pipeline.Phase(phase), pipeline.Step(step)}, extra...)
	return pipelinetest.ReadRows(t, l.env.Out.Path(pipeline.ShardPath(tab.Name, 0, parts...)), tab, l.env.ReadOptions(tab.Schema()))
}

// TestLenientRubricFormatInTheLoop: rubric.format governs the loop's
// reading of a rubric: a rubric with string weights and trailing prose
// passes R_format under lenient, not under strict.
func TestLenientRubricFormatInTheLoop(t *testing.T) {
	raw := `{"criteria": [{"criterion": "Correct", "weight": "0.6"}, {"criterion": "Brief", "weight": "0.4"}]} Hope this helps!`
	for format, want := range map[string]bool{"lenient": true, "strict": false} {
		pol := &genDouble{model: "policy-double", reply: func(r backend.GenerateRequest, j int) (string, backend.FinishReason) {
			if isRubricRequest(r) {
				return raw, backend.FinishStop
			}
			return fmt.Sprint("answer ", j), backend.FinishStop
		}}
		l, _ := testLoop(t, 4, map[string]any{"rubric.format": format}, pol, judgeByAnswer(func(a, _ string) string { return `{"score": 0.5}` }))
		if _, err := l.policyStep(context.Background(), 0); err != nil {
			t.Fatal(err)
		}
		for _, r := range readStep(t, l, schemas.Rubrics, 0, schemas.PhasePolicy) {
			if r.FormatOK != want || want && len(r.Criteria) != 2 {
				t.Errorf("rubric.format %s: format_ok %v with %d criteria, want %v", format, r.FormatOK, len(r.Criteria), want)
			}
		}
	}
}

// TestTruncatedAnswerIsJudged: with non_stop_penalty false (the official
// joint trainer's rule) an answer cut at max_tokens keeps its judge score;
// with true it gets non_stop_penalty_value.
func TestTruncatedAnswerIsJudged(t *testing.T) {
	for _, penalty := range []bool{false, true} {
		// Sample 0 is cut at max_tokens and good, sample 1 finished and poor.
		pol := &genDouble{model: "policy-double", reply: func(r backend.GenerateRequest, j int) (string, backend.FinishReason) {
			if isRubricRequest(r) {
				return validRubric, backend.FinishStop
			}
			if j == 0 {
				return "good answer", backend.FinishLength
			}
			return "poor answer", backend.FinishStop
		}}
		jd := judgeByAnswer(func(a, _ string) string {
			if a == "good answer" {
				return `{"score": 0.9}`
			}
			return `{"score": 0.2}`
		})
		l, tr := testLoop(t, 4, map[string]any{"non_stop_penalty": penalty}, pol, jd)
		m, err := l.policyStep(context.Background(), 0)
		if err != nil {
			t.Fatal(err)
		}
		js := readStep(t, l, schemas.Judgments, 0, schemas.PhasePolicy)
		if len(js) != 4 {
			t.Fatalf("%d judgments, want one per answer (4): the truncated answers are judged too", len(js))
		}
		if len(tr.batches) != 1 || len(tr.batches[0]) != 4 {
			t.Fatalf("non_stop_penalty %v: trainer batches %v", penalty, tr.batches)
		}
		// Samples come group by group, sample 0 (the truncated one) first.
		truncatedAdv := tr.batches[0][0].Advantage
		if (truncatedAdv > 0) == penalty {
			t.Errorf("non_stop_penalty %v: the truncated good answer's advantage is %v", penalty, truncatedAdv)
		}
		if wantMean := map[bool]float64{false: 0.55, true: 0.1}[penalty]; fmt.Sprintf("%.3f", m.RewardMean) != fmt.Sprintf("%.3f", wantMean) {
			t.Errorf("non_stop_penalty %v: reward mean %v, want %v", penalty, m.RewardMean, wantMean)
		}
	}
}

// TestJudgeReplyOfficialInTheLoop: rubric.judge_reply official keeps a
// score outside [0, 1], which strict reading leaves missing.
func TestJudgeReplyOfficialInTheLoop(t *testing.T) {
	for reading, wantScored := range map[string]bool{"official": true, "strict": false} {
		pol := &genDouble{model: "policy-double", reply: func(r backend.GenerateRequest, j int) (string, backend.FinishReason) {
			if isRubricRequest(r) {
				return validRubric, backend.FinishStop
			}
			return fmt.Sprint("answer ", j), backend.FinishStop
		}}
		jd := judgeByAnswer(func(a, _ string) string { return `<think>{x}</think>{"score": 1.5}` })
		l, _ := testLoop(t, 4, map[string]any{"rubric.judge_reply": reading}, pol, jd)
		if _, err := l.policyStep(context.Background(), 0); err != nil {
			t.Fatal(err)
		}
		for _, j := range readStep(t, l, schemas.Judgments, 0, schemas.PhasePolicy) {
			if (j.Score != nil) != wantScored || (j.Score != nil && *j.Score != 1.5) {
				t.Errorf("judge_reply %s: score %v (missing: %v)", reading, j.Score, j.ScoreMissingReason)
			}
		}
	}
}

// refillDouble answers a policy or rubric step whose own groups all tie
// and whose refill groups carry a signal: round-0 items get one answer
// (or rubric) for every sample, refill items (keys "#r<round>.", pairs past
// the step's first prompts_per_step) differ by sample.
func refillDouble(perStep int) *genDouble {
	return &genDouble{model: "policy-double", reply: func(r backend.GenerateRequest, j int) (string, backend.FinishReason) {
		refill := strings.Contains(r.ID, "#r")
		if m := pairRE.FindStringSubmatch(r.ID); m != nil {
			idx, _ := strconv.Atoi(m[1])
			refill = idx >= perStep
		}
		if isRubricRequest(r) {
			if refill && j == 1 {
				return "not a rubric", backend.FinishStop // R_format 0: a lower reward than sample 0's
			}
			return validRubric, backend.FinishStop
		}
		if refill && j == 1 {
			return "poor answer", backend.FinishStop
		}
		return "good answer", backend.FinishStop
	}}
}

func scoreByAnswer(a, _ string) string {
	if a == "good answer" || strings.HasPrefix(a, "good") {
		return `{"score": 0.9}`
	}
	return `{"score": 0.2}`
}

// TestRubricPhaseRefillsTiedGroups: with rubric_active_sampling a rubric
// step whose pair groups all tie builds pairs from new prompts until it has
// groups with a signal, and trains on them; without it, it does not.
func TestRubricPhaseRefillsTiedGroups(t *testing.T) {
	for _, active := range []bool{true, false} {
		l, tr := testLoop(t, 8, map[string]any{"rubric_active_sampling": active, "active_sampling_rounds": 2, "alpha": 0.5},
			refillDouble(2), judgeByAnswer(scoreByAnswer))
		m, err := l.rubricStep(context.Background(), 1)
		if err != nil {
			t.Fatal(err)
		}
		ps := readStep(t, l, schemas.Pairs, 1, schemas.PhaseRubric)
		if !active {
			if m.RefillRounds != 0 || m.GroupsTrained != 0 || len(tr.batches) != 0 || len(ps) != 2 {
				t.Errorf("without rubric_active_sampling: %d refill rounds, %d groups trained, %d updates, %d pairs", m.RefillRounds, m.GroupsTrained, len(tr.batches), len(ps))
			}
			continue
		}
		if m.RefillRounds != 1 || m.RefillPrompts != 2 || m.GroupsTrained != 2 || len(ps) != 4 {
			t.Errorf("rubric_active_sampling: %d refill rounds of %d prompts, %d groups trained, %d pairs; want 1 of 2, 2, 4", m.RefillRounds, m.RefillPrompts, m.GroupsTrained, len(ps))
		}
		if len(tr.batches) != 1 || len(tr.batches[0]) != 4 {
			t.Errorf("rubric_active_sampling: updates %v, want one of the 2 refill groups' 4 rubrics", tr.batches)
		}
		seen := map[string]bool{}
		for _, p := range ps {
			if seen[p.PairID] {
				t.Errorf("pair id %s repeats", p.PairID)
			}
			seen[p.PairID] = true
		}
	}
}

// TestReplayFillEveryGroup: replay_fill every_group puts an answer of
// every policy group whose rewards were computed in the buffer, refills and
// tied groups included; step_batch only the step's own prompts'.
func TestReplayFillEveryGroup(t *testing.T) {
	for fill, want := range map[string]int{"every_group": 4, "step_batch": 2} {
		l, _ := testLoop(t, 8, map[string]any{"active_sampling": true, "active_sampling_rounds": 2, "replay_fill": fill},
			refillDouble(2), judgeByAnswer(scoreByAnswer))
		m, err := l.policyStep(context.Background(), 0)
		if err != nil {
			t.Fatal(err)
		}
		if m.RefillRounds != 1 {
			t.Fatalf("replay_fill %s: %d refill rounds, want 1", fill, m.RefillRounds)
		}
		if got := l.buf.Len(); got != want {
			t.Errorf("replay_fill %s: %d buffer entries, want %d", fill, got, want)
		}
		for _, e := range l.buf.Entries() {
			if e.Step != 0 {
				t.Errorf("replay_fill %s: entry stamped step %d, want 0", fill, e.Step)
			}
		}
	}
}

// TestUnusableRubricJudgedOrZero: a rubric with no criterion (an empty
// text, as a cut thinking leaves) gets no judge call and 0 under
// unusable_rubric zero; under judge, the judge is asked under its (empty)
// text and it is paid from the margin like any rubric.
func TestUnusableRubricJudgedOrZero(t *testing.T) {
	for _, rule := range []string{"zero", "judge"} {
		pol := &genDouble{model: "policy-double", reply: func(r backend.GenerateRequest, j int) (string, backend.FinishReason) {
			if isRubricRequest(r) {
				if j == 0 {
					return "<think>still thinking when cut", backend.FinishLength
				}
				return validRubric, backend.FinishStop
			}
			if strings.HasSuffix(r.ID, "/chosen") {
				return "good answer", backend.FinishStop
			}
			return "poor answer", backend.FinishStop
		}}
		var shown []string
		jd := judgeByAnswer(func(a, rubric string) string {
			shown = append(shown, rubric)
			return scoreByAnswer(a, rubric)
		})
		l, _ := testLoop(t, 4, map[string]any{"unusable_rubric": rule, "weight_temporal": 0.0}, pol, jd)
		if _, err := l.rubricStep(context.Background(), 1); err != nil {
			t.Fatal(err)
		}
		var empty, scored int
		for _, j := range readStep(t, l, schemas.Judgments, 1, schemas.PhaseRubric) {
			if !strings.HasSuffix(j.RubricID, "/0") {
				continue
			}
			if j.Score != nil {
				scored++
			} else if j.ScoreMissingReason != nil && strings.HasPrefix(*j.ScoreMissingReason, "empty_rubric") {
				empty++
			}
		}
		emptyShown := 0
		for _, s := range shown {
			if s == "" {
				emptyShown++
			}
		}
		switch rule {
		case "zero":
			if empty != 4 || scored != 0 || emptyShown != 0 {
				t.Errorf("zero: %d empty_rubric judgments, %d scored, %d calls under an empty rubric; want 4, 0, 0", empty, scored, emptyShown)
			}
		case "judge":
			if scored != 4 || emptyShown != 4 {
				t.Errorf("judge: %d scored, %d calls under an empty rubric; want 4 and 4", scored, emptyShown)
			}
		}
	}
}

// TestPromptOrderReplay: under prompt_order replay the rubric phase's first
// step takes the policy's first prompts; under fresh, new ones.
func TestPromptOrderReplay(t *testing.T) {
	ids := func(ps []schemas.Prompt) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.PromptID)
		}
		return out
	}
	for order, same := range map[string]bool{"replay": true, "fresh": false} {
		l, _ := testLoop(t, 16, map[string]any{"prompt_order": order, "k": 2, "prompts_per_step": 3}, refillDouble(3), judgeByAnswer(scoreByAnswer))
		p0, r0 := ids(l.batch(0)), ids(l.batch(2))
		if (strings.Join(p0, ",") == strings.Join(r0, ",")) != same {
			t.Errorf("prompt_order %s: policy step 0 takes %v, rubric step 2 takes %v", order, p0, r0)
		}
	}
}

// TestFrozenInitialInfersTheQuestions: with an inferrer (backtranslate_source
// frozen_initial) every back-translated question comes from it, as a system
// and a user message at infer_temperature, and none from the trained policy.
func TestFrozenInitialInfersTheQuestions(t *testing.T) {
	pol := refillDouble(2)
	frozen := &genDouble{model: "initial-double", reply: func(backend.GenerateRequest, int) (string, backend.FinishReason) {
		return "What was asked?", backend.FinishStop
	}}
	l, _ := testLoop(t, 4, map[string]any{"backtranslate_source": "frozen_initial", "weight_temporal": 0.0, "weight_rubric_guided": 0.0}, pol, judgeByAnswer(scoreByAnswer))
	l.inferrer = roles.NewBackend("double", "initial-double", frozen, nil, nil, nil)
	if _, err := l.rubricStep(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	if len(frozen.reqs) != 2 {
		t.Fatalf("the frozen model got %d requests, want 2 (one per back-translated pair)", len(frozen.reqs))
	}
	for _, r := range frozen.reqs {
		if !strings.HasSuffix(r.ID, "/inferred_question") || len(r.Messages) != 2 || r.Messages[0].Role != "system" || r.Sampling.Temperature != 0.3 {
			t.Errorf("frozen request %s: %d messages, temperature %v", r.ID, len(r.Messages), r.Sampling.Temperature)
		}
	}
	for _, r := range pol.reqs {
		if strings.HasSuffix(r.ID, "/inferred_question") {
			t.Errorf("the trained policy inferred %s", r.ID)
		}
	}
	for _, r := range readStep(t, l, schemas.Rollouts, 1, schemas.PhaseRubric, rolePolicy) {
		if strings.HasSuffix(r.RolloutID, "/inferred_question") && (r.Model != "initial-double" || r.Checkpoint != "initial") {
			t.Errorf("inferred question row %s: model %s checkpoint %s", r.RolloutID, r.Model, r.Checkpoint)
		}
	}
}
