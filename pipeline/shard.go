package pipeline

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"iter"
	"os"
	"path/filepath"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/evolm/evolm/schemas"
)

// Provenance keys in every shard's Parquet footer key-value metadata. The
// table name and schema version travel in the stored Arrow schema's metadata
// (see package schemas).
const (
	MetaStage       = "evolm.stage"        // stage that wrote the shard
	MetaConfigHash  = "evolm.config_hash"  // Config.Hash of the writing stage's section
	MetaCodeVersion = "evolm.code_version" // CodeVersion() of the writer
	MetaInputs      = "evolm.inputs"       // JSON list of input fingerprints

	// MetaPartitions is the JSON object {column: value} of the partition
	// columns the writer took out of the file: a reader that puts them back
	// from the path checks the path still says the same (a shard copied or
	// moved to another step=… directory would otherwise change its rows).
	MetaPartitions = "evolm.partitions"
)

// TempSuffix ends the name of every shard (and manifest) being written. Temp
// files also start with ".", so pyarrow, Spark and `*.parquet` globs skip them.
const TempSuffix = ".tmp"

// Provenance says where a shard came from. It is written into the shard's
// key-value metadata.
type Provenance struct {
	Stage       string   `json:"stage"`
	ConfigHash  string   `json:"config_hash"`
	CodeVersion string   `json:"code_version"`
	Inputs      []string `json:"inputs,omitempty"` // fingerprints, see Fingerprint
}

// WriteOptions configure a ShardWriter. The zero value is usable.
type WriteOptions struct {
	Mem          memory.Allocator // nil: memory.DefaultAllocator
	Provenance   Provenance
	RowGroupRows int64 // rows per row group; 0: 128Ki
	// CompressionLevel for zstd; 0: the codec's default.
	CompressionLevel int
}

// ShardInfo describes a committed shard.
type ShardInfo struct {
	Path   string `json:"path"` // slash-separated, relative to the run directory when committed through a Run
	Rows   int64  `json:"rows"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
	// TailSHA256 is the sha256 of the file's last 64 KiB (footer and last
	// pages): the cheap identity CheckShard compares. Empty in manifests
	// written before it existed.
	TailSHA256 string `json:"tail_sha256,omitempty"`
	// Inputs is the fingerprint of the task's inputs; resume compares it.
	Inputs string `json:"inputs,omitempty"`
}

// ShardWriter streams record batches into one Parquet shard. It writes to a
// hidden temp file in the destination directory; Commit makes the shard
// visible atomically, Abort removes it. Exactly one of them must be called;
// calling either again is a no-op. A ShardWriter is not safe for concurrent use.
type ShardWriter struct {
	path, tmp string
	schema    *arrow.Schema // what Write accepts
	stored    *arrow.Schema // what the file holds: schema less partition columns
	dropped   []int         // indices in schema of partition columns
	values    []string      // their partition values
	f         *os.File
	buf       *bufio.Writer
	sink      *hashingWriter
	fw        *pqarrow.FileWriter
	rows      int64
	done      bool
	progress  *Progress // counts written rows; nil: none
}

// hashingWriter hashes and counts what goes to the file. It has no Close on
// purpose: pqarrow closes a sink that is an io.Closer, and we fsync first.
type hashingWriter struct {
	w io.Writer
	h hash.Hash
	n int64
}

func (h *hashingWriter) Write(p []byte) (int, error) {
	n, err := h.w.Write(p)
	h.h.Write(p[:n])
	h.n += int64(n)
	return n, err
}

// CreateShard starts a shard that will appear at path on Commit. The schema
// (with its metadata: table name, schema version) is stored in the file; the
// provenance in opts goes to the footer's key-value metadata. Parent
// directories are created. Columns named like a Hive partition of path
// (phase=policy/...) are checked and not stored; see PathPartitions.
func CreateShard(path string, schema *arrow.Schema, opts WriteOptions) (*ShardWriter, error) {
	stored, dropped, values, err := fileSchema(schema, partitionMap(PathPartitions(path)))
	if err != nil {
		return nil, fmt.Errorf("shard %s: %w", path, err)
	}
	mem := opts.Mem
	if mem == nil {
		mem = memory.DefaultAllocator
	}
	rg := opts.RowGroupRows
	if rg <= 0 {
		rg = 128 * 1024
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("shard %s: %w", path, err)
	}
	f, err := createTemp(dir, filepath.Base(path))
	if err != nil {
		return nil, fmt.Errorf("shard %s: %w", path, err)
	}
	tmp := f.Name()
	level := opts.CompressionLevel
	if level == 0 {
		level = compress.DefaultCompressionLevel
	}
	props := parquet.NewWriterProperties(
		parquet.WithAllocator(mem),
		parquet.WithCompression(compress.Codecs.Zstd),
		parquet.WithCompressionLevel(level),
		parquet.WithDictionaryDefault(true),
		parquet.WithStats(true),
		parquet.WithMaxRowGroupLength(rg),
		parquet.WithCreatedBy("evolm "+CodeVersion()),
	)
	arrProps := pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema(), pqarrow.WithAllocator(mem))
	buf := bufio.NewWriterSize(f, 1<<20)
	sink := &hashingWriter{w: buf, h: sha256.New()}
	fw, err := pqarrow.NewFileWriter(stored, sink, props, arrProps)
	if err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("shard %s: %w", path, err)
	}
	inputs, _ := json.Marshal(append([]string{}, opts.Provenance.Inputs...))
	kv := [][2]string{
		{MetaStage, opts.Provenance.Stage},
		{MetaConfigHash, opts.Provenance.ConfigHash},
		{MetaCodeVersion, orDefault(opts.Provenance.CodeVersion, CodeVersion())},
		{MetaInputs, string(inputs)},
	}
	if len(dropped) > 0 {
		pm := map[string]string{}
		for k, ci := range dropped {
			pm[schema.Field(ci).Name] = values[k]
		}
		b, _ := json.Marshal(pm)
		kv = append(kv, [2]string{MetaPartitions, string(b)})
	}
	for _, p := range kv {
		if err := fw.AppendKeyValueMetadata(p[0], p[1]); err != nil {
			f.Close()
			os.Remove(tmp)
			return nil, fmt.Errorf("shard %s: metadata %s: %w", path, p[0], err)
		}
	}
	return &ShardWriter{path: path, tmp: tmp, schema: schema, stored: stored, dropped: dropped, values: values, f: f, buf: buf, sink: sink, fw: fw}, nil
}

// Path is where the shard appears on Commit.
func (w *ShardWriter) Path() string { return w.path }

// Schema is the shard's schema; every batch written must match it.
func (w *ShardWriter) Schema() *arrow.Schema { return w.schema }

// Rows is the number of rows written so far.
func (w *ShardWriter) Rows() int64 { return w.rows }

// Write appends a batch. Its schema must equal the shard's (field names and
// types; metadata is ignored), and its partition columns must hold the
// partition's value in every row. The caller keeps its reference to rec.
func (w *ShardWriter) Write(rec arrow.RecordBatch) error {
	if w.done {
		return fmt.Errorf("shard %s: write after commit or abort", w.path)
	}
	if err := schemas.CheckSchema(w.schema, rec.Schema()); err != nil {
		return fmt.Errorf("shard %s: batch schema: %w", w.path, err)
	}
	if len(w.dropped) > 0 {
		drop := map[int]bool{}
		for k, ci := range w.dropped {
			drop[ci] = true
			col := rec.Column(ci)
			for i := range col.Len() {
				if !partitionValueOK(col, i, w.values[k]) {
					return fmt.Errorf("shard %s: column %q row %d is %s, not the partition's %s",
						w.path, w.schema.Field(ci).Name, w.rows+int64(i), col.ValueStr(i), w.values[k])
				}
			}
		}
		cols := make([]arrow.Array, 0, w.stored.NumFields())
		for i, c := range rec.Columns() {
			if !drop[i] {
				cols = append(cols, c)
			}
		}
		rec = array.NewRecordBatch(w.stored, cols, rec.NumRows())
		defer rec.Release()
	} else if !rec.Schema().Equal(w.stored) {
		// Batches read from Parquet carry field metadata and "element" list
		// names; pqarrow wants the writer's schema exactly.
		rec = array.NewRecordBatch(w.stored, rec.Columns(), rec.NumRows())
		defer rec.Release()
	}
	if err := w.fw.WriteBuffered(rec); err != nil {
		return fmt.Errorf("shard %s: write at row %d: %w", w.path, w.rows, err)
	}
	w.rows += rec.NumRows()
	if w.progress != nil {
		w.progress.Add(rec.NumRows())
	}
	return nil
}

// Commit finishes the file, fsyncs it, renames it to its final path and
// fsyncs the directory. After a crash at any point the final path holds
// either nothing (or the previous complete shard) or the complete new one.
func (w *ShardWriter) Commit() (ShardInfo, error) {
	if w.done {
		return ShardInfo{}, fmt.Errorf("shard %s: already committed or aborted", w.path)
	}
	w.done = true
	fail := func(err error) (ShardInfo, error) {
		w.f.Close()
		os.Remove(w.tmp)
		return ShardInfo{}, fmt.Errorf("shard %s: commit: %w", w.path, err)
	}
	if err := w.fw.Close(); err != nil {
		return fail(err)
	}
	if err := w.buf.Flush(); err != nil {
		return fail(err)
	}
	if err := w.f.Sync(); err != nil {
		return fail(err)
	}
	tail, err := tailHash(w.f, w.sink.n)
	if err != nil {
		return fail(err)
	}
	// Rename while the temp file is still open, so its flock keeps a
	// concurrent CleanTemp away until it has its final name.
	if err := os.Rename(w.tmp, w.path); err != nil {
		return fail(err)
	}
	if err := w.f.Close(); err != nil {
		return ShardInfo{}, fmt.Errorf("shard %s: commit: %w", w.path, err)
	}
	if err := syncDir(filepath.Dir(w.path)); err != nil {
		return ShardInfo{}, fmt.Errorf("shard %s: commit: %w", w.path, err)
	}
	return ShardInfo{Path: w.path, Rows: w.rows, Bytes: w.sink.n, SHA256: hex.EncodeToString(w.sink.h.Sum(nil)), TailSHA256: tail}, nil
}

// Abort discards the shard: nothing appears at Path. It is safe to call after
// Commit (it then does nothing), so `defer w.Abort()` is the usual pattern.
func (w *ShardWriter) Abort() error {
	if w.done {
		return nil
	}
	w.done = true
	w.fw.Close() // releases buffers; the data goes nowhere
	err := os.Remove(w.tmp)
	w.f.Close()
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("shard %s: abort: %w", w.path, err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

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
		if w, ok := written[c.field.Name]; ok && w != c.value {
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

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
