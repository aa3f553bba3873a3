package datasets

import (
	"github.com/evolm/evolm/internal/testutil"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// rb2Fixture writes a RewardBench-2 table in the published layout (every
// column, additional_metadata included) with pyarrow.
const rb2Fixture = `
meta = pa.struct([("category", pa.string()), ("correct", pa.string()), ("index", pa.float64()),
    ("instruction_id_list", pa.list_(pa.string())), ("label", pa.string()), ("method", pa.string()),
    ("models", pa.list_(pa.string())), ("prompt_norm", pa.string()), ("subcategory", pa.string()), ("valid", pa.float64())])
rows = [
    ("0", "What is 2+2?", ["4"], ["5", "3", "22"], "Math"),
    ("ref:1", "Name a primary colour.", ["red"], ["green", "pink"], "Ties"),
    ("tied:1", "Name a primary colour.", ["red", "blue", "yellow"], ["green", "pink"], "Ties"),
]
pq.write_table(pa.table({
    "id": [r[0] for r in rows],
    "prompt": [r[1] for r in rows],
    "chosen": pa.array([r[2] for r in rows], pa.list_(pa.string())),
    "rejected": pa.array([r[3] for r in rows], pa.list_(pa.string())),
    "num_correct": pa.array([len(r[2]) for r in rows], pa.int64()),
    "num_incorrect": pa.array([len(r[3]) for r in rows], pa.int64()),
    "total_completions": pa.array([len(r[2]) + len(r[3]) for r in rows], pa.int64()),
    "models": pa.array([["m1"], [], ["m2", "m3"]], pa.list_(pa.string())),
    "subset": [r[4] for r in rows],
    "additional_metadata": pa.array([None, {"category": "c", "index": 1.0}, None], meta),
}), OUT)
`

func TestLoadRewardBench2(t *testing.T) {
	dir := t.TempDir()
	pqPath := writePyarrow(t, dir, "test-00000-of-00001.parquet", rb2Fixture)
	jsonl := writeFile(t, dir, "rb2.jsonl",
		`{"id": "9", "prompt": "p", "chosen": ["c"], "rejected": ["r1", "r2", "r3"], "num_correct": 1, "num_incorrect": 3, "total_completions": 4, "models": ["m"], "subset": "Focus", "additional_metadata": {"category": "x"}}`+"\n")
	got, err := LoadRewardBench2(checkedMem(t), []string{pqPath, jsonl})
	if err != nil {
		t.Fatal(err)
	}
	want := []RewardBench2Item{
		{ID: "0", Prompt: "What is 2+2?", Chosen: []string{"4"}, Rejected: []string{"5", "3", "22"}, Subset: "Math", Models: []string{"m1"}},
		{ID: "ref:1", Prompt: "Name a primary colour.", Chosen: []string{"red"}, Rejected: []string{"green", "pink"}, Subset: "Ties", Models: []string{}},
		{ID: "tied:1", Prompt: "Name a primary colour.", Chosen: []string{"red", "blue", "yellow"}, Rejected: []string{"green", "pink"}, Subset: "Ties", Models: []string{"m2", "m3"}},
		{ID: "9", Prompt: "p", Chosen: []string{"c"}, Rejected: []string{"r1", "r2", "r3"}, Subset: "Focus", Models: []string{"m"}},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("items (-want +got):\n%s", d)
	}
}

func TestLoadRewardBench2BadLayout(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name  string
		body  string
		frags []string
	}{
		{"no subset", `pq.write_table(pa.table({"id": ["0"], "prompt": ["p"], "chosen": [["c"]], "rejected": [["r"]], "num_correct": [1]}), OUT)`,
			[]string{`column "subset": missing`, "want string"}},
		{"chosen as string", `pq.write_table(pa.table({"id": ["0"], "prompt": ["p"], "chosen": ["c"], "rejected": [["r"]], "num_correct": [1], "subset": ["Math"]}), OUT)`,
			[]string{`column "chosen": wrong type utf8, want list<string>`}},
		{"num_correct as string", `pq.write_table(pa.table({"id": ["0"], "prompt": ["p"], "chosen": [["c"]], "rejected": [["r"]], "num_correct": ["1"], "subset": ["Math"]}), OUT)`,
			[]string{`column "num_correct": wrong type utf8, want integer`}},
		{"count mismatch", `pq.write_table(pa.table({"id": ["0"], "prompt": ["p"], "chosen": [["c"]], "rejected": [["r"]], "num_correct": [2], "subset": ["Math"]}), OUT)`,
			[]string{`row 0 (id "0")`, `column "num_correct" = 2 but "chosen" holds 1`}},
		{"bad ties id", `pq.write_table(pa.table({"id": ["7"], "prompt": ["p"], "chosen": [["c"]], "rejected": [["r"]], "num_correct": [1], "subset": ["Ties"]}), OUT)`,
			[]string{`Ties id "7"`}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := writePyarrow(t, dir, "bad"+string(rune('a'+i))+".parquet", tc.body)
			_, err := LoadRewardBench2(checkedMem(t), []string{p})
			testutil.ErrorContains(t, err, "the load succeeded", append([]string{p}, tc.frags...)...)
		})
	}
	j := writeFile(t, dir, "bad.jsonl", `{"id": "0", "prompt": "p", "chosen": "c", "rejected": ["r"], "num_correct": 1, "subset": "Math"}`+"\n")
	_, err := LoadRewardBench2(nil, []string{j})
	testutil.ErrorContains(t, err, "the load succeeded", j, `column "chosen": wrong type, want list<string>`)
}
