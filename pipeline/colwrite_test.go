package pipeline

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/schemas/schematest"
)

// writeBoth writes the batches as one shard through columnWriter (with the
// given workers) and through pqarrow.FileWriter, and checks that the two
// files are the same bytes.
func writeBoth(t *testing.T, sc *arrow.Schema, recs []arrow.RecordBatch, opts WriteOptions) {
	t.Helper()
	if !parallelWritable(sc) {
		t.Fatalf("schema not parallel-writable: %s", sc)
	}
	dir := t.TempDir()
	var files [][]byte
	for k, pq := range []bool{true, false} {
		p := filepath.Join(dir, strconv.Itoa(k), "part-00000.parquet")
		w, err := createShard(p, sc, opts, pq)
		if err != nil {
			t.Fatal(err)
		}
		if _, isCol := w.fw.(*columnWriter); isCol == pq {
			t.Fatalf("withPqarrow=%v wrote through %T", pq, w.fw)
		}
		for _, r := range recs {
			if err := w.Write(r); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := w.Commit(); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, b)
	}
	if !bytes.Equal(files[0], files[1]) {
		t.Errorf("columnWriter wrote %d bytes, pqarrow %d; the files differ", len(files[1]), len(files[0]))
	}
}

// The column-parallel writer writes what pqarrow writes, byte for byte, for
// every table evolm stores, in batches that straddle row groups.
func TestColumnWriterMatchesPqarrow(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	defer mem.AssertSize(t, 0)
	t.Run("prompts", func(t *testing.T) { matchTable(t, mem, schemas.Prompts, schematest.Prompts(70)) })
	t.Run("rollouts", func(t *testing.T) { matchTable(t, mem, schemas.Rollouts, schematest.Rollouts(70)) })
	t.Run("pairs", func(t *testing.T) { matchTable(t, mem, schemas.Pairs, schematest.Pairs(70)) })
	t.Run("rubrics", func(t *testing.T) { matchTable(t, mem, schemas.Rubrics, schematest.Rubrics(70)) })
	t.Run("judgments", func(t *testing.T) { matchTable(t, mem, schemas.Judgments, schematest.Judgments(70)) })
	t.Run("steps", func(t *testing.T) { matchTable(t, mem, schemas.Steps, schematest.Steps(70)) })
	t.Run("dedup_report", func(t *testing.T) { matchTable(t, mem, schemas.DedupReport, schematest.DedupReport(70)) })
}

func matchTable[T any](t *testing.T, mem memory.Allocator, tbl *schemas.Table[T], rows []T) {
	var recs []arrow.RecordBatch
	for i := 0; i < len(rows); i += 13 {
		recs = append(recs, tbl.Build(mem, rows[i:min(i+13, len(rows))]))
	}
	defer func() {
		for _, r := range recs {
			r.Release()
		}
	}()
	writeBoth(t, tbl.Schema(), recs, WriteOptions{Mem: mem, RowGroupRows: 30})
}

// A schema with every nesting the level builder handles, random nulls,
// empty lists, sliced batches and null list slots that still own values.
func TestColumnWriterNested(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	defer mem.AssertSize(t, 0)
	pair := arrow.StructOf(
		arrow.Field{Name: "p", Type: arrow.BinaryTypes.String},
		arrow.Field{Name: "q", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	)
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "a", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "b", Type: arrow.BinaryTypes.String},
		{Name: "c", Type: arrow.ListOfField(arrow.Field{Name: "item", Type: arrow.PrimitiveTypes.Float32, Nullable: true}), Nullable: true},
		{Name: "d", Type: arrow.ListOf(arrow.ListOfNonNullable(arrow.PrimitiveTypes.Int32)), Nullable: true},
		{Name: "e", Type: arrow.StructOf(
			arrow.Field{Name: "x", Type: arrow.BinaryTypes.String, Nullable: true},
			arrow.Field{Name: "y", Type: arrow.ListOf(arrow.PrimitiveTypes.Int64), Nullable: true},
		), Nullable: true},
		{Name: "f", Type: arrow.ListOfField(arrow.Field{Name: "item", Type: pair, Nullable: true}), Nullable: true},
		{Name: "g", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
		{Name: "h", Type: arrow.ListOfNonNullable(arrow.PrimitiveTypes.Int64)},
	}, nil)
	rng := rand.New(rand.NewPCG(1, 2))
	var recs []arrow.RecordBatch
	for _, n := range []int{1, 37, 0, 200, 64, 5} {
		b := array.NewRecordBuilder(mem, sc)
		for range n {
			for i, f := range sc.Fields() {
				appendRandom(rng, b.Field(i), f.Type, f.Nullable)
			}
		}
		rec := b.NewRecordBatch()
		b.Release()
		recs = append(recs, rec)
	}
	// A slice of a batch: list offsets no longer start at 0.
	recs = append(recs, recs[3].NewSlice(50, 180))
	// A null list slot whose offsets still span values (Arrow allows it):
	// the levels skip them and the leaf values come in two runs.
	vals := array.NewInt64Builder(mem)
	vals.AppendValues([]int64{1, 2, 3, 4, 5, 6}, nil)
	va := vals.NewArray()
	vals.Release()
	valid := memory.NewResizableBuffer(mem)
	valid.Resize(1)
	bitutil.SetBit(valid.Bytes(), 0)
	bitutil.SetBit(valid.Bytes(), 2)
	offs := memory.NewResizableBuffer(mem)
	offs.Resize(4 * 4)
	arrow.Int32Traits.Copy(arrow.Int32Traits.CastFromBytes(offs.Bytes()), []int32{0, 2, 4, 6})
	ld := array.NewData(arrow.ListOf(arrow.PrimitiveTypes.Int64), 3, []*memory.Buffer{valid, offs}, []arrow.ArrayData{va.Data()}, 1, 0)
	lst := array.MakeFromData(ld)
	ld.Release()
	va.Release()
	valid.Release()
	offs.Release()
	sc2 := arrow.NewSchema([]arrow.Field{{Name: "l", Type: lst.DataType(), Nullable: true}}, nil)
	rec2 := array.NewRecordBatch(sc2, []arrow.Array{lst}, 3)
	lst.Release()
	defer rec2.Release()
	for _, r := range recs {
		defer r.Release()
	}
	for _, w := range []int{1, 3} {
		writeBoth(t, sc, recs, WriteOptions{Mem: mem, RowGroupRows: 90, EncodeWorkers: w})
		writeBoth(t, sc2, []arrow.RecordBatch{rec2, rec2}, WriteOptions{Mem: mem, RowGroupRows: 4, EncodeWorkers: w})
	}
}

// appendRandom appends one random value of type dt (null a fifth of the
// time where nullable, lists of 0-4 elements).
func appendRandom(rng *rand.Rand, b array.Builder, dt arrow.DataType, nullable bool) {
	if nullable && rng.IntN(5) == 0 {
		b.AppendNull()
		return
	}
	switch t := dt.(type) {
	case *arrow.ListType:
		lb := b.(*array.ListBuilder)
		lb.Append(true)
		for range rng.IntN(5) {
			appendRandom(rng, lb.ValueBuilder(), t.Elem(), t.ElemField().Nullable)
		}
	case *arrow.StructType:
		sb := b.(*array.StructBuilder)
		sb.Append(true)
		for i, f := range t.Fields() {
			appendRandom(rng, sb.FieldBuilder(i), f.Type, f.Nullable)
		}
	case *arrow.Int64Type:
		b.(*array.Int64Builder).Append(rng.Int64N(1000))
	case *arrow.Int32Type:
		b.(*array.Int32Builder).Append(rng.Int32N(50))
	case *arrow.Float32Type:
		b.(*array.Float32Builder).Append(rng.Float32())
	case *arrow.Float64Type:
		b.(*array.Float64Builder).Append(rng.Float64())
	case *arrow.BooleanType:
		b.(*array.BooleanBuilder).Append(rng.IntN(2) == 0)
	case *arrow.StringType:
		b.(*array.StringBuilder).Append(strconv.Itoa(rng.IntN(300)))
	default:
		panic(dt.String())
	}
}
