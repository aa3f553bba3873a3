package pipeline_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/pipeline/pipelinetest"
	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/schemas/schematest"
)

// writeRows writes rows as one shard at path in batches of batch rows.
func writeRows[T any](t *testing.T, mem memory.Allocator, tbl *schemas.Table[T], path string, rows []T, batch int, opts pipeline.WriteOptions) pipeline.ShardInfo {
	t.Helper()
	opts.Mem = mem
	w, err := pipeline.CreateShard(path, tbl.Schema(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	for i := 0; i < len(rows); i += batch {
		rec := tbl.Build(mem, rows[i:min(i+batch, len(rows))])
		err := w.Write(rec)
		rec.Release()
		if err != nil {
			t.Fatal(err)
		}
	}
	info, err := w.Commit()
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// readRows reads a whole shard back as rows, checking it against tbl.
func readRows[T any](t *testing.T, mem memory.Allocator, tbl *schemas.Table[T], path string, batch int64) []T {
	t.Helper()
	return pipelinetest.ReadRows(t, path, tbl, pipeline.ReadOptions{Mem: mem, BatchSize: batch, Schema: tbl.Schema()})
}

func shardRoundTrip[T any](t *testing.T, tbl *schemas.Table[T], rows []T) {
	mem := newMem(t)
	p := filepath.Join(t.TempDir(), tbl.Name, "part-00000.parquet")
	info := writeRows(t, mem, tbl, p, rows, 7, pipeline.WriteOptions{RowGroupRows: 16})
	if info.Rows != int64(len(rows)) {
		t.Errorf("info.Rows = %d, want %d", info.Rows, len(rows))
	}
	for _, parallel := range []bool{false, true} {
		got := pipelinetest.ReadRows(t, p, tbl, pipeline.ReadOptions{Mem: mem, BatchSize: 5, Parallel: parallel, Schema: tbl.Schema()})
		if diff := cmp.Diff(rows, got, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("parallel=%v (-want +got):\n%s", parallel, diff)
		}
	}
}

func TestShardRoundTrip(t *testing.T) {
	t.Run("prompts", func(t *testing.T) { shardRoundTrip(t, schemas.Prompts, schematest.Prompts(50)) })
	t.Run("rollouts", func(t *testing.T) { shardRoundTrip(t, schemas.Rollouts, schematest.Rollouts(50)) })
	t.Run("pairs", func(t *testing.T) { shardRoundTrip(t, schemas.Pairs, schematest.Pairs(50)) })
	t.Run("rubrics", func(t *testing.T) { shardRoundTrip(t, schemas.Rubrics, schematest.Rubrics(50)) })
	t.Run("judgments", func(t *testing.T) { shardRoundTrip(t, schemas.Judgments, schematest.Judgments(50)) })
	t.Run("steps", func(t *testing.T) { shardRoundTrip(t, schemas.Steps, schematest.Steps(120)) })
	t.Run("dedup_report", func(t *testing.T) { shardRoundTrip(t, schemas.DedupReport, schematest.DedupReport(50)) })
	t.Run("zero rows", func(t *testing.T) { shardRoundTrip(t, schemas.Pairs, []schemas.Pair{}) })
}

func TestShardMetadata(t *testing.T) {
	mem := newMem(t)
	p := filepath.Join(t.TempDir(), "part-00000.parquet")
	prov := pipeline.Provenance{Stage: "dedup", ConfigHash: "sha256:abc", CodeVersion: "v9", Inputs: []string{"sha256:1", "sha256:2"}}
	info := writeRows(t, mem, schemas.Steps, p, schematest.Steps(300), 100, pipeline.WriteOptions{Provenance: prov, RowGroupRows: 128})
	r, err := pipeline.OpenShard(p, pipeline.ReadOptions{Mem: mem})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.NumRows() != 300 || r.NumRowGroups() != 3 {
		t.Errorf("rows, row groups = %d, %d; want 300, 3", r.NumRows(), r.NumRowGroups())
	}
	kv := r.Metadata()
	want := map[string]string{
		pipeline.MetaStage: "dedup", pipeline.MetaConfigHash: "sha256:abc", pipeline.MetaCodeVersion: "v9",
		pipeline.MetaInputs: `["sha256:1","sha256:2"]`,
	}
	for k, v := range want {
		if kv[k] != v {
			t.Errorf("metadata %s = %q, want %q", k, kv[k], v)
		}
	}
	if kv["ARROW:schema"] == "" {
		t.Error("no stored ARROW:schema")
	}
	// The table name and version travel in the stored Arrow schema.
	md := r.Schema().Metadata()
	if v, _ := md.GetValue(schemas.MetaVersion); v != strconv.Itoa(schemas.Steps.Version) {
		t.Errorf("schema metadata %s = %q, want %d", schemas.MetaVersion, v, schemas.Steps.Version)
	}
	if v, _ := md.GetValue(schemas.MetaTable); v != "steps" {
		t.Errorf("schema metadata %s = %q, want steps", schemas.MetaTable, v)
	}
	// Every column is zstd-compressed with statistics; string columns are
	// dictionary-encoded.
	rg := r.ParquetReader().MetaData().RowGroup(0)
	for i := 0; i < rg.NumColumns(); i++ {
		cc, err := rg.ColumnChunk(i)
		if err != nil {
			t.Fatal(err)
		}
		if got := cc.Compression().String(); got != "ZSTD" {
			t.Errorf("column %s compression %s, want ZSTD", cc.PathInSchema(), got)
		}
		if ok, _ := cc.StatsSet(); !ok {
			t.Errorf("column %s has no statistics", cc.PathInSchema())
		}
		if cc.PathInSchema().String() == "phase" && !cc.HasDictionaryPage() {
			t.Errorf("column phase not dictionary-encoded")
		}
	}
	// The checksum is of the file's bytes.
	fp, err := pipeline.Fingerprint(p)
	if err != nil {
		t.Fatal(err)
	}
	if fp != "sha256:"+info.SHA256 {
		t.Errorf("fingerprint %s, want sha256:%s", fp, info.SHA256)
	}
	st, _ := os.Stat(p)
	if st.Size() != info.Bytes {
		t.Errorf("info.Bytes = %d, file has %d", info.Bytes, st.Size())
	}
}

func TestShardProjection(t *testing.T) {
	mem := newMem(t)
	p := filepath.Join(t.TempDir(), "part-00000.parquet")
	rows := schematest.Pairs(10)
	writeRows(t, mem, schemas.Pairs, p, rows, 10, pipeline.WriteOptions{})
	want := arrow.NewSchema([]arrow.Field{
		{Name: "strategy", Type: arrow.BinaryTypes.String},
		{Name: "step", Type: arrow.PrimitiveTypes.Int64},
	}, nil)
	for rec, err := range pipeline.ReadShard(context.Background(), p, pipeline.ReadOptions{Mem: mem, Schema: want}) {
		if err != nil {
			t.Fatal(err)
		}
		if rec.NumCols() != 2 || rec.ColumnName(0) != "strategy" || rec.ColumnName(1) != "step" {
			t.Fatalf("columns %v, want [strategy step]", rec.Schema())
		}
		if got := rec.Column(0).(*array.String).Value(1); got != rows[1].Strategy {
			t.Errorf("strategy[1] = %q, want %q", got, rows[1].Strategy)
		}
	}
}

func TestShardAbortAndTemp(t *testing.T) {
	mem := newMem(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "t", "part-00000.parquet")
	w, err := pipeline.CreateShard(p, schemas.Steps.Schema(), pipeline.WriteOptions{Mem: mem})
	if err != nil {
		t.Fatal(err)
	}
	rec := schemas.Steps.Build(mem, schematest.Steps(10))
	defer rec.Release()
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	// While writing, only a hidden temp file exists: `*.parquet` globs and
	// pyarrow's dataset discovery skip it.
	ents, _ := os.ReadDir(filepath.Dir(p))
	if len(ents) != 1 || !pipeline.IsTemp(ents[0].Name()) || strings.HasSuffix(ents[0].Name(), ".parquet") {
		t.Fatalf("while writing, dir holds %v; want one hidden temp file", ents)
	}
	if err := w.Abort(); err != nil {
		t.Fatal(err)
	}
	ents, _ = os.ReadDir(filepath.Dir(p))
	if len(ents) != 0 {
		t.Errorf("after Abort, dir holds %v; want nothing", ents)
	}
	if _, err := w.Commit(); err == nil {
		t.Error("Commit after Abort succeeded")
	}
	// A batch of another schema is refused and names the column.
	w2, err := pipeline.CreateShard(p, schemas.Pairs.Schema(), pipeline.WriteOptions{Mem: mem})
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Abort()
	err = w2.Write(rec)
	if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), `column 0 is "step", want "pair_id"`) {
		t.Errorf("Write of wrong batch: %v", err)
	}
}

func TestShardBadInput(t *testing.T) {
	mem := newMem(t)
	dir := t.TempDir()
	good := filepath.Join(dir, "good.parquet")
	writeRows(t, mem, schemas.Pairs, good, schematest.Pairs(200), 50, pipeline.WriteOptions{})
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// Corrupt a data page in the middle, keeping the footer intact.
	mid := append([]byte(nil), data...)
	for i := 200; i < len(mid)/2; i++ {
		mid[i] ^= 0x5a
	}
	wrongType := arrow.NewSchema([]arrow.Field{{Name: "step", Type: arrow.BinaryTypes.String}}, nil)
	missing := arrow.NewSchema([]arrow.Field{{Name: "pair_id", Type: arrow.BinaryTypes.String}, {Name: "score", Type: arrow.PrimitiveTypes.Float64}}, nil)
	tests := []struct {
		name   string
		path   string
		schema *arrow.Schema
		want   []string
	}{
		{"empty file", write("empty.parquet", nil), nil, []string{"empty.parquet", "empty file"}},
		{"not parquet", write("text.parquet", []byte("id,prompt\n1,hello\n")), nil, []string{"text.parquet", "not a Parquet file: no PAR1 magic at the start"}},
		{"truncated", write("trunc.parquet", data[:len(data)/2]), nil, []string{"trunc.parquet", "not a Parquet file: no PAR1 magic at the end: truncated"}},
		{"bad footer", write("footer.parquet", append(append([]byte("PAR1"), make([]byte, 40)...), "\x10\x00\x00\x00PAR1"...)), nil, []string{"footer.parquet", "not a readable Parquet file"}},
		{"corrupt pages", write("mid.parquet", mid), schemas.Pairs.Schema(), []string{"mid.parquet"}},
		{"missing file", filepath.Join(dir, "nope.parquet"), nil, []string{"nope.parquet", "no such file"}},
		{"missing column", good, missing, []string{"good.parquet", `missing column "score" (want float64)`, "want schema:", "got schema:"}},
		{"wrong type", good, wrongType, []string{"good.parquet", `column "step" has type int64, want utf8`, "want schema:", "got schema:"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			for _, e := range pipeline.ReadShard(context.Background(), tc.path, pipeline.ReadOptions{Mem: mem, BatchSize: 64, Schema: tc.schema}) {
				if e != nil {
					err = e
					break
				}
			}
			if err != nil {
				t.Logf("error: %v", err)
			}
			testutil.ErrorContains(t, err, "read succeeded", tc.want...)
			var se *schemas.SchemaError
			if strings.Contains(tc.name, "column") || tc.name == "wrong type" {
				if !errors.As(err, &se) {
					t.Errorf("error is %T, want *schemas.SchemaError", err)
				}
			}
		})
	}
}

// Columns named like the path's Hive partitions are kept out of the file and
// come back from the path.
func TestShardHivePartitions(t *testing.T) {
	mem := newMem(t)
	dir := t.TempDir()
	rows := schematest.Rollouts(40)
	for i := range rows {
		rows[i].Phase, rows[i].Step = "rubric", 123
	}
	p := filepath.Join(dir, pipeline.ShardPath("rollouts", 0, pipeline.Phase("rubric"), pipeline.Step(123)))
	if !strings.HasSuffix(p, "rollouts/phase=rubric/step=123/part-00000.parquet") {
		t.Fatalf("path %s", p)
	}
	writeRows(t, mem, schemas.Rollouts, p, rows, 16, pipeline.WriteOptions{})
	r, err := pipeline.OpenShard(p, pipeline.ReadOptions{Mem: mem})
	if err != nil {
		t.Fatal(err)
	}
	if r.Schema().HasField("phase") || r.Schema().HasField("step") {
		t.Errorf("file stores partition columns: %s", r.Schema())
	}
	r.Close()
	got := readRows(t, mem, schemas.Rollouts, p, 7)
	if diff := cmp.Diff(rows, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	// A row outside the partition is refused, naming column and row.
	rows[5].Step = 124
	w, err := pipeline.CreateShard(filepath.Join(dir, "rollouts/phase=rubric/step=123/part-00001.parquet"), schemas.Rollouts.Schema(), pipeline.WriteOptions{Mem: mem})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	rec := schemas.Rollouts.Build(mem, rows)
	defer rec.Release()
	if err := w.Write(rec); err == nil || !strings.Contains(err.Error(), `column "step" row 5 is 124, not the partition's 123`) {
		t.Errorf("Write: %v", err)
	}
	// A partition value that does not fit the column's type is refused.
	if _, err := pipeline.CreateShard(filepath.Join(dir, "rollouts/step=latest/part-00000.parquet"), schemas.Rollouts.Schema(), pipeline.WriteOptions{Mem: mem}); err == nil ||
		!strings.Contains(err.Error(), `partition step=latest: column "step"`) {
		t.Errorf("CreateShard with step=latest: %v", err)
	}
}

// Batches read from a shard (with Parquet field metadata and "element" list
// names) can be written to another shard: the read → transform → write path.
func TestShardCopyBatches(t *testing.T) {
	mem := newMem(t)
	dir := t.TempDir()
	rows := schematest.Rollouts(30)
	src := filepath.Join(dir, "a.parquet")
	writeRows(t, mem, schemas.Rollouts, src, rows, 10, pipeline.WriteOptions{})
	dst := filepath.Join(dir, "b.parquet")
	w, err := pipeline.CreateShard(dst, schemas.Rollouts.Schema(), pipeline.WriteOptions{Mem: mem})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	err = pipeline.MapBatches(context.Background(), src, pipeline.ReadOptions{Mem: mem, BatchSize: 8, Schema: schemas.Rollouts.Schema()}, w,
		func(rec arrow.RecordBatch) (arrow.RecordBatch, error) { rec.Retain(); return rec, nil })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(rows, readRows(t, mem, schemas.Rollouts, dst, 100), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
