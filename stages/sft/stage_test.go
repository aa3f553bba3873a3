package sft

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/serving/backend"
)

// TestLRAt: transformers' get_linear_schedule_with_warmup and
// get_cosine_schedule_with_warmup, and a constant rate.
func TestLRAt(t *testing.T) {
	c := &Config{Keys: Keys{LR: 1, WarmupSteps: 2}}
	for _, tc := range []struct {
		sched string
		want  []float64
	}{
		{"linear", []float64{0, 0.5, 1, 0.75, 0.5, 0.25}},
		{"constant", []float64{0, 0.5, 1, 1, 1, 1}},
		{"cosine", []float64{0, 0.5, 1, 0.5 * (1 + math.Cos(math.Pi/4)), 0.5, 0.5 * (1 + math.Cos(3*math.Pi/4))}},
	} {
		c.Scheduler = tc.sched
		var got []float64
		for s := range 6 {
			got = append(got, c.LRAt(s, 6))
		}
		if d := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b float64) bool { return math.Abs(a-b) < 1e-12 })); d != "" {
			t.Errorf("%s (-want +got):\n%s", tc.sched, d)
		}
	}
}

// TestBatchOrder: every epoch visits each example once, in a seeded order
// that changes per epoch; a step's batch depends on the step alone.
func TestBatchOrder(t *testing.T) {
	c := &Config{Keys: Keys{BatchSize: 3, Shuffle: true, Seed: 5}}
	const n = 7
	var visits []int
	for s := range 7 { // 21 slots: three epochs
		visits = append(visits, c.batchAt(n, s)...)
	}
	for e := range 3 {
		seen := map[int]bool{}
		for _, i := range visits[e*n : (e+1)*n] {
			seen[i] = true
		}
		if len(seen) != n {
			t.Fatalf("epoch %d visits %v", e, visits[e*n:(e+1)*n])
		}
	}
	if cmp.Equal(visits[:n], visits[n:2*n]) {
		t.Errorf("epochs 0 and 1 in the same order %v", visits[:n])
	}
	if d := cmp.Diff(visits[6:9], c.batchAt(n, 2)); d != "" {
		t.Errorf("step 2 recomputed (-first +again):\n%s", d)
	}
	c.Shuffle = false
	if d := cmp.Diff([]int{6, 0, 1}, c.batchAt(n, 2)); d != "" {
		t.Errorf("file order (-want +got):\n%s", d)
	}
}

func TestReadExamples(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.jsonl", `{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}
{"prompt": "2+2=", "completion": "4"}
`)
	exs, err := readExamples(context.Background(), []string{good}, pipeline.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := []backend.SFTExample{
		{Messages: []backend.Message{{Role: "user", Content: "hi"}, {Role: "assistant", Content: "yo"}}},
		{Prompt: "2+2=", Completion: "4"},
	}
	if d := cmp.Diff(want, exs); d != "" {
		t.Errorf("examples (-want +got):\n%s", d)
	}
	// A Parquet file pyarrow wrote, in both layouts.
	pq := filepath.Join(dir, "chats.parquet")
	testutil.RunPython(t, write("mk.py", `import sys, pyarrow as pa, pyarrow.parquet as pq
pq.write_table(pa.table({"messages": [[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]]}), sys.argv[1])
pq.write_table(pa.table({"prompt": ["2+2="], "completion": ["4"], "id": [7]}), sys.argv[2])
`), pq, filepath.Join(dir, "pc.parquet"))
	exs, err = readExamples(context.Background(), []string{pq, filepath.Join(dir, "pc.parquet")}, pipeline.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, exs); d != "" {
		t.Errorf("Parquet examples (-want +got):\n%s", d)
	}
	for _, tc := range []struct{ body, wants string }{
		{`{"messages": [{"content": "hi"}]}`, "line 1: messages[0]: no role"},
		{`{"prompt": "a"}`, "line 1: no messages and no prompt and completion"},
		{"{\"prompt\": \"a\", \"completion\": \"b\"}\n{oops", "line 2"},
		{`{"messages": [{"role": "user", "content": "a"}], "prompt": "a", "completion": "b"}`, "want one layout"},
	} {
		_, err := readExamples(context.Background(), []string{write("bad.jsonl", tc.body)}, pipeline.ReadOptions{})
		if err == nil || !strings.Contains(err.Error(), "bad.jsonl") || !strings.Contains(err.Error(), tc.wants) {
			t.Errorf("%q: error %v, want the file and %q", tc.body, err, tc.wants)
		}
	}
}
