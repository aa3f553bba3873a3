package pipeline

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/apache/arrow-go/v18/arrow/array"
)

// InspectOptions configure Inspect.
type InspectOptions struct {
	Rows int // first rows shown of a file
	// Verify checks the sha256 of every committed shard of a run against its
	// manifest and lists every stray file (in no manifest) under its tables.
	Verify bool
}

// Inspect writes a human-readable description of path to w. For a Parquet
// file: size, rows, row groups, Arrow schema, key-value metadata and its
// first rows as JSON lines. For a directory (a run, a table or any tree of
// shards): its manifests, and per table and partition the shard and row
// counts, plus shards no manifest lists and stale temp files. Every
// committed shard of a run is checked against its manifest (Run.CheckShard,
// or Run.VerifyShard with opts.Verify): a shard that is missing, swapped or
// edited is listed and makes Inspect return an error wrapping
// ErrShardMismatch.
func Inspect(ctx context.Context, w io.Writer, path string, opts InspectOptions) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("inspect: %w", err)
	}
	if st.IsDir() {
		return inspectDir(w, path, opts.Verify)
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

type partStats struct {
	files int
	rows  int64
	bytes int64
}

func inspectDir(w io.Writer, dir string, verify bool) error {
	committed := map[string]bool{} // absolute path → listed in a manifest
	var listed []ShardInfo
	run := &Run{Dir: dir}
	mdir := filepath.Join(dir, "_manifests")
	if ents, err := os.ReadDir(mdir); err == nil {
		fmt.Fprintf(w, "run: %s\nmanifests:\n", dir)
		for _, e := range ents {
			if e.IsDir() || !strings.HasSuffix(e.Name(), ".json") {
				continue
			}
			m, err := run.Manifest(strings.TrimSuffix(e.Name(), ".json"))
			if err != nil {
				return err
			}
			fmt.Fprintf(w, "  %s: %d shards, %d rows, config %s, code %s, updated %s\n",
				m.Stage, len(m.Shards), m.Rows(""), m.ConfigHash, m.CodeVersion, m.Updated.Format("2006-01-02 15:04:05Z"))
			for _, s := range m.Shards {
				committed[filepath.Clean(run.Path(s.Path))] = true
				listed = append(listed, s)
			}
		}
	}
	parts := map[string]*partStats{} // "table/k=v/..." → stats
	var uncommitted, temps, checkpoints, strays []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != dir && (strings.HasPrefix(d.Name(), "_") || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			if filepath.Dir(p) == filepath.Clean(dir) && d.Name() == "checkpoints" {
				// Training state (HF model dirs, optimizer, replay buffer), not tables.
				ents, _ := os.ReadDir(p)
				for _, e := range ents {
					if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
						checkpoints = append(checkpoints, e.Name())
					}
				}
				return filepath.SkipDir
			}
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		if IsTemp(d.Name()) {
			temps = append(temps, rel)
			return nil
		}
		if !strings.HasSuffix(d.Name(), ".parquet") {
			if len(committed) > 0 && filepath.Dir(p) != filepath.Clean(dir) {
				strays = append(strays, rel)
			}
			return nil
		}
		r, err := OpenShard(p, ReadOptions{})
		if err != nil {
			return err
		}
		n := r.NumRows()
		r.Close()
		info, _ := d.Info()
		key := filepath.ToSlash(filepath.Dir(rel))
		ps := parts[key]
		if ps == nil {
			ps = &partStats{}
			parts[key] = ps
		}
		ps.files++
		ps.rows += n
		if info != nil {
			ps.bytes += info.Size()
		}
		if len(committed) > 0 && !committed[filepath.Clean(p)] {
			uncommitted = append(uncommitted, rel)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("inspect %s: %w", dir, err)
	}
	keys := slices.Sorted(maps.Keys(parts))
	tables := map[string]*partStats{}
	var order []string
	for _, k := range keys {
		t := strings.SplitN(k, "/", 2)[0]
		if tables[t] == nil {
			tables[t] = &partStats{}
			order = append(order, t)
		}
		tables[t].files += parts[k].files
		tables[t].rows += parts[k].rows
		tables[t].bytes += parts[k].bytes
	}
	if len(keys) == 0 {
		fmt.Fprintf(w, "no Parquet shards under %s\n", dir)
	} else {
		fmt.Fprintln(w, "tables:")
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	for _, t := range order {
		ts := tables[t]
		fmt.Fprintf(tw, "  %s\t%d shards\t%d rows\t%d bytes\t\n", t, ts.files, ts.rows, ts.bytes)
		for _, k := range keys {
			if k == t || !strings.HasPrefix(k, t+"/") {
				continue
			}
			ps := parts[k]
			fmt.Fprintf(tw, "    %s\t%d shards\t%d rows\t%d bytes\t\n", strings.TrimPrefix(k, t+"/"), ps.files, ps.rows, ps.bytes)
		}
	}
	tw.Flush()
	if len(checkpoints) > 0 {
		fmt.Fprintf(w, "checkpoints: %s\n", strings.Join(checkpoints, ", "))
	}
	if len(uncommitted) > 0 {
		fmt.Fprintf(w, "shards in no manifest (written but not recorded; a rerun redoes them):\n  %s\n", strings.Join(uncommitted, "\n  "))
	}
	if len(temps) > 0 {
		fmt.Fprintf(w, "temp files (of a live writer, or stale: removed when their stage reruns):\n  %s\n", strings.Join(temps, "\n  "))
	}
	if verify {
		strays = append(strays, uncommitted...)
		sort.Strings(strays)
		if len(strays) > 0 {
			fmt.Fprintf(w, "stray files (in no manifest, besides temp files):\n  %s\n", strings.Join(strays, "\n  "))
		} else {
			fmt.Fprintln(w, "stray files: none")
		}
	}
	var bad []string
	for _, s := range listed {
		check := run.CheckShard
		if verify {
			check = run.VerifyShard
		}
		if err := check(s); err != nil {
			bad = append(bad, err.Error())
		}
	}
	what := "checked (size, tail sha256, rows)"
	if verify {
		what = "verified (sha256, rows)"
	}
	if len(bad) > 0 {
		fmt.Fprintf(w, "shards that do not match their manifest:\n  %s\n", strings.Join(bad, "\n  "))
		return fmt.Errorf("inspect %s: %d of %d committed shards do not match their manifest (%w)", dir, len(bad), len(listed), ErrShardMismatch)
	}
	if len(listed) > 0 {
		fmt.Fprintf(w, "committed shards %s: %d, all match their manifest\n", what, len(listed))
	}
	return nil
}
