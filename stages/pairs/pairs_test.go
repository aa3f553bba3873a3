package pairs

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/model/backend"
	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/stages/prompts"
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

func TestPickWindowAndWidening(t *testing.T) {
	b, _ := NewBuffer(100)
	for _, s := range []int64{10, 50, 95} {
		b.Add(schemas.ReplayEntry{Step: s, Answer: fmt.Sprint(s)})
	}
	rng := rand.New(rand.NewPCG(1, 1))
	tests := []struct {
		step     int64
		w        Window
		want     []string // acceptable answers
		wantUsed Window
		ok       bool
	}{
		{step: 100, w: Window{20, 100}, want: []string{"10", "50"}, wantUsed: Window{20, 100}, ok: true},
		{step: 60, w: Window{20, 100}, want: []string{"10"}, wantUsed: Window{20, 100}, ok: true},
		// ages at step 100: 90, 50, 5 — window [60, 80] is empty, widens by 10 to [50, 90]
		{step: 100, w: Window{60, 80}, want: []string{"10", "50"}, wantUsed: Window{50, 90}, ok: true},
		// ages at step 96: 86, 46, 1 — [20, 30] and [10, 40] are empty, [1, 50] holds two
		{step: 96, w: Window{20, 30}, want: []string{"50", "95"}, wantUsed: Window{1, 50}, ok: true},
		{step: 10, w: Window{20, 100}, ok: false},
	}
	for _, tc := range tests {
		for k := 0; k < 20; k++ {
			e, used, ok := b.Pick(tc.step, tc.w, 10, rng)
			if ok != tc.ok {
				t.Fatalf("Pick(step %d, %v): ok = %v, want %v", tc.step, tc.w, ok, tc.ok)
			}
			if !ok {
				continue
			}
			found := false
			for _, a := range tc.want {
				found = found || a == e.Answer
			}
			if !found {
				t.Errorf("Pick(step %d, %v) = step %s, want one of %v", tc.step, tc.w, e.Answer, tc.want)
			}
			if age := tc.step - e.Step; age < used.MinAge || age > used.MaxAge {
				t.Errorf("picked age %d outside the window used %v", age, used)
			}
			if used != tc.wantUsed {
				t.Errorf("window used %v, want %v (the first widening that finds an entry)", used, tc.wantUsed)
			}
		}
	}
}

func TestBufferSaveLoadRoundTrip(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	b, _ := NewBuffer(10)
	for s := int64(0); s < 4; s++ {
		b.Add(schemas.ReplayEntry{Step: s, PromptID: fmt.Sprintf("p%d", s), Question: "q", Answer: "答え " + fmt.Sprint(s), RolloutID: "r"})
	}
	path := filepath.Join(t.TempDir(), "replay.parquet")
	if err := b.Save(path, mem); err != nil {
		t.Fatal(err)
	}
	got, err := LoadBuffer(context.Background(), path, 10, mem)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(b.Entries(), got.Entries()); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
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
		if strings.Contains(last, "Infer the single question") {
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
	set, err := prompts.Default()
	if err != nil {
		t.Fatal(err)
	}
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
	}
	for i, c := range bad {
		if err := c.Validate(); err == nil {
			t.Errorf("config %d: want error", i)
		}
	}
}
