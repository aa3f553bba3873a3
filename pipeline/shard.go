package pipeline

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
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
	// EncodeWorkers is how many columns are encoded at once; 0: GOMAXPROCS.
	// The file is the same for any value.
	EncodeWorkers int
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
	fw        parquetWriter
	rows      int64
	done      bool
	progress  *Progress // counts written rows; nil: none
	advanced  int64     // rows reported by Advance and not yet written
}

// Advance reports n rows of the shard done before they are written (a model
// stage's finished requests), so that progress moves while a long batch is
// computed; Write then counts only the rows beyond those advanced.
func (w *ShardWriter) Advance(n int64) {
	if w.progress == nil || n <= 0 {
		return
	}
	w.advanced += n
	w.progress.Add(n)
}

// parquetWriter is what ShardWriter needs of pqarrow.FileWriter, which
// columnWriter also is.
type parquetWriter interface {
	WriteBuffered(arrow.RecordBatch) error
	AppendKeyValueMetadata(key, value string) error
	Close() error
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
	return createShard(path, schema, opts, false)
}

// createShard is CreateShard; withPqarrow writes through pqarrow.FileWriter
// even where columnWriter could (the tests compare the two).
func createShard(path string, schema *arrow.Schema, opts WriteOptions, withPqarrow bool) (*ShardWriter, error) {
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
	var fw parquetWriter
	if parallelWritable(stored) && !withPqarrow {
		fw, err = newColumnWriter(stored, sink, props, arrProps, opts.EncodeWorkers)
	} else {
		fw, err = pqarrow.NewFileWriter(stored, sink, props, arrProps)
	}
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
		credit := min(rec.NumRows(), w.advanced)
		w.advanced -= credit
		w.progress.Add(rec.NumRows() - credit)
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
	if err := SyncDir(filepath.Dir(w.path)); err != nil {
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

// SyncDir fsyncs directory dir, so that the entries renamed or created in
// it survive a crash.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
