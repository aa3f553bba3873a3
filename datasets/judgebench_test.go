package datasets

import (
	"github.com/evolm/evolm/internal/testutil"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestLoadJudgeBench(t *testing.T) {
	dir := t.TempDir()
	// The GitHub files write original_id as an integer; the Hub's as a string.
	jsonl := writeFile(t, dir, "dataset=judgebench,response_model=gpt-4o-2024-05-13.jsonl",
		`{"pair_id": "p1", "original_id": 1420, "source": "mmlu-pro-law", "question": "q1", "response_model": "gpt-4o-2024-05-13", "response_A": "a1", "response_B": "b1", "label": "A>B"}`+"\n")
	pqPath := writePyarrow(t, dir, "claude.parquet", `
pq.write_table(pa.table({
    "pair_id": ["p2", "p3"], "original_id": ["10646", "x"], "source": ["livebench-math", "livecodebench"],
    "question": ["q2", "q3"], "response_model": ["claude", "claude"],
    "response_A": ["a2", "a3"], "response_B": ["b2", "b3"], "label": ["B>A", "A>B"],
}), OUT)
`)
	got, err := LoadJudgeBench(checkedMem(t), []string{jsonl, pqPath})
	if err != nil {
		t.Fatal(err)
	}
	want := []JudgeBenchItem{
		{PairID: "p1", OriginalID: "1420", Source: "mmlu-pro-law", Question: "q1", ResponseModel: "gpt-4o-2024-05-13", ResponseA: "a1", ResponseB: "b1", Label: "A>B"},
		{PairID: "p2", OriginalID: "10646", Source: "livebench-math", Question: "q2", ResponseModel: "claude", ResponseA: "a2", ResponseB: "b2", Label: "B>A"},
		{PairID: "p3", OriginalID: "x", Source: "livecodebench", Question: "q3", ResponseModel: "claude", ResponseA: "a3", ResponseB: "b3", Label: "A>B"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("items (-want +got):\n%s", d)
	}
	cats := map[string]string{"mmlu-pro-computer science": "knowledge", "livebench-reasoning": "reasoning", "livebench-math": "math", "livecodebench": "coding", "other": "other"}
	for src, want := range cats {
		if got := JudgeBenchCategory(src); got != want {
			t.Errorf("JudgeBenchCategory(%q) = %q, want %q", src, got, want)
		}
	}
}

func TestLoadJudgeBenchBadLayout(t *testing.T) {
	dir := t.TempDir()
	noLabel := writePyarrow(t, dir, "nolabel.parquet", `
pq.write_table(pa.table({"pair_id": ["p"], "source": ["s"], "question": ["q"], "response_A": ["a"], "response_B": ["b"]}), OUT)
`)
	_, err := LoadJudgeBench(checkedMem(t), []string{noLabel})
	testutil.ErrorContains(t, err, "the load succeeded", noLabel, `column "label": missing`)

	floatID := writePyarrow(t, dir, "floatid.parquet", `
pq.write_table(pa.table({"pair_id": ["p"], "original_id": [1.5], "source": ["s"], "question": ["q"], "response_A": ["a"], "response_B": ["b"], "label": ["A>B"]}), OUT)
`)
	_, err = LoadJudgeBench(checkedMem(t), []string{floatID})
	testutil.ErrorContains(t, err, "the load succeeded", floatID, `column "original_id": wrong type float64, want string or integer`)

	badLabel := writeFile(t, dir, "jb.jsonl", `{"pair_id": "p", "source": "s", "question": "q", "response_A": "a", "response_B": "b", "label": "A=B"}`+"\n")
	_, err = LoadJudgeBench(nil, []string{badLabel})
	testutil.ErrorContains(t, err, "the load succeeded", badLabel, `column "label" = "A=B"`)

	missing := writeFile(t, dir, "jb2.jsonl", `{"pair_id": "p", "source": "s", "question": "q", "response_A": "a", "label": "A>B"}`+"\n")
	_, err = LoadJudgeBench(nil, []string{missing})
	testutil.ErrorContains(t, err, "the load succeeded", missing, `column "response_B": missing`)
}
