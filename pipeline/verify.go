package pipeline

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// tailBytes is how much of a shard's end TailSHA256 covers: the Parquet
// footer (schema, row groups with their statistics and offsets, provenance)
// and the last pages, which tell two shards apart at the cost of one read.
const tailBytes = 64 << 10

// ErrShardMismatch is wrapped by the errors of CheckShard and VerifyShard:
// a committed shard's file is missing, or is not the file its manifest
// recorded (swapped, edited, truncated), or the manifest was edited.
var ErrShardMismatch = errors.New("shard does not match its manifest")

// tailHash returns the hex sha256 of the last tailBytes of the file of size
// size read through r.
func tailHash(r io.ReaderAt, size int64) (string, error) {
	n := min(size, tailBytes)
	buf := make([]byte, n)
	if _, err := r.ReadAt(buf, size-n); err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	h := sha256.Sum256(buf)
	return hex.EncodeToString(h[:]), nil
}

// CheckShard checks the file of a committed shard against its manifest
// entry, cheaply: the file exists with the recorded size, the sha256 of its
// tail (footer and last pages; manifests written before it was recorded
// skip this) and the row count of its footer are the recorded ones. Readers
// of committed shards call it (stage inputs, export, inspect), so that a
// shard swapped for another, deleted or edited, or a manifest whose row
// count was edited, is an error naming the file and not a silent wrong
// result. The error wraps ErrShardMismatch.
func (r *Run) CheckShard(info ShardInfo) error {
	p := r.Path(info.Path)
	f, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("shard %s: committed in the manifest but the file is gone (%w): rerun its stage with --fresh", p, ErrShardMismatch)
	}
	if err != nil {
		return fmt.Errorf("shard %s: %w", p, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("shard %s: %w", p, err)
	}
	if st.Size() != info.Bytes {
		return fmt.Errorf("shard %s: %d bytes, the manifest recorded %d (%w): the file was replaced or edited; rerun its stage with --fresh",
			p, st.Size(), info.Bytes, ErrShardMismatch)
	}
	if info.TailSHA256 != "" {
		h, err := tailHash(f, st.Size())
		if err != nil {
			return fmt.Errorf("shard %s: %w", p, err)
		}
		if h != info.TailSHA256 {
			return fmt.Errorf("shard %s: content differs from the file the manifest recorded (%w): the file was replaced or edited; rerun its stage with --fresh",
				p, ErrShardMismatch)
		}
	}
	sr, err := OpenShard(p, ReadOptions{})
	if err != nil {
		return err
	}
	rows := sr.NumRows()
	perr := checkWrittenPartitions(sr.Metadata(), info.Path)
	sr.Close()
	if perr != nil {
		return fmt.Errorf("shard %s: %w (%w): rerun its stage with --fresh", p, perr, ErrShardMismatch)
	}
	if rows != info.Rows {
		return fmt.Errorf("shard %s: %d rows, the manifest recorded %d (%w): the file or the manifest was edited; rerun its stage with --fresh",
			p, rows, info.Rows, ErrShardMismatch)
	}
	return nil
}

// VerifyShard is CheckShard plus the sha256 of the whole file, as
// `evolm inspect --verify` runs it.
func (r *Run) VerifyShard(info ShardInfo) error {
	if err := r.CheckShard(info); err != nil {
		return err
	}
	p := r.Path(info.Path)
	fp, err := Fingerprint(p)
	if err != nil {
		return err
	}
	if fp != "sha256:"+info.SHA256 {
		return fmt.Errorf("shard %s: %s, the manifest recorded sha256:%s (%w): the file was replaced or edited; rerun its stage with --fresh",
			p, fp, info.SHA256, ErrShardMismatch)
	}
	return nil
}

// Committed returns every shard the run's manifests list, by run-relative
// path (a path two stages committed keeps the last manifest's entry in
// name order).
func (r *Run) Committed() (map[string]ShardInfo, error) {
	ms, err := r.manifests()
	if err != nil {
		return nil, err
	}
	out := map[string]ShardInfo{}
	for _, m := range ms {
		for _, s := range m.Shards {
			out[s.Path] = s
		}
	}
	return out, nil
}

// manifests loads every stage manifest in _manifests/, in name order; none
// when the directory does not exist.
func (r *Run) manifests() ([]*Manifest, error) {
	ents, err := os.ReadDir(filepath.Join(r.Dir, "_manifests"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("run %s: %w", r.Dir, err)
	}
	var out []*Manifest
	for _, e := range ents {
		name := e.Name()
		if e.IsDir() || strings.HasPrefix(name, ".") || !strings.HasSuffix(name, ".json") {
			continue
		}
		m, err := r.Manifest(strings.TrimSuffix(name, ".json"))
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

// committedIndex maps the file paths of a run's committed shards to their
// manifest entries, for checking stage inputs.
type committedIndex struct {
	mu     sync.Mutex
	loaded bool
	byPath map[string]ShardInfo // filepath.Clean(run.Path(rel)) → info
}

func (ix *committedIndex) load(runs ...*Run) error {
	ix.byPath = map[string]ShardInfo{}
	for _, run := range runs {
		all, err := run.Committed()
		if err != nil {
			return err
		}
		for rel, info := range all {
			ix.byPath[filepath.Clean(run.Path(rel))] = info
		}
	}
	ix.loaded = true
	return nil
}

// runs returns the run directories whose committed shards the env's inputs
// may be: the run, and the staging run the stage writes to (a stage that
// reads back its own output).
func (e *Env) runs() []*Run {
	if e.Out == nil || e.Out == e.Run {
		return []*Run{e.Run}
	}
	return []*Run{e.Run, e.Out}
}

// checkInput checks an input file whose fingerprint is fp: when it is a
// committed shard of the env's run, its sha256 and footer row count must be
// the manifest's. Files outside the run's manifests pass.
func (e *Env) checkInput(path, fp string) error {
	ix := &e.committed
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if !ix.loaded {
		if err := ix.load(e.runs()...); err != nil {
			return err
		}
	}
	key := filepath.Clean(path)
	info, ok := ix.byPath[key]
	if ok && fp != "sha256:"+info.SHA256 {
		// The shard may have been recommitted since the index was read.
		if err := ix.load(e.runs()...); err != nil {
			return err
		}
		info, ok = ix.byPath[key]
	}
	if !ok {
		return nil
	}
	if fp != "sha256:"+info.SHA256 {
		return fmt.Errorf("input shard %s: %s, the manifest recorded sha256:%s (%w): the file was replaced or edited; rerun the stage that wrote it with --fresh",
			path, fp, info.SHA256, ErrShardMismatch)
	}
	if e.rowsChecked == nil {
		e.rowsChecked = map[string]bool{}
	}
	if !e.rowsChecked[key+"\x00"+fp] {
		if err := e.runOf(key).CheckShard(info); err != nil {
			return err
		}
		e.rowsChecked[key+"\x00"+fp] = true
	}
	return nil
}

// runOf returns the run (of Env.runs) that file path p lies in.
func (e *Env) runOf(p string) *Run {
	if e.Out != nil && e.Out != e.Run && strings.HasPrefix(p, filepath.Clean(e.Out.Dir)+string(filepath.Separator)) {
		return e.Out
	}
	return e.Run
}
