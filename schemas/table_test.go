package schemas_test

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/schemas/schematest"
)

// roundTrip builds rows into a batch, reads them back and compares.
func roundTrip[T any](t *testing.T, tbl *schemas.Table[T], rows []T) {
	t.Helper()
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	rec := tbl.Build(mem, rows)
	defer rec.Release()
	if got := rec.Schema().Metadata().FindKey(schemas.MetaVersion); got < 0 {
		t.Fatalf("%s: schema has no %s metadata", tbl.Name, schemas.MetaVersion)
	}
	got, err := tbl.Read(rec)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(rows, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("%s round trip (-want +got):\n%s", tbl.Name, diff)
	}
}

func TestRoundTrip(t *testing.T) {
	t.Run("prompts", func(t *testing.T) { roundTrip(t, schemas.Prompts, schematest.Prompts(20)) })
	t.Run("rollouts", func(t *testing.T) { roundTrip(t, schemas.Rollouts, schematest.Rollouts(20)) })
	t.Run("pairs", func(t *testing.T) { roundTrip(t, schemas.Pairs, schematest.Pairs(20)) })
	t.Run("rubrics", func(t *testing.T) { roundTrip(t, schemas.Rubrics, schematest.Rubrics(20)) })
	t.Run("judgments", func(t *testing.T) { roundTrip(t, schemas.Judgments, schematest.Judgments(20)) })
	t.Run("steps", func(t *testing.T) { roundTrip(t, schemas.Steps, schematest.Steps(120)) })
	t.Run("dedup_report", func(t *testing.T) { roundTrip(t, schemas.DedupReport, schematest.DedupReport(20)) })
	t.Run("empty", func(t *testing.T) { roundTrip(t, schemas.Rollouts, []schemas.Rollout{}) })
}

func TestSchemaMetadata(t *testing.T) {
	md := schemas.Rollouts.Schema().Metadata()
	if v, _ := md.GetValue(schemas.MetaTable); v != "rollouts" {
		t.Errorf("table = %q, want rollouts", v)
	}
	if v, _ := md.GetValue(schemas.MetaVersion); v != "2" { // version 2 added token_ids_source
		t.Errorf("version = %q, want 2", v)
	}
	want := "list<item: struct<role: utf8, content: utf8>, nullable>"
	if got := schemas.Prompts.Schema().Field(6).Type.String(); got != want {
		t.Errorf("messages type = %s, want %s", got, want)
	}
}

// batch builds a one-column batch.
func batch(t *testing.T, mem memory.Allocator, field arrow.Field, build func(b array.Builder)) arrow.RecordBatch {
	t.Helper()
	sc := arrow.NewSchema([]arrow.Field{field}, nil)
	b := array.NewRecordBuilder(mem, sc)
	defer b.Release()
	build(b.Field(0))
	return b.NewRecordBatch()
}

func TestReadErrors(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	// A valid dedup_report batch with one column replaced.
	good := schemas.DedupReport.Build(mem, schematest.DedupReport(2))
	defer good.Release()
	replace := func(name string, col arrow.RecordBatch) arrow.RecordBatch {
		idx := good.Schema().FieldIndices(name)[0]
		fields := append([]arrow.Field(nil), good.Schema().Fields()...)
		cols := append([]arrow.Array(nil), good.Columns()...)
		fields[idx], cols[idx] = col.Schema().Field(0), col.Column(0)
		return array.NewRecordBatch(arrow.NewSchema(fields, nil), cols, good.NumRows())
	}
	dropKept := func() arrow.RecordBatch {
		var fields []arrow.Field
		var cols []arrow.Array
		for i, f := range good.Schema().Fields() {
			if f.Name != "kept_id" {
				fields = append(fields, f)
				cols = append(cols, good.Column(i))
			}
		}
		return array.NewRecordBatch(arrow.NewSchema(fields, nil), cols, good.NumRows())
	}
	tests := []struct {
		name string
		rec  func() arrow.RecordBatch
		want []string
	}{
		{"missing column", dropKept, []string{`missing column "kept_id" (want utf8)`, "want schema:", "got schema:"}},
		{"wrong type", func() arrow.RecordBatch {
			col := batch(t, mem, arrow.Field{Name: "similarity", Type: arrow.BinaryTypes.String}, func(b array.Builder) {
				b.(*array.StringBuilder).AppendValues([]string{"a", "b"}, nil)
			})
			defer col.Release()
			return replace("similarity", col)
		}, []string{`column "similarity" has type utf8, want float64`}},
		{"wrong list element type", func() arrow.RecordBatch {
			col := batch(t, mem, arrow.Field{Name: "removed_ids", Type: arrow.ListOf(arrow.PrimitiveTypes.Int64)}, func(b array.Builder) {
				lb := b.(*array.ListBuilder)
				lb.Append(true)
				lb.Append(true)
			})
			defer col.Release()
			return replace("removed_ids", col)
		}, []string{`column "removed_ids" has type list<item: int64, nullable>, want list<item: utf8, nullable>`}},
		{"null in non-nullable", func() arrow.RecordBatch {
			col := batch(t, mem, arrow.Field{Name: "kept_id", Type: arrow.BinaryTypes.String, Nullable: true}, func(b array.Builder) {
				b.(*array.StringBuilder).AppendValues([]string{"a", ""}, []bool{true, false})
			})
			defer col.Release()
			return replace("kept_id", col)
		}, []string{`column "kept_id" row 1: null in a non-nullable column`}},
		{"invalid utf8", func() arrow.RecordBatch {
			col := batch(t, mem, arrow.Field{Name: "kept_id", Type: arrow.BinaryTypes.String}, func(b array.Builder) {
				b.(*array.StringBuilder).AppendValues([]string{"ok", "bad\xff"}, nil)
			})
			defer col.Release()
			return replace("kept_id", col)
		}, []string{`column "kept_id" row 1: invalid UTF-8`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := tc.rec()
			defer rec.Release()
			_, err := schemas.DedupReport.Read(rec)
			testutil.ErrorContains(t, err, "Read succeeded", tc.want...)
		})
	}
}

// A struct<content, role> list (pyarrow's Tulu layout order) reads as messages.
func TestMessagesAnyFieldOrder(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	rows := schematest.Prompts(3)
	good := schemas.Prompts.Build(mem, rows)
	defer good.Release()
	st := arrow.StructOf(arrow.Field{Name: "content", Type: arrow.BinaryTypes.String}, arrow.Field{Name: "role", Type: arrow.BinaryTypes.String})
	col := batch(t, mem, arrow.Field{Name: "messages", Type: arrow.ListOf(st)}, func(b array.Builder) {
		lb := b.(*array.ListBuilder)
		sb := lb.ValueBuilder().(*array.StructBuilder)
		for _, r := range rows {
			lb.Append(true)
			for _, m := range r.Messages {
				sb.Append(true)
				sb.FieldBuilder(0).(*array.StringBuilder).Append(m.Content)
				sb.FieldBuilder(1).(*array.StringBuilder).Append(m.Role)
			}
		}
	})
	defer col.Release()
	cols := append([]arrow.Array(nil), good.Columns()...)
	fields := append([]arrow.Field(nil), good.Schema().Fields()...)
	cols[6], fields[6] = col.Column(0), col.Schema().Field(0)
	rec := array.NewRecordBatch(arrow.NewSchema(fields, nil), cols, good.NumRows())
	defer rec.Release()
	got, err := schemas.Prompts.Read(rec)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(rows, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
