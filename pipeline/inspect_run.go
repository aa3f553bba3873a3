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
)

type partStats struct {
	files int
	rows  int64
	bytes int64
}

// runScan is what inspectDir finds in a directory tree.
type runScan struct {
	committed                               map[string]bool // absolute path → listed in a manifest
	listed                                  []ShardInfo
	parts                                   map[string]*partStats // "table/k=v/..." → stats
	uncommitted, temps, checkpoints, strays []string
}

// inspectDir describes a run (or any tree of shards): its manifests, per
// table and partition the shards and rows, files no manifest lists, and the
// check of every committed shard against its manifest; with verify, the
// full sha256 of each, stray files and the references between tables.
func inspectDir(ctx context.Context, w io.Writer, dir string, verify bool) error {
	run := &Run{Dir: dir}
	sc := &runScan{committed: map[string]bool{}, parts: map[string]*partStats{}}
	if err := sc.manifests(w, run); err != nil {
		return err
	}
	if err := sc.walk(dir); err != nil {
		return fmt.Errorf("inspect %s: %w", dir, err)
	}
	sc.printTables(w, dir)
	sc.printFiles(w, verify)
	var bad []string
	for _, s := range sc.listed {
		check := run.CheckShard
		if verify {
			check = run.VerifyShard
		}
		if err := check(s); err != nil {
			bad = append(bad, err.Error())
		}
	}
	what := "checked (size, tail sha256, rows, partition)"
	if verify {
		what = "verified (sha256, rows, partition)"
	}
	if len(bad) > 0 {
		fmt.Fprintf(w, "shards that do not match their manifest:\n  %s\n", strings.Join(bad, "\n  "))
		return fmt.Errorf("inspect %s: %d of %d committed shards do not match their manifest (%w)", dir, len(bad), len(sc.listed), ErrShardMismatch)
	}
	if len(sc.listed) > 0 {
		fmt.Fprintf(w, "committed shards %s: %d, all match their manifest\n", what, len(sc.listed))
	}
	if verify && len(sc.listed) > 0 {
		if err := checkReferences(ctx, w, run); err != nil {
			return fmt.Errorf("inspect %s: %w", dir, err)
		}
	}
	return nil
}

// manifests lists the run's manifests and records their shards.
func (sc *runScan) manifests(w io.Writer, run *Run) error {
	ents, err := os.ReadDir(filepath.Join(run.Dir, "_manifests"))
	if err != nil {
		return nil // not a run: a tree of shards
	}
	fmt.Fprintf(w, "run: %s\nmanifests:\n", run.Dir)
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
			sc.committed[filepath.Clean(run.Path(s.Path))] = true
			sc.listed = append(sc.listed, s)
		}
	}
	return nil
}

// walk counts the Parquet files under dir by partition and collects temp,
// uncommitted and stray files and the checkpoints.
func (sc *runScan) walk(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return sc.dir(dir, p, d)
		}
		rel, _ := filepath.Rel(dir, p)
		if IsTemp(d.Name()) {
			sc.temps = append(sc.temps, rel)
			return nil
		}
		if !strings.HasSuffix(d.Name(), ".parquet") {
			if len(sc.committed) > 0 && filepath.Dir(p) != filepath.Clean(dir) {
				sc.strays = append(sc.strays, rel)
			}
			return nil
		}
		r, err := OpenShard(p, ReadOptions{})
		if err != nil {
			return err
		}
		n := r.NumRows()
		r.Close()
		key := filepath.ToSlash(filepath.Dir(rel))
		ps := sc.parts[key]
		if ps == nil {
			ps = &partStats{}
			sc.parts[key] = ps
		}
		ps.files++
		ps.rows += n
		if info, err := d.Info(); err == nil {
			ps.bytes += info.Size()
		}
		if len(sc.committed) > 0 && !sc.committed[filepath.Clean(p)] {
			sc.uncommitted = append(sc.uncommitted, rel)
		}
		return nil
	})
}

// dir decides whether walk enters directory p: not the run's own folders
// (_manifests, _fresh, …) nor hidden ones; the checkpoints are listed, not
// walked.
func (sc *runScan) dir(root, p string, d fs.DirEntry) error {
	if p != root && (strings.HasPrefix(d.Name(), "_") || strings.HasPrefix(d.Name(), ".")) {
		return filepath.SkipDir
	}
	if filepath.Dir(p) == filepath.Clean(root) && d.Name() == "checkpoints" {
		// Training state (HF model dirs, optimizer, replay buffer), not tables.
		ents, _ := os.ReadDir(p)
		for _, e := range ents {
			if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
				sc.checkpoints = append(sc.checkpoints, e.Name())
			}
		}
		return filepath.SkipDir
	}
	return nil
}

// printTables writes the shard, row and byte counts per table and partition.
func (sc *runScan) printTables(w io.Writer, dir string) {
	keys := slices.Sorted(maps.Keys(sc.parts))
	tables := map[string]*partStats{}
	var order []string
	for _, k := range keys {
		t := strings.SplitN(k, "/", 2)[0]
		if tables[t] == nil {
			tables[t] = &partStats{}
			order = append(order, t)
		}
		tables[t].files += sc.parts[k].files
		tables[t].rows += sc.parts[k].rows
		tables[t].bytes += sc.parts[k].bytes
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
			ps := sc.parts[k]
			fmt.Fprintf(tw, "    %s\t%d shards\t%d rows\t%d bytes\t\n", strings.TrimPrefix(k, t+"/"), ps.files, ps.rows, ps.bytes)
		}
	}
	tw.Flush()
}

// printFiles writes the checkpoints and the files no manifest lists.
func (sc *runScan) printFiles(w io.Writer, verify bool) {
	if len(sc.checkpoints) > 0 {
		fmt.Fprintf(w, "checkpoints: %s\n", strings.Join(sc.checkpoints, ", "))
	}
	if len(sc.uncommitted) > 0 {
		fmt.Fprintf(w, "shards in no manifest (written but not recorded; a rerun redoes them):\n  %s\n", strings.Join(sc.uncommitted, "\n  "))
	}
	if len(sc.temps) > 0 {
		fmt.Fprintf(w, "temp files (of a live writer, or stale: removed when their stage reruns):\n  %s\n", strings.Join(sc.temps, "\n  "))
	}
	if !verify {
		return
	}
	strays := append(slices.Clone(sc.strays), sc.uncommitted...)
	sort.Strings(strays)
	if len(strays) > 0 {
		fmt.Fprintf(w, "stray files (in no manifest, besides temp files):\n  %s\n", strings.Join(strays, "\n  "))
	} else {
		fmt.Fprintln(w, "stray files: none")
	}
}
