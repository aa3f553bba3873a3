package pipeline

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/apache/arrow-go/v18/arrow/array"
)

// InspectOptions configure Inspect.
type InspectOptions struct {
	Rows int // first rows shown of a file
	// Verify checks the sha256 of every committed shard of a run against its
	// manifest, lists every stray file (in no manifest) under its tables, and
	// follows the references between its tables (every judgment's response
	// and rubric, every pair's rollouts, every rubric's generation and pair
	// exist), reporting dangling ones by table, column and count.
	Verify bool
}

// Inspect writes a human-readable description of path to w. For a Parquet
// file: size, rows, row groups, Arrow schema, key-value metadata and its
// first rows as JSON lines. For a directory (a run, a table or any tree of
// shards): its manifests, and per table and partition the shard and row
// counts, plus shards no manifest lists and stale temp files. Every
// committed shard of a run is checked against its manifest (Run.CheckShard,
// or Run.VerifyShard with opts.Verify): a shard that is missing, swapped,
// edited or found under another partition than it was written for is
// listed and makes Inspect return an error wrapping ErrShardMismatch. With
// opts.Verify a dangling reference between tables is an error wrapping
// ErrDanglingReference.
func Inspect(ctx context.Context, w io.Writer, path string, opts InspectOptions) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("inspect: %w", err)
	}
	if st.IsDir() {
		return inspectDir(ctx, w, path, opts.Verify)
	}
	return inspectFile(ctx, w, path, st.Size(), opts.Rows)
}

func inspectFile(ctx context.Context, w io.Writer, path string, size int64, n int) error {
	r, err := OpenShard(path, ReadOptions{BatchSize: int64(max(n, 1))})
	if err != nil {
		return err
	}
	defer r.Close()
	pf := r.ParquetReader()
	md := pf.MetaData()
	fmt.Fprintf(w, "file:       %s\n", path)
	fmt.Fprintf(w, "size:       %d bytes\n", size)
	fmt.Fprintf(w, "rows:       %d\n", r.NumRows())
	fmt.Fprintf(w, "created by: %s\n", md.GetCreatedBy())
	fmt.Fprintf(w, "row groups: %d\n", r.NumRowGroups())
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	for i := 0; i < r.NumRowGroups(); i++ {
		rg := md.RowGroup(i)
		fmt.Fprintf(tw, "  #%d\t%d rows\t%d bytes compressed\t%d uncompressed\n", i, rg.NumRows(), rg.TotalCompressedSize(), rg.TotalByteSize())
	}
	tw.Flush()
	if parts := PathPartitions(path); len(parts) > 0 {
		var ps []string
		for _, p := range parts {
			ps = append(ps, p.String())
		}
		fmt.Fprintf(w, "partitions: %s (columns of these names live in the path, not the file)\n", strings.Join(ps, ", "))
	}
	fmt.Fprintln(w, "schema:")
	for _, f := range r.Schema().Fields() {
		null := ""
		if f.Nullable {
			null = " (nullable)"
		}
		fmt.Fprintf(w, "  %s: %s%s\n", f.Name, f.Type, null)
	}
	kv := r.Metadata()
	keys := slices.Sorted(maps.Keys(kv))
	fmt.Fprintln(w, "metadata:")
	for _, k := range keys {
		v := kv[k]
		if k == "ARROW:schema" {
			v = fmt.Sprintf("(%d bytes, base64 Arrow IPC schema)", len(v))
		}
		fmt.Fprintf(w, "  %s: %s\n", k, v)
	}
	if n <= 0 {
		return nil
	}
	fmt.Fprintf(w, "first %d rows:\n", min(int64(n), r.NumRows()))
	left := int64(n)
	for rec, err := range r.Batches(ctx) {
		if err != nil {
			return err
		}
		take := min(left, rec.NumRows())
		s := rec.NewSlice(0, take)
		err := array.RecordToJSON(s, w)
		s.Release()
		if err != nil {
			return fmt.Errorf("inspect %s: %w", path, err)
		}
		if left -= take; left <= 0 {
			break
		}
	}
	return nil
}
