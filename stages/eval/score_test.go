package eval

import (
	"context"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/datasets"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
)

// scorerDouble is a test double of Scorer: it scores a completion by looking
// its text up in a table (NaN when absent), or, when positional is set, by
// position only (the first completion shown scores highest): a judge with
// pure position bias.
type scorerDouble struct {
	byText     map[string]float64
	positional bool
	calls      int
}

func (s *scorerDouble) Score(_ context.Context, reqs []ScoreRequest) ([][]float64, error) {
	s.calls++
	out := make([][]float64, len(reqs))
	for i, r := range reqs {
		for k, c := range r.Completions {
			v, ok := s.byText[c]
			if s.positional {
				v, ok = float64(len(r.Completions)-k), true
			}
			if !ok {
				v = math.NaN()
			}
			out[i] = append(out[i], v)
		}
	}
	return out, nil
}

func TestEvalJudgeBenchOrders(t *testing.T) {
	items := []datasets.JudgeBenchItem{
		{PairID: "1", Source: "mmlu-pro-law", Question: "q", ResponseA: "good", ResponseB: "bad", Label: "A>B"},
		{PairID: "2", Source: "livebench-math", Question: "q", ResponseA: "bad", ResponseB: "good", Label: "B>A"},
		{PairID: "3", Source: "livebench-math", Question: "q", ResponseA: "same", ResponseB: "same2", Label: "A>B"},
	}
	content := &scorerDouble{byText: map[string]float64{"good": 0.9, "bad": 0.1, "same": 0.5, "same2": 0.5}}
	rep, err := EvalJudgeBench(context.Background(), content, items, 1, Bootstrap{Samples: 20})
	if err != nil {
		t.Fatal(err)
	}
	if content.calls != 6 {
		t.Errorf("%d scorer calls with batch 1, want 6 (two orders per pair)", content.calls)
	}
	// Pairs 1 and 2 right in both orders; pair 3 ties in both: wrong.
	if got := rep.Scores[len(rep.Scores)-1]; got.Subset != Overall || got.Score != 2.0/3 {
		t.Errorf("overall %+v, want 2/3", got)
	}
	if it := rep.Items[1]; it.Original != "B>A" || it.Swapped != "A>B" || !cmp.Equal(it.Scores, []float64{0.1, 0.9, 0.9, 0.1}) {
		t.Errorf("pair 2: %+v", it)
	}
	// A judge that always prefers the first response shown is inconsistent
	// on every pair: accuracy 0.
	biased := &scorerDouble{positional: true}
	rep, err = EvalJudgeBench(context.Background(), biased, items, 64, Bootstrap{Samples: 20})
	if err != nil {
		t.Fatal(err)
	}
	if got := rep.Scores[len(rep.Scores)-1]; got.Score != 0 {
		t.Errorf("position-biased judge: overall %v, want 0", got.Score)
	}
}

func TestEvalRewardBench2AndPairwise(t *testing.T) {
	items := []datasets.RewardBench2Item{
		{ID: "0", Subset: "Math", Prompt: "p", Chosen: []string{"right"}, Rejected: []string{"w1", "w2", "w3"}},
		{ID: "1", Subset: "Math", Prompt: "p", Chosen: []string{"tie"}, Rejected: []string{"tie2", "w1", "w2"}},
		{ID: "2", Subset: "Focus", Prompt: "p", Chosen: []string{"missing"}, Rejected: []string{"w1", "w2", "w3"}},
	}
	s := &scorerDouble{byText: map[string]float64{"right": 1, "tie": 0.5, "tie2": 0.5, "w1": 0.1, "w2": 0.2, "w3": 0.3}}
	rep, err := EvalRewardBench2(context.Background(), s, items, 2, Bootstrap{Samples: 10})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"Math": (1 + 0.5) / 2, "Focus": 0}
	for _, sc := range rep.Scores {
		if sc.Score != want[sc.Subset] {
			t.Errorf("%s: %v, want %v", sc.Subset, sc.Score, want[sc.Subset])
		}
	}
	pw, err := EvalPairwise(context.Background(), s, []datasets.PairwiseItem{{ID: "a", Subset: "all", Prompt: "p", Chosen: "right", Rejected: "w1"}}, 8, Bootstrap{Samples: 10})
	if err != nil {
		t.Fatal(err)
	}
	if pw.Scores[0].Score != 1 {
		t.Errorf("pairwise %+v", pw.Scores)
	}
}

func TestWriteReports(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	cfg, err := pipeline.LoadConfig(pipeline.LoadOptions{Env: []string{"EVOLM_RUN_DIR=" + dir, "EVOLM_PIPELINE_PROGRESS=off",
		"EVOLM_STAGES_EVAL_INPUT=unused.jsonl"}})
	if err != nil {
		t.Fatal(err)
	}
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	env, err := pipeline.NewEnv(Name, cfg, pipeline.RunOptions{Mem: mem, Stderr: &strings.Builder{}})
	if err != nil {
		t.Fatal(err)
	}
	var items []RB2Scored
	for _, r := range tiesTable {
		items = append(items, RB2Scored{ID: r.ID, Subset: "Ties", NumCorrect: r.NumCorrect, Scores: r.Scores})
	}
	rep, err := ScoreRewardBench2(items, Bootstrap{Samples: 50, Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	jrep, err := ScoreJudgeBench([]JBScored{{PairID: "p", Source: "livecodebench", Label: "A>B", Original: "A>B", Swapped: "B>A"}}, Bootstrap{Samples: 5})
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteReports(context.Background(), env, nil, rep, jrep); err != nil {
		t.Fatal(err)
	}
	var subsets []string
	var ties float64
	for _, part := range []string{"part-00000.parquet", "part-00001.parquet"} {
		for rec, err := range pipeline.ReadShard(context.Background(), filepath.Join(dir, ResultsTable, part), pipeline.ReadOptions{Mem: mem, Schema: ResultsSchema}) {
			if err != nil {
				t.Fatal(err)
			}
			rows, err := schemas.EvalResults.Read(rec)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rows {
				subsets = append(subsets, r.Subset)
				if r.Subset == "Ties" {
					ties = *r.Score
				}
			}
		}
	}
	if d := cmp.Diff([]string{"Ties", "coding", "overall"}, subsets); d != "" {
		t.Errorf("subsets (-want +got):\n%s", d)
	}
	if math.Abs(ties-tiesWant().Score) > 1e-12 {
		t.Errorf("Ties %v, want %v", ties, tiesWant().Score)
	}
	var written []schemas.EvalItem
	for _, part := range []string{"part-00000.parquet", "part-00001.parquet"} {
		for rec, err := range pipeline.ReadShard(context.Background(), filepath.Join(dir, ItemsTable, part), pipeline.ReadOptions{Mem: mem, Schema: ItemsSchema}) {
			if err != nil {
				t.Fatal(err)
			}
			rows, err := schemas.EvalItems.Read(rec)
			if err != nil {
				t.Fatal(err)
			}
			written = append(written, rows...)
		}
	}
	if len(written) != len(tiesTable)+1 {
		t.Fatalf("eval_items rows %d, want %d", len(written), len(tiesTable)+1)
	}
	for i, r := range tiesTable {
		it := written[i]
		if it.ItemID != r.ID || it.Subset != "Ties" || int(it.NumCorrect) != r.NumCorrect || it.Result != nil || it.DecisionOriginal != nil ||
			!cmp.Equal(it.Scores, r.Scores) {
			t.Errorf("eval_items row %d: %+v, want Ties item %+v with no result and no decisions", i, it, r)
		}
	}
	jb := written[len(tiesTable)]
	if jb.Benchmark != BenchJudgeBench || jb.DecisionOriginal == nil || *jb.DecisionOriginal != "A>B" || jb.DecisionSwapped == nil ||
		*jb.DecisionSwapped != "B>A" || jb.Result == nil {
		t.Errorf("the JudgeBench item: %+v", jb)
	}
}
