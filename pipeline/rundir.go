package pipeline

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ManifestVersion is the version of the manifest JSON format.
const ManifestVersion = 1

// Partition is one Hive-style path component, key=value.
type Partition struct{ Key, Value string }

func (p Partition) String() string { return p.Key + "=" + p.Value }

// Phase is the phase partition: "policy" or "rubric".
func Phase(phase string) Partition { return Partition{"phase", phase} }

// Step is the step partition: the step in plain decimal (step=12), so that
// DuckDB, polars and pyarrow infer an integer column from the folder name
// (DuckDB reads a zero-padded "000012" as VARCHAR). Paths therefore do not
// sort by step as strings; readers order by the step column (TableShards
// does).
func Step(step int) Partition { return Partition{"step", strconv.Itoa(step)} }

// ShardName is the file name of the i-th shard of a partition.
func ShardName(i int) string { return fmt.Sprintf("part-%05d.parquet", i) }

// ShardPath is the slash-separated path of a shard relative to the run
// directory: table/k=v/.../part-NNNNN.parquet.
func ShardPath(table string, i int, parts ...Partition) string {
	elems := []string{table}
	for _, p := range parts {
		elems = append(elems, p.String())
	}
	return strings.Join(append(elems, ShardName(i)), "/")
}

// Run is a run directory: runs/<run>/<table>/<partitions>/part-NNNNN.parquet,
// plus runs/<run>/_manifests/<stage>.json. Its methods are safe for
// concurrent use within one process; RunStage takes a per-stage lock
// (LockStage) so that two processes never run the same stage on one run
// directory at once.
type Run struct {
	Dir string
	mu  sync.Mutex
}

// OpenRun creates (if needed) and opens a run directory.
func OpenRun(dir string) (*Run, error) {
	if dir == "" {
		return nil, errors.New("run directory: empty path")
	}
	if err := os.MkdirAll(filepath.Join(dir, "_manifests"), 0o755); err != nil {
		return nil, fmt.Errorf("run directory %s: %w", dir, err)
	}
	return &Run{Dir: dir}, nil
}

// Path turns a slash-separated run-relative path into a file path.
func (r *Run) Path(rel string) string { return filepath.Join(r.Dir, filepath.FromSlash(rel)) }

// Manifest lists a stage's committed shards. It is rewritten atomically
// (temp file, fsync, rename, fsync dir) after each commit.
type Manifest struct {
	Version     int         `json:"version"`
	Stage       string      `json:"stage"`
	ConfigHash  string      `json:"config_hash"`
	CodeVersion string      `json:"code_version"`
	Updated     time.Time   `json:"updated"`
	Shards      []ShardInfo `json:"shards"` // sorted by Path; paths are run-relative
}

// Shard returns the committed shard at run-relative path rel.
func (m *Manifest) Shard(rel string) (ShardInfo, bool) {
	i := sort.Search(len(m.Shards), func(i int) bool { return m.Shards[i].Path >= rel })
	if i < len(m.Shards) && m.Shards[i].Path == rel {
		return m.Shards[i], true
	}
	return ShardInfo{}, false
}

// Rows is the total row count of the shards under table (all if table is "").
func (m *Manifest) Rows(table string) int64 {
	var n int64
	for _, s := range m.Shards {
		if table == "" || strings.HasPrefix(s.Path, table+"/") {
			n += s.Rows
		}
	}
	return n
}

// Paths returns the run-relative paths of the committed shards under table.
func (m *Manifest) Paths(table string) []string {
	var out []string
	for _, s := range m.Shards {
		if strings.HasPrefix(s.Path, table+"/") {
			out = append(out, s.Path)
		}
	}
	return out
}

func (r *Run) manifestPath(stage string) string {
	return filepath.Join(r.Dir, "_manifests", stage+".json")
}

// Manifest loads a stage's manifest; a stage that never committed has an
// empty one.
func (r *Run) Manifest(stage string) (*Manifest, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.loadManifest(stage)
}

func (r *Run) loadManifest(stage string) (*Manifest, error) {
	p := r.manifestPath(stage)
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return &Manifest{Version: ManifestVersion, Stage: stage}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", p, err)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("manifest %s: %w", p, err)
	}
	if m.Version != ManifestVersion {
		return nil, fmt.Errorf("manifest %s: version %d, want %d", p, m.Version, ManifestVersion)
	}
	return &m, nil
}

// Commit commits w (a shard created at r.Path(rel)) and records it in the
// stage's manifest under rel, with inputs as the fingerprint that resume
// compares. Provenance fields of the manifest are taken from prov.
func (r *Run) Commit(w *ShardWriter, rel string, prov Provenance, inputs string) (ShardInfo, error) {
	if filepath.Clean(w.Path()) != filepath.Clean(r.Path(rel)) {
		w.Abort()
		return ShardInfo{}, fmt.Errorf("shard %s: not at run path %s", w.Path(), rel)
	}
	info, err := w.Commit()
	if err != nil {
		return ShardInfo{}, err
	}
	info.Path, info.Inputs = rel, inputs
	return info, r.record(prov, info)
}

func (r *Run) record(prov Provenance, info ShardInfo) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	m, err := r.loadManifest(prov.Stage)
	if err != nil {
		return err
	}
	m.ConfigHash, m.CodeVersion, m.Updated = prov.ConfigHash, prov.CodeVersion, time.Now().UTC()
	i := sort.Search(len(m.Shards), func(i int) bool { return m.Shards[i].Path >= info.Path })
	if i < len(m.Shards) && m.Shards[i].Path == info.Path {
		m.Shards[i] = info
	} else {
		m.Shards = append(m.Shards, ShardInfo{})
		copy(m.Shards[i+1:], m.Shards[i:])
		m.Shards[i] = info
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return WriteFileAtomic(r.manifestPath(prov.Stage), append(b, '\n'))
}

// ResetStage forgets a stage's commits: its manifest is removed (the shards
// stay until overwritten).
func (r *Run) ResetStage(stage string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := os.Remove(r.manifestPath(stage)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("manifest %s: %w", r.manifestPath(stage), err)
	}
	return nil
}

// CleanTemp removes leftover temp files (from a crash) under the run-relative
// directories given, or the whole run when none are. It returns how many it
// removed. Only temp files of writers that are gone are removed: a live
// writer holds an flock on its temp file (see createTemp), which CleanTemp
// tests before it removes anything, so it is safe while other processes
// write to the run.
func (r *Run) CleanTemp(rels ...string) (int, error) {
	if len(rels) == 0 {
		rels = []string{"."}
	}
	n := 0
	for _, rel := range rels {
		root := r.Path(rel)
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			if err != nil {
				return err
			}
			if !d.IsDir() && IsTemp(d.Name()) {
				removed, err := removeIfDead(p)
				if err != nil {
					return err
				}
				if removed {
					n++
				}
			}
			return nil
		})
		if err != nil {
			return n, fmt.Errorf("run %s: clean temp files: %w", r.Dir, err)
		}
	}
	return n, nil
}

// IsTemp reports whether a file name is an uncommitted temp file.
func IsTemp(name string) bool {
	return strings.HasPrefix(name, ".") && strings.HasSuffix(name, TempSuffix)
}

// WriteFileAtomic writes data to path through a temp file in the same
// directory: write, fsync, rename, fsync dir.
func WriteFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := createTemp(dir, filepath.Base(path))
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	if _, err = f.Write(data); err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = os.Rename(tmp, path) // while open: the flock guards the name
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := SyncDir(dir); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// Fingerprint identifies a file's content: "sha256:<hex>" of its bytes. Stages
// record the fingerprints of their inputs in provenance; resume redoes a
// shard whose inputs changed.
func Fingerprint(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("fingerprint %s: %w", path, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("fingerprint %s: %w", path, err)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}
