package pairs

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/method/prompts"
	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/serving/backend"
)

func TestBufferEvictsOldest(t *testing.T) {
	b, err := NewBuffer(3)
	if err != nil {
		t.Fatal(err)
	}
	for s := int64(1); s <= 5; s++ {
		b.Add(schemas.ReplayEntry{Step: s})
	}
	var got []int64
	for _, e := range b.Entries() {
		got = append(got, e.Step)
	}
	if diff := cmp.Diff([]int64{3, 4, 5}, got); diff != "" {
		t.Errorf("entries (-want +got):\n%s", diff)
	}
	if _, err := NewBuffer(0); err == nil {
		t.Error("NewBuffer(0): want error")
	}
}

// TestPickWiden: evolm's ±widen fallback, ages counted in global steps.
func TestPickWiden(t *testing.T) {
	b, _ := NewBuffer(100)
	for _, s := range []int64{10, 50, 95} {
		b.Add(schemas.ReplayEntry{Step: s, Answer: fmt.Sprint(s)})
	}
	rng := rand.New(rand.NewPCG(1, 1))
	tests := []struct {
		step      int64
		w         Window
		want      []string // acceptable answers
		wantUsed  Window
		wantStage string
		ok        bool
	}{
		{step: 100, w: Window{20, 100}, want: []string{"10", "50"}, wantUsed: Window{20, 100}, wantStage: schemas.TemporalWindow, ok: true},
		{step: 60, w: Window{20, 100}, want: []string{"10"}, wantUsed: Window{20, 100}, wantStage: schemas.TemporalWindow, ok: true},
		// ages at step 100: 90, 50, 5 — window [60, 80] is empty, widens by 10 to [50, 90]
		{step: 100, w: Window{60, 80}, want: []string{"10", "50"}, wantUsed: Window{50, 90}, wantStage: schemas.TemporalWidened, ok: true},
		// ages at step 96: 86, 46, 1 — [20, 30] and [10, 40] are empty, [1, 50] holds two
		{step: 96, w: Window{20, 30}, want: []string{"50", "95"}, wantUsed: Window{1, 50}, wantStage: schemas.TemporalWidened, ok: true},
		{step: 10, w: Window{20, 100}, ok: false},
	}
	for _, tc := range tests {
		age := func(e schemas.ReplayEntry) int64 { return tc.step - e.Step }
		for k := 0; k < 20; k++ {
			got, ok := b.Pick(age, tc.w, FallbackWiden, 10, rng)
			if ok != tc.ok {
				t.Fatalf("Pick(step %d, %v): ok = %v, want %v", tc.step, tc.w, ok, tc.ok)
			}
			if !ok {
				continue
			}
			found := false
			for _, a := range tc.want {
				found = found || a == got.Entry.Answer
			}
			if !found {
				t.Errorf("Pick(step %d, %v) = step %s, want one of %v", tc.step, tc.w, got.Entry.Answer, tc.want)
			}
			if got.Age != tc.step-got.Entry.Step || got.Age < got.Window.MinAge || got.Age > got.Window.MaxAge {
				t.Errorf("picked age %d (entry step %d) outside the window used %v", got.Age, got.Entry.Step, got.Window)
			}
			if got.Window != tc.wantUsed || got.Stage != tc.wantStage {
				t.Errorf("window used %v stage %s, want %v %s (the first widening that finds an entry)", got.Window, got.Stage, tc.wantUsed, tc.wantStage)
			}
		}
	}
}

// TestPickOfficialFallbackStages: each of the official empty-window stages,
// on buffers whose entries have the given ages (window [20, 100]).
func TestPickOfficialFallbackStages(t *testing.T) {
	const now = 1000
	tests := []struct {
		name      string
		ages      []int64
		w         Window
		wantStage string
		wantAges  []int64 // ages the draw may return
	}{
		{"in window", []int64{150, 30, 5}, Window{20, 100}, schemas.TemporalWindow, []int64{30}},
		// everything is older than max_age: drop the max
		{"1 relaxed max age", []int64{200, 150}, Window{20, 100}, schemas.TemporalRelaxedMaxAge, []int64{200, 150}},
		// one too old, the rest too young: stage 1 needs the youngest ≥ min_age, so stage 2 (age ≥ 10) serves
		{"2 relaxed min age", []int64{150, 12, 5}, Window{20, 100}, schemas.TemporalRelaxedMinAge, []int64{150, 12}},
		// all younger than min_age/2: the older half of the buffer by step
		{"3 oldest half", []int64{4, 3, 2, 1}, Window{20, 100}, schemas.TemporalOldestHalf, []int64{4, 3}},
		{"3 oldest half of one", []int64{3}, Window{20, 100}, schemas.TemporalOldestHalf, []int64{3}},
		// the youngest entry may be in the older half when ages tie by step
		{"3 oldest half with age 0", []int64{5, 0, 0, 0}, Window{20, 100}, schemas.TemporalOldestHalf, []int64{5, 0}},
		// every entry is from the newest policy step (age 0): anything
		{"4 any experience", []int64{0, 0}, Window{20, 100}, schemas.TemporalAnyExperience, []int64{0}},
		// min_age 0 (the official default) takes age-0 entries in the window
		{"min age 0", []int64{0, 300}, Window{0, 100}, schemas.TemporalWindow, []int64{0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, _ := NewBuffer(100)
			for _, a := range tc.ages {
				b.Add(schemas.ReplayEntry{Step: now - a, Answer: fmt.Sprint(a)})
			}
			age := func(e schemas.ReplayEntry) int64 { return now - e.Step }
			rng := rand.New(rand.NewPCG(3, 4))
			seen := map[int64]bool{}
			for k := 0; k < 50; k++ {
				got, ok := b.Pick(age, tc.w, FallbackOfficial, 0, rng)
				if !ok {
					t.Fatal("Pick: ok = false on a non-empty buffer")
				}
				if got.Stage != tc.wantStage {
					t.Fatalf("stage %q, want %q", got.Stage, tc.wantStage)
				}
				allowed := false
				for _, a := range tc.wantAges {
					allowed = allowed || a == got.Age
				}
				if !allowed || got.Age != now-got.Entry.Step {
					t.Fatalf("picked age %d (entry step %d), want one of %v", got.Age, got.Entry.Step, tc.wantAges)
				}
				seen[got.Age] = true
			}
			if len(seen) != len(tc.wantAges) {
				t.Errorf("50 draws saw ages %v, want every one of %v (uniform choice)", seen, tc.wantAges)
			}
		})
	}
	empty, _ := NewBuffer(4)
	if _, ok := empty.Pick(func(schemas.ReplayEntry) int64 { return 0 }, Window{20, 100}, FallbackOfficial, 0, rand.New(rand.NewPCG(1, 1))); ok {
		t.Error("Pick on an empty buffer: ok = true")
	}
}

// scriptedGenerator is a test double: it answers every request with text
// derived from its last message, so provenance can be checked.
type scriptedGenerator struct{ calls int }

func (g *scriptedGenerator) Generate(_ context.Context, reqs []backend.GenerateRequest) ([]backend.GenerateResponse, error) {
	g.calls++
	out := make([]backend.GenerateResponse, len(reqs))
	for i, r := range reqs {
		last := r.Messages[len(r.Messages)-1].Content
		text := "answer to: " + last
		if strings.HasSuffix(r.ID, "/inferred_question") {
			text = "<think>hmm</think>inferred question for " + r.ID
		}
		if strings.HasSuffix(r.ID, "/rubric") {
			text = `{"criteria":[{"criterion":"Gives the number 4","weight":0.6},{"criterion":"Is brief","weight":0.4}]}`
		}
		system := ""
		if r.Messages[0].Role == "system" {
			system = r.Messages[0].Content
		}
		if strings.Contains(system, "Gives the number 4") {
			text = "guided " + text
		}
		out[i] = backend.GenerateResponse{ID: r.ID, Model: "double", PromptTokens: 3, Completions: []backend.Completion{{Text: text, Tokens: 2, FinishReason: backend.FinishStop, LogProbs: []backend.TokenLogProb{{LogProb: -1}, {LogProb: -2}}}}}
	}
	return out, nil
}

func TestBuildAllStrategies(t *testing.T) {
	set := defaultPrompts(t)
	buf, _ := NewBuffer(2048)
	buf.Add(schemas.ReplayEntry{Step: 3, PromptID: "old", Question: "What is 2+2?", Answer: "five", RolloutID: "r-old"})
	g := &scriptedGenerator{}
	cfg := DefaultConfig(16)
	cfg.Seed = 42
	b := &Builder{Policy: g, RubricGen: g, Prompts: set, Buffer: buf, Cfg: cfg}
	var items []Item
	for i := 0; i < 30; i++ {
		items = append(items, Item{PromptID: fmt.Sprintf("p%02d", i), Question: fmt.Sprintf("Question %d?", i)})
	}
	res, err := b.Build(context.Background(), 40, items)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, p := range res.Pairs {
		count[p.Strategy]++
		if p.Chosen == "" || p.Rejected == "" || p.ChosenRolloutID == "" || p.RejectedRolloutID == "" {
			t.Errorf("pair %s (%s) has empty provenance: %+v", p.PairID, p.Strategy, p)
		}
		switch p.Strategy {
		case schemas.StrategyTemporal:
			if p.Rejected != "five" || p.RejectedStep != 3 || p.RejectedRolloutID != "r-old" || p.Question != "What is 2+2?" {
				t.Errorf("temporal pair %s: %+v", p.PairID, p)
			}
			// one entry, from the newest policy step: age 0, served by the last official stage
			if p.TemporalAge == nil || *p.TemporalAge != 0 || p.TemporalFallback == nil || *p.TemporalFallback != schemas.TemporalAnyExperience {
				t.Errorf("temporal pair %s: age %v fallback %v, want 0 %s", p.PairID, p.TemporalAge, p.TemporalFallback, schemas.TemporalAnyExperience)
			}
		case schemas.StrategyBacktranslate:
			if p.InferredQuestion == nil || !strings.HasPrefix(*p.InferredQuestion, "inferred question") {
				t.Errorf("backtranslate pair %s: inferred question %v (thinking must be stripped)", p.PairID, p.InferredQuestion)
			}
			if !strings.Contains(p.Rejected, "inferred question") {
				t.Errorf("backtranslate a− should answer the inferred question: %q", p.Rejected)
			}
		case schemas.StrategyRubricGuided:
			if !strings.HasPrefix(p.Chosen, "guided ") || strings.HasPrefix(p.Rejected, "guided ") {
				t.Errorf("rubric-guided pair: a+ must see the rubric, a− must not: %+v", p)
			}
		}
	}
	for _, s := range schemas.Strategies {
		if count[s] == 0 {
			t.Errorf("strategy %s never drawn in 30 items: %v", s, count)
		}
	}
	// a rerun draws the same strategies and seeds
	res2, err := b.Build(context.Background(), 40, items)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(res.Pairs, res2.Pairs); diff != "" {
		t.Errorf("rerun differs (-first +second):\n%s", diff)
	}
}

// TestTemporalAgeInPolicySteps: with phases of K = 3 steps (policy 0–2,
// rubric 3–5, policy 6–8, rubric 9–11), an answer's age is counted from the
// newest policy step in policy steps, so it stays the same through a rubric
// phase; the global clock counts rubric steps too.
func TestTemporalAgeInPolicySteps(t *testing.T) {
	set := defaultPrompts(t)
	const k = 3
	policyIndex := func(s int64) int64 { return (s/(2*k))*k + s%(2*k) }
	buf, _ := NewBuffer(64)
	for _, s := range []int64{0, 1, 2, 6, 7, 8} {
		buf.Add(schemas.ReplayEntry{Step: s, PromptID: fmt.Sprint(s), Question: "q", Answer: fmt.Sprint(s), RolloutID: fmt.Sprint("r", s)})
	}
	items := []Item{{PromptID: "a", Question: "q"}, {PromptID: "b", Question: "q"}}
	build := func(clock AgeClock, step int64) []schemas.Pair {
		t.Helper()
		cfg := DefaultConfig(8)
		cfg.Weights = map[string]float64{schemas.StrategyTemporal: 1}
		cfg.Window = Window{MinAge: 2, MaxAge: 2}
		cfg.Age, cfg.PolicyIndex = clock, policyIndex
		g := &scriptedGenerator{}
		b := &Builder{Policy: g, RubricGen: g, Prompts: set, Buffer: buf, Cfg: cfg}
		res, err := b.Build(context.Background(), step, items)
		if err != nil {
			t.Fatal(err)
		}
		return res.Pairs
	}
	// policy indices: steps 0 1 2 6 7 8 → 0 1 2 3 4 5; the newest is 5, so
	// age 2 is step 6 at every rubric step of the phase
	for _, step := range []int64{9, 10, 11} {
		for _, p := range build(AgePolicySteps, step) {
			if p.RejectedStep != 6 || *p.TemporalAge != 2 || *p.TemporalFallback != schemas.TemporalWindow {
				t.Errorf("policy clock, step %d: a− from step %d age %d (%s), want step 6 age 2 (window)", step, p.RejectedStep, *p.TemporalAge, *p.TemporalFallback)
			}
		}
	}
	// the global clock ages the buffer during the rubric phase
	for step, want := range map[int64]int64{9: 7, 10: 8} {
		for _, p := range build(AgeGlobalSteps, step) {
			if p.RejectedStep != want || *p.TemporalAge != 2 {
				t.Errorf("global clock, step %d: a− from step %d age %d, want step %d age 2", step, p.RejectedStep, *p.TemporalAge, want)
			}
		}
	}
}

// TestBuildFromContinuesAStep: pairs built later in a step (active
// sampling's refills) continue its ids and strategy draws.
func TestBuildFromContinuesAStep(t *testing.T) {
	set := defaultPrompts(t)
	buf, _ := NewBuffer(16)
	buf.Add(schemas.ReplayEntry{Step: 3, PromptID: "old", Question: "q", Answer: "a", RolloutID: "r"})
	cfg := DefaultConfig(8)
	cfg.Seed = 5
	g := &scriptedGenerator{}
	b := &Builder{Policy: g, RubricGen: g, Prompts: set, Buffer: buf, Cfg: cfg}
	var items []Item
	for i := 0; i < 10; i++ {
		items = append(items, Item{PromptID: fmt.Sprint(i), Question: fmt.Sprintf("Q%d?", i)})
	}
	whole, err := b.Build(context.Background(), 60, items)
	if err != nil {
		t.Fatal(err)
	}
	head, err := b.Build(context.Background(), 60, items[:6])
	if err != nil {
		t.Fatal(err)
	}
	tail, err := b.BuildFrom(context.Background(), 60, 6, items[6:])
	if err != nil {
		t.Fatal(err)
	}
	parts := append(head.Pairs, tail.Pairs...)
	ids := map[string]bool{}
	for _, r := range append(head.Rollouts, tail.Rollouts...) {
		if ids[r.RolloutID] {
			t.Errorf("rollout id %s repeated across the two builds", r.RolloutID)
		}
		ids[r.RolloutID] = true
	}
	for i := range whole.Pairs {
		if whole.Pairs[i].PairID != parts[i].PairID || whole.Pairs[i].Strategy != parts[i].Strategy {
			t.Errorf("item %d: built in two parts as %s (%s), in one as %s (%s)", i,
				parts[i].PairID, parts[i].Strategy, whole.Pairs[i].PairID, whole.Pairs[i].Strategy)
		}
	}
}

func TestTemporalFallsBackOnEmptyBuffer(t *testing.T) {
	set, _ := prompts.Default()
	buf, _ := NewBuffer(16)
	g := &scriptedGenerator{}
	cfg := DefaultConfig(8)
	b := &Builder{Policy: g, RubricGen: g, Prompts: set, Buffer: buf, Cfg: cfg}
	items := make([]Item, 12)
	for i := range items {
		items[i] = Item{PromptID: fmt.Sprint(i), Question: "q"}
	}
	res, err := b.Build(context.Background(), 0, items)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range res.Pairs {
		if p.Strategy == schemas.StrategyTemporal {
			t.Errorf("temporal pair built from an empty buffer: %+v", p)
		}
	}
	if res.Fallbacks == 0 {
		t.Error("expected some temporal draws to fall back")
	}
}

func TestConfigValidate(t *testing.T) {
	bad := []Config{
		{Weights: map[string]float64{"random": 1}, Window: Window{20, 100}},
		{Weights: map[string]float64{schemas.StrategyTemporal: -1, schemas.StrategyBacktranslate: 2}, Window: Window{20, 100}},
		{Weights: map[string]float64{}, Window: Window{20, 100}},
		{Weights: map[string]float64{schemas.StrategyTemporal: 1}, Window: Window{50, 20}},
		{Weights: map[string]float64{schemas.StrategyTemporal: 1}, Window: Window{20, 100}, Age: "wall_clock", Fallback: FallbackOfficial},
		{Weights: map[string]float64{schemas.StrategyTemporal: 1}, Window: Window{20, 100}, Age: AgePolicySteps, Fallback: "nearest"},
	}
	for i, c := range bad {
		if err := c.Validate(); err == nil {
			t.Errorf("config %d: want error", i)
		}
	}
}

// defaultPrompts is the built-in prompt set.
func defaultPrompts(t *testing.T) *prompts.Set {
	t.Helper()
	set, err := prompts.Default()
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// inferrerDouble is a test double of a frozen copy of the initial model: it
// infers questions only, and records the requests it got.
type inferrerDouble struct{ reqs []backend.GenerateRequest }

func (g *inferrerDouble) Generate(_ context.Context, reqs []backend.GenerateRequest) ([]backend.GenerateResponse, error) {
	out := make([]backend.GenerateResponse, len(reqs))
	for i, r := range reqs {
		g.reqs = append(g.reqs, r)
		out[i] = backend.GenerateResponse{ID: r.ID, Model: "frozen", Completions: []backend.Completion{{Text: "frozen question for " + r.ID, Tokens: 1, FinishReason: backend.FinishStop}}}
	}
	return out, nil
}

// TestInferrerInfersTheQuestions: with an Inferrer (back-translation source
// frozen_initial), every inferred question comes from it, at the inference
// temperature, as a system and a user message; the rows record its model and
// the initial checkpoint; the policy answers the rest.
func TestInferrerInfersTheQuestions(t *testing.T) {
	set := defaultPrompts(t)
	buf, _ := NewBuffer(16)
	pol, inf := &scriptedGenerator{}, &inferrerDouble{}
	cfg := DefaultConfig(16)
	cfg.Weights = map[string]float64{schemas.StrategyBacktranslate: 1}
	cfg.Checkpoint, cfg.InferCheckpoint = "step-000040", "initial"
	b := &Builder{Policy: pol, RubricGen: pol, Inferrer: inf, Prompts: set, Buffer: buf, Cfg: cfg}
	items := []Item{{PromptID: "p0", Question: "Q0?"}, {PromptID: "p1", Question: "Q1?"}}
	res, err := b.Build(context.Background(), 40, items)
	if err != nil {
		t.Fatal(err)
	}
	if len(inf.reqs) != len(items) {
		t.Fatalf("the inferrer got %d requests, want %d", len(inf.reqs), len(items))
	}
	for _, r := range inf.reqs {
		if !strings.HasSuffix(r.ID, "/inferred_question") || r.Sampling.Temperature != 0.3 || len(r.Messages) != 2 || r.Messages[0].Role != "system" {
			t.Errorf("inferrer request %s: temperature %v, messages %v", r.ID, r.Sampling.Temperature, r.Messages)
		}
	}
	for _, p := range res.Pairs {
		if p.InferredQuestion == nil || !strings.HasPrefix(*p.InferredQuestion, "frozen question") || !strings.Contains(p.Rejected, "frozen question") {
			t.Errorf("pair %s: inferred %v, a− %q", p.PairID, p.InferredQuestion, p.Rejected)
		}
	}
	for _, r := range res.Rollouts {
		frozen := strings.HasSuffix(r.RolloutID, "/inferred_question")
		if frozen != (r.Model == "frozen") || frozen != (r.Checkpoint == "initial") {
			t.Errorf("rollout %s: model %s checkpoint %s", r.RolloutID, r.Model, r.Checkpoint)
		}
	}
}

// TestAgeNewestGlobal: the official clock counts global steps from the
// newest buffered answer: ages do not grow during a rubric phase, and a
// rubric phase between two answers counts.
func TestAgeNewestGlobal(t *testing.T) {
	buf, _ := NewBuffer(16)
	// K = 2: policy steps 0, 1, 4, 5; entries from steps 1 and 4.
	buf.Add(schemas.ReplayEntry{Step: 1}, schemas.ReplayEntry{Step: 4})
	pol := func(s int64) int64 { return s/4*2 + min(s%4, 2) }
	for _, tc := range []struct {
		clock AgeClock
		step  int64
		want  []int64 // ages of the entries of steps 1 and 4
	}{
		{AgeNewestGlobal, 6, []int64{3, 0}},
		{AgeNewestGlobal, 7, []int64{3, 0}},
		{AgePolicySteps, 7, []int64{1, 0}},
		{AgeGlobalSteps, 7, []int64{6, 3}},
	} {
		cfg := DefaultConfig(16)
		cfg.Age, cfg.PolicyIndex = tc.clock, pol
		age := cfg.ageAt(tc.step, buf)
		got := []int64{age(buf.Entries()[0]), age(buf.Entries()[1])}
		if d := cmp.Diff(tc.want, got); d != "" {
			t.Errorf("%s at step %d (-want +got):\n%s", tc.clock, tc.step, d)
		}
	}
	if _, err := ParseAgeClock("newest_global"); err != nil {
		t.Error(err)
	}
}
