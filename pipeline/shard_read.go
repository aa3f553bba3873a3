package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/evolm/evolm/schemas"
)

// ReadOptions configure a ShardReader. The zero value reads every column in
// batches of 64Ki rows with the default allocator.
type ReadOptions struct {
	Mem       memory.Allocator // nil: memory.DefaultAllocator
	BatchSize int64            // rows per batch; 0: 64Ki
	Parallel  bool             // decode columns in parallel
	// Schema, if set, is the schema the caller expects. The reader checks that
	// every field exists in the file with a compatible type (see schemas.CheckSchema)
	// and reads only those columns, in Schema's order. Extra file columns are
	// ignored.
	Schema *arrow.Schema
}

// ShardReader streams the record batches of one Parquet file.
type ShardReader struct {
	path   string
	f      *os.File
	pf     *file.Reader
	fr     *pqarrow.FileReader
	mem    memory.Allocator
	schema *arrow.Schema // of the batches returned
	cols   []int         // leaf column indices to read; nil: all
	consts []constCol    // partition columns added from the path
	closed bool
}

// OpenShard opens a Parquet file for streaming. Errors name the file; a schema
// mismatch with opts.Schema shows both schemas.
func OpenShard(path string, opts ReadOptions) (*ShardReader, error) {
	mem := opts.Mem
	if mem == nil {
		mem = memory.DefaultAllocator
	}
	bs := opts.BatchSize
	if bs <= 0 {
		bs = 64 * 1024
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("shard %s: %w", path, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("shard %s: %w", path, err)
	}
	if st.Size() == 0 {
		f.Close()
		return nil, fmt.Errorf("shard %s: empty file (0 bytes), not a Parquet file", path)
	}
	if err := checkMagic(f, st.Size()); err != nil {
		f.Close()
		return nil, fmt.Errorf("shard %s: not a Parquet file: %w", path, err)
	}
	pf, err := openParquet(f, mem)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("shard %s: not a readable Parquet file: %w", path, err)
	}
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: bs, Parallel: opts.Parallel}, mem)
	if err != nil {
		pf.Close()
		return nil, fmt.Errorf("shard %s: %w", path, err)
	}
	full, err := fr.Schema()
	if err != nil {
		pf.Close()
		return nil, fmt.Errorf("shard %s: arrow schema: %w", path, err)
	}
	r := &ShardReader{path: path, f: f, pf: pf, fr: fr, mem: mem, schema: full}
	if opts.Schema != nil {
		if err := r.project(opts.Schema); err != nil {
			pf.Close()
			return nil, err
		}
	}
	return r, nil
}

// checkMagic checks the "PAR1" magic at both ends of a Parquet file: a
// missing tail means a truncated (or still-being-written) file.
func checkMagic(f *os.File, size int64) error {
	var head, tail [4]byte
	if size < 12 {
		return fmt.Errorf("%d bytes, too short", size)
	}
	if _, err := f.ReadAt(head[:], 0); err != nil {
		return err
	}
	if _, err := f.ReadAt(tail[:], size-4); err != nil {
		return err
	}
	switch {
	case string(head[:]) != "PAR1":
		return fmt.Errorf("no PAR1 magic at the start (found %q)", head[:])
	case string(tail[:]) != "PAR1":
		return errors.New("no PAR1 magic at the end: truncated or unfinished")
	}
	return nil
}

// openParquet turns the panics some corrupt footers cause into errors.
func openParquet(f *os.File, mem memory.Allocator) (pf *file.Reader, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("corrupt file: %v", p)
		}
	}()
	return file.NewParquetReader(f, file.WithReadProps(parquet.NewReaderProperties(mem)))
}

// project restricts the reader to want's fields, checking their types. A
// field the file lacks that names a Hive partition of the path becomes a
// constant column of the partition's value; a nullable field added in a
// later table version than the file's (schemas.MetaAddedIn) becomes a column of nulls.
func (r *ShardReader) project(want *arrow.Schema) error {
	parts := partitionMap(PathPartitions(r.path))
	fileVersion := schemas.SchemaVersion(r.schema)
	var problems []string
	var fields []arrow.Field
	var cols []int
	var consts []constCol
	for i, wf := range want.Fields() {
		idx := r.schema.FieldIndices(wf.Name)
		if len(idx) == 0 {
			if v, ok := parts[wf.Name]; ok && partitionTypeOK(wf.Type) {
				consts = append(consts, constCol{idx: i, field: wf, value: v})
				fields = append(fields, wf)
				continue
			}
			if added := schemas.AddedIn(wf); wf.Nullable && added > 0 && fileVersion < added {
				consts = append(consts, constCol{idx: i, field: wf, null: true})
				fields = append(fields, wf)
				continue
			}
			problems = append(problems, fmt.Sprintf("missing column %q (want %s)", wf.Name, wf.Type))
			continue
		}
		gf := r.schema.Field(idx[0])
		if !schemas.TypesCompatible(wf.Type, gf.Type) {
			problems = append(problems, fmt.Sprintf("column %q has type %s, want %s", wf.Name, gf.Type, wf.Type))
			continue
		}
		fields = append(fields, gf)
		leaves, err := r.leafColumns(idx[0])
		if err != nil {
			return fmt.Errorf("shard %s: column %q: %w", r.path, wf.Name, err)
		}
		cols = append(cols, leaves...)
	}
	if len(problems) > 0 {
		return &schemas.SchemaError{Where: "shard " + r.path, Problems: problems, Want: want, Got: r.schema}
	}
	var written map[string]string
	if len(consts) > 0 {
		if js, ok := r.Metadata()[MetaPartitions]; ok {
			if err := json.Unmarshal([]byte(js), &written); err != nil {
				return fmt.Errorf("shard %s: metadata %s: %w", r.path, MetaPartitions, err)
			}
		}
	}
	for _, c := range consts {
		if c.null {
			continue
		}
		if err := checkPartitionValue(c.field.Type, c.value); err != nil {
			return fmt.Errorf("shard %s: column %q from partition %s=%s: %w", r.path, c.field.Name, c.field.Name, c.value, err)
		}
		if w, ok := written[c.field.Name]; ok && !samePartitionValue(w, c.value) {
			return fmt.Errorf("shard %s: written as partition %s=%s, found under %s=%s: the file was copied or moved; its rows belong to %s=%s",
				r.path, c.field.Name, w, c.field.Name, c.value, c.field.Name, w)
		}
	}
	// GetRecordReader returns fields in the order of their first leaf in cols,
	// so file columns come out in want's order.
	md := want.Metadata()
	r.schema = arrow.NewSchema(fields, &md)
	r.cols = cols
	r.consts = consts
	return nil
}

// constCol is a partition column (or a column of nulls) the reader adds to
// each batch.
type constCol struct {
	idx   int // in the output schema
	field arrow.Field
	value string
	null  bool // a field newer than the file: all nulls
}

// leafColumns returns the Parquet leaf column indices under top-level field i.
func (r *ShardReader) leafColumns(i int) ([]int, error) {
	m := r.fr.Manifest
	if i >= len(m.Fields) {
		return nil, fmt.Errorf("field %d not in the Parquet schema", i)
	}
	var out []int
	var walk func(sf *pqarrow.SchemaField)
	walk = func(sf *pqarrow.SchemaField) {
		if sf.IsLeaf() {
			out = append(out, sf.ColIndex)
			return
		}
		for k := range sf.Children {
			walk(&sf.Children[k])
		}
	}
	walk(&m.Fields[i])
	return out, nil
}

// Path is the file being read.
func (r *ShardReader) Path() string { return r.path }

// Schema is the schema of the batches the reader returns.
func (r *ShardReader) Schema() *arrow.Schema { return r.schema }

// NumRows is the file's row count, from its footer.
func (r *ShardReader) NumRows() int64 { return r.pf.NumRows() }

// NumRowGroups is the file's row group count.
func (r *ShardReader) NumRowGroups() int { return r.pf.NumRowGroups() }

// Metadata returns the footer's key-value metadata (which includes the
// evolm.* provenance keys and ARROW:schema).
func (r *ShardReader) Metadata() map[string]string {
	kv := r.pf.MetaData().KeyValueMetadata()
	out := make(map[string]string, kv.Len())
	for i, k := range kv.Keys() {
		out[k] = kv.Values()[i]
	}
	return out
}

// ParquetReader exposes the underlying file reader (row group metadata,
// statistics) for inspection tools.
func (r *ShardReader) ParquetReader() *file.Reader { return r.pf }

// RecordReader returns a reader over the file's batches. The caller releases
// it; batches obtained from it are valid until the next call to Next.
func (r *ShardReader) RecordReader(ctx context.Context) (array.RecordReader, error) {
	rr, err := r.fr.GetRecordReader(ctx, r.cols, nil)
	if err != nil {
		return nil, fmt.Errorf("shard %s: %w", r.path, err)
	}
	return &namedReader{RecordReader: rr, path: r.path, mem: r.mem, schema: r.schema, consts: r.consts}, nil
}

// Batches iterates over the file's batches. A yielded batch is valid only
// during the loop body; Retain it to keep it. The sequence ends after the
// first error, which names the file.
func (r *ShardReader) Batches(ctx context.Context) iter.Seq2[arrow.RecordBatch, error] {
	return func(yield func(arrow.RecordBatch, error) bool) {
		rr, err := r.RecordReader(ctx)
		if err != nil {
			yield(nil, err)
			return
		}
		defer rr.Release()
		for rr.Next() {
			if err := ctx.Err(); err != nil {
				yield(nil, fmt.Errorf("shard %s: %w", r.path, err))
				return
			}
			if !yield(rr.RecordBatch(), nil) {
				return
			}
		}
		if err := rr.Err(); err != nil {
			yield(nil, err)
		}
	}
}

// Close releases the file. It is safe to call twice.
func (r *ShardReader) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	return r.pf.Close()
}

// ReadShard opens path, yields its batches and closes it: the one-liner for a
// stage that streams a shard.
func ReadShard(ctx context.Context, path string, opts ReadOptions) iter.Seq2[arrow.RecordBatch, error] {
	return func(yield func(arrow.RecordBatch, error) bool) {
		r, err := OpenShard(path, opts)
		if err != nil {
			yield(nil, err)
			return
		}
		defer r.Close()
		for rec, err := range r.Batches(ctx) {
			if !yield(rec, err) || err != nil {
				return
			}
		}
	}
}

// namedReader adds the file name to errors, hides io.EOF, turns decoder
// panics on corrupt pages into errors and adds partition columns.
type namedReader struct {
	pqarrow.RecordReader
	path   string
	err    error
	mem    memory.Allocator
	schema *arrow.Schema
	consts []constCol
	cur    arrow.RecordBatch // owned; only with consts
	rows   int64             // rows returned so far, for error messages
}

func (n *namedReader) Schema() *arrow.Schema {
	if len(n.consts) > 0 {
		return n.schema
	}
	return n.RecordReader.Schema()
}

func (n *namedReader) Next() (ok bool) {
	if n.cur != nil {
		n.cur.Release()
		n.cur = nil
	}
	if n.err != nil {
		return false
	}
	defer func() {
		if p := recover(); p != nil {
			n.err = fmt.Errorf("shard %s: corrupt data after row %d: %v", n.path, n.rows, p)
			ok = false
		}
	}()
	if !n.RecordReader.Next() {
		return false
	}
	rec := n.RecordReader.RecordBatch()
	n.rows += rec.NumRows()
	if len(n.consts) == 0 {
		return true
	}
	rows := int(rec.NumRows())
	cols := make([]arrow.Array, n.schema.NumFields())
	var owned []arrow.Array
	defer func() {
		for _, a := range owned {
			a.Release()
		}
	}()
	for _, c := range n.consts {
		if c.null {
			a := array.MakeArrayOfNull(n.mem, c.field.Type, rows)
			owned = append(owned, a)
			cols[c.idx] = a
			continue
		}
		a, err := constColumn(n.mem, c.field.Type, c.value, rows)
		if err != nil {
			n.err = fmt.Errorf("shard %s: column %q: %w", n.path, c.field.Name, err)
			return false
		}
		owned = append(owned, a)
		cols[c.idx] = a
	}
	next := 0
	for i := range cols {
		if cols[i] == nil {
			cols[i] = rec.Column(next)
			next++
		}
	}
	n.cur = array.NewRecordBatch(n.schema, cols, int64(rows))
	return true
}

func (n *namedReader) RecordBatch() arrow.RecordBatch {
	if len(n.consts) > 0 {
		return n.cur
	}
	return n.RecordReader.RecordBatch()
}

//lint:ignore SA1019 arrow's RecordReader interface still has Record
func (n *namedReader) Record() arrow.RecordBatch { return n.RecordBatch() }

func (n *namedReader) Err() error {
	if n.err != nil {
		return n.err
	}
	err := n.RecordReader.Err()
	if err == nil || errors.Is(err, io.EOF) {
		return nil
	}
	return fmt.Errorf("shard %s: after row %d: %w", n.path, n.rows, err)
}

func (n *namedReader) Release() {
	if n.cur != nil {
		n.cur.Release()
		n.cur = nil
	}
	n.RecordReader.Release()
}
