package pipeline_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/schemas/schematest"
)

// interopTable is what interop_read.py expects of one table.
type interopTable struct {
	Columns    [][3]any                     `json:"columns"`              // (name, pyarrow type string, nullable) in order
	Files      map[string][]json.RawMessage `json:"files"`                // run-relative path → rows
	Partitions map[string]map[string]int    `json:"partitions,omitempty"` // "phase/step" → rows, logprobs
	Roles      [][]any                      `json:"roles,omitempty"`
	WeightSum  float64                      `json:"weight_sum,omitempty"`
}

// pyType renders an Arrow type the way pyarrow prints it.
func pyType(t *testing.T, dt arrow.DataType) string {
	switch dt := dt.(type) {
	case *arrow.StringType:
		return "string"
	case *arrow.Int32Type:
		return "int32"
	case *arrow.Int64Type:
		return "int64"
	case *arrow.Float32Type:
		return "float"
	case *arrow.Float64Type:
		return "double"
	case *arrow.BooleanType:
		return "bool"
	case *arrow.ListType:
		return "list<item: " + pyType(t, dt.Elem()) + ">"
	case *arrow.StructType:
		var parts []string
		for _, f := range dt.Fields() {
			parts = append(parts, f.Name+": "+pyType(t, f.Type))
		}
		return "struct<" + strings.Join(parts, ", ") + ">"
	}
	t.Fatalf("pyType: no pyarrow name for %s", dt)
	return ""
}

// jsonRows renders a batch as JSON rows, the way Arrow itself prints it.
func jsonRows(t *testing.T, rec arrow.RecordBatch) []json.RawMessage {
	t.Helper()
	var buf bytes.Buffer
	if err := array.RecordToJSON(rec, &buf); err != nil {
		t.Fatal(err)
	}
	var out []json.RawMessage
	sc := bufio.NewScanner(&buf)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		out = append(out, json.RawMessage(append([]byte(nil), sc.Bytes()...)))
	}
	return out
}

// TestInteropPeersReadRun writes every table into a run directory through
// MapShards (rollouts in phase/step Hive partitions) and has pyarrow check
// types, nullability, metadata and values of each file, DuckDB query the run
// through its Hive partitions, and polars read it.
func TestInteropPeersReadRun(t *testing.T) {
	mem := newMem(t)
	env := testEnv(t, mem, "interop")
	expected := map[string]*interopTable{}
	var tasks []pipeline.Task
	add := func(table string, schema *arrow.Schema, rel string, build func() arrow.RecordBatch) {
		tt := expected[table]
		if tt == nil {
			tt = &interopTable{Files: map[string][]json.RawMessage{}}
			for _, f := range schema.Fields() {
				tt.Columns = append(tt.Columns, [3]any{f.Name, pyType(t, f.Type), f.Nullable})
			}
			expected[table] = tt
		}
		rec := build()
		tt.Files[rel] = jsonRows(t, rec)
		rec.Release()
		tasks = append(tasks, pipeline.Task{Output: rel, Schema: schema, Write: func(ctx context.Context, w *pipeline.ShardWriter) error {
			rec := build()
			defer rec.Release()
			// Two batches per shard, to exercise the streaming writer.
			half := rec.NumRows() / 2
			for _, s := range [][2]int64{{0, half}, {half, rec.NumRows()}} {
				part := rec.NewSlice(s[0], s[1])
				err := w.Write(part)
				part.Release()
				if err != nil {
					return err
				}
			}
			return nil
		}})
	}
	prompts := schematest.Prompts(30)
	for i := range 2 {
		rows := prompts[i*15 : (i+1)*15]
		add("prompts", schemas.Prompts.Schema(), pipeline.ShardPath("prompts", i), func() arrow.RecordBatch { return schemas.Prompts.Build(mem, rows) })
	}
	roles := map[string]int{}
	for _, p := range prompts {
		for _, m := range p.Messages {
			roles[m.Role]++
		}
	}
	expected["prompts"].Roles = [][]any{{"system", roles["system"]}, {"user", roles["user"]}}

	rollouts := schematest.Rollouts(200)
	parts := map[string]map[string]int{}
	for _, pp := range []struct {
		phase string
		step  int
	}{{"policy", 0}, {"policy", 1}, {"rubric", 50}} {
		var rows []schemas.Rollout
		for _, r := range rollouts {
			if (pp.phase == "rubric") == (r.Step == 2) && (pp.phase == "rubric" || int(r.Step) == pp.step) {
				r.Phase, r.Step = pp.phase, int64(pp.step)
				rows = append(rows, r)
			}
		}
		lp := 0
		for _, r := range rows {
			lp += len(r.TokenLogprobs)
		}
		parts[fmt.Sprintf("%s/%d", pp.phase, pp.step)] = map[string]int{"rows": len(rows), "logprobs": lp}
		rel := pipeline.ShardPath("rollouts", 0, pipeline.Phase(pp.phase), pipeline.Step(pp.step))
		add("rollouts", schemas.Rollouts.Schema(), rel, func() arrow.RecordBatch { return schemas.Rollouts.Build(mem, rows) })
	}
	expected["rollouts"].Partitions = parts

	pairs, rubrics, judgments := schematest.Pairs(24), schematest.Rubrics(24), schematest.Judgments(24)
	// Their phase and step are the partition's (the writer checks).
	for i := range 24 {
		pairs[i].Step = 50
		rubrics[i].Phase, rubrics[i].Step = "rubric", 50
		judgments[i].Phase, judgments[i].Step = "policy", 1
	}
	steps, report := schematest.Steps(120), schematest.DedupReport(12)
	add("pairs", schemas.Pairs.Schema(), pipeline.ShardPath("pairs", 0, pipeline.Phase("rubric"), pipeline.Step(50)), func() arrow.RecordBatch { return schemas.Pairs.Build(mem, pairs) })
	add("rubrics", schemas.Rubrics.Schema(), pipeline.ShardPath("rubrics", 0, pipeline.Phase("rubric"), pipeline.Step(50)), func() arrow.RecordBatch { return schemas.Rubrics.Build(mem, rubrics) })
	add("judgments", schemas.Judgments.Schema(), pipeline.ShardPath("judgments", 0, pipeline.Phase("policy"), pipeline.Step(1)), func() arrow.RecordBatch { return schemas.Judgments.Build(mem, judgments) })
	add("steps", schemas.Steps.Schema(), pipeline.ShardPath("steps", 0), func() arrow.RecordBatch { return schemas.Steps.Build(mem, steps) })
	add("dedup_report", schemas.DedupReport.Schema(), pipeline.ShardPath("dedup_report", 0), func() arrow.RecordBatch { return schemas.DedupReport.Build(mem, report) })
	for _, r := range rubrics {
		for _, c := range r.Criteria {
			expected["rubrics"].WeightSum += c.Weight
		}
	}

	if err := env.MapShards(context.Background(), tasks); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(expected)
	if err != nil {
		t.Fatal(err)
	}
	exp := filepath.Join(t.TempDir(), "expected.json")
	if err := os.WriteFile(exp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out := testutil.RunPython(t, "interop_read.py", env.Run.Dir, exp)
	if !strings.HasPrefix(string(out), "ok ") {
		t.Fatalf("interop_read.py: %s", out)
	}
	t.Logf("interop_read.py: %s", bytes.TrimSpace(out))
}

// tuluRow mirrors the Tulu 3 preference-mixture layout for comparison.
type tuluRow struct {
	ID       string            `json:"id"`
	Prompt   string            `json:"prompt"`
	Chosen   []schemas.Message `json:"chosen"`
	Rejected []schemas.Message `json:"rejected"`
	Source   string            `json:"source"`
}

// TestInteropReadPyarrowTulu reads a Tulu-layout file that pyarrow wrote
// (struct<content, role>, snappy, several row groups) through OpenShard with
// an expected schema in our field order.
func TestInteropReadPyarrowTulu(t *testing.T) {
	mem := newMem(t)
	path := filepath.Join(t.TempDir(), "tulu.parquet")
	var want []tuluRow
	if err := json.Unmarshal(testutil.RunPython(t, "interop_write.py", path), &want); err != nil {
		t.Fatal(err)
	}
	msgs := arrow.ListOf(arrow.StructOf(arrow.Field{Name: "role", Type: arrow.BinaryTypes.String}, arrow.Field{Name: "content", Type: arrow.BinaryTypes.String}))
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.BinaryTypes.String}, {Name: "prompt", Type: arrow.BinaryTypes.String},
		{Name: "chosen", Type: msgs}, {Name: "rejected", Type: msgs}, {Name: "source", Type: arrow.BinaryTypes.String},
	}, nil)
	r, err := pipeline.OpenShard(path, pipeline.ReadOptions{Mem: mem, BatchSize: 8, Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.NumRowGroups() != 4 || r.NumRows() != 37 {
		t.Errorf("row groups, rows = %d, %d; want 4, 37", r.NumRowGroups(), r.NumRows())
	}
	var got []tuluRow
	for rec, err := range r.Batches(context.Background()) {
		if err != nil {
			t.Fatal(err)
		}
		str := func(c int) *array.String { return rec.Column(c).(*array.String) }
		list := func(c, i int) []schemas.Message {
			l := rec.Column(c).(*array.List)
			st := l.ListValues().(*array.Struct)
			ri, _ := st.DataType().(*arrow.StructType).FieldIdx("role")
			ci, _ := st.DataType().(*arrow.StructType).FieldIdx("content")
			s, e := l.ValueOffsets(i)
			var out []schemas.Message
			for j := s; j < e; j++ {
				out = append(out, schemas.Message{Role: st.Field(ri).(*array.String).Value(int(j)), Content: st.Field(ci).(*array.String).Value(int(j))})
			}
			return out
		}
		for i := range int(rec.NumRows()) {
			got = append(got, tuluRow{str(0).Value(i), str(1).Value(i), list(2, i), list(3, i), str(4).Value(i)})
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-pyarrow wrote +we read):\n%s", diff)
	}
}
