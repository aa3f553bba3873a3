package pipeline

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/evolm/evolm/internal/failpoint"
)

// FreshDir is the run directory's folder of staged outputs. A stage run
// with pipeline.fresh (--fresh), or a stage whose Spec.Replace lets a rerun
// with other settings replace its output, writes its new output into
// _fresh/<stage>/ (a run directory of its own: the same table paths, its
// own manifest) while the old output stays where it is, untouched and
// readable. Only when the stage has succeeded is the new output swapped in
// (see commitStaged); a stage that fails, is interrupted or whose every
// model row failed leaves the old output byte for byte as it was.
//
// The swap is a journal, then renames: the journal
// (_fresh/<stage>.commit.json) records the old manifest's shards, the new
// manifest and the directories the stage owns whole (Spec.Dirs); then each
// staged file is renamed into place, old shards that the new output does not
// have are removed, and the new manifest is written. A crash during the swap
// leaves the journal, and the stage's next run (under its lock) completes
// the swap before anything else; every step is idempotent.
const FreshDir = "_fresh"

// stagedJournal is the swap's journal (see FreshDir).
type stagedJournal struct {
	Version int       `json:"version"`
	Stage   string    `json:"stage"`
	Old     []string  `json:"old"` // run-relative paths of the old manifest's shards
	New     *Manifest `json:"new"` // the staged manifest, written in place last
	// Dirs are the directories the stage owns whole (Spec.Dirs), and whether
	// the new output has one: the old one is replaced, or removed.
	Dirs map[string]bool `json:"dirs,omitempty"`
}

func (r *Run) stagedDir(stage string) string { return filepath.Join(r.Dir, FreshDir, stage) }

func (r *Run) stagedJournalPath(stage string) string {
	return filepath.Join(r.Dir, FreshDir, stage+".commit.json")
}

// StagedRun returns the staging run directory of an interrupted --fresh of
// stage in run directory dir that committed shards (the one a rerun
// resumes), or "" when there is none.
func StagedRun(dir, stage string) string {
	r := &Run{Dir: dir}
	staged := &Run{Dir: r.stagedDir(stage)}
	if m, err := staged.Manifest(stage); err != nil || len(m.Shards) == 0 {
		return ""
	}
	return staged.Dir
}

// finishStaged completes a swap that a crash interrupted: when the stage's
// journal exists, it applies it. It reports whether it did.
func (r *Run) finishStaged(stage string) (bool, error) {
	b, err := os.ReadFile(r.stagedJournalPath(stage))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("run %s: staged output of %s: %w", r.Dir, stage, err)
	}
	var j stagedJournal
	if err := json.Unmarshal(b, &j); err != nil || j.New == nil || j.Stage != stage {
		return false, fmt.Errorf("run %s: staged output of %s: corrupt journal %s (%v): remove it and %s to start over",
			r.Dir, stage, r.stagedJournalPath(stage), err, r.stagedDir(stage))
	}
	return true, r.applyStaged(j)
}

// stageOut decides where the stage writes (Env.Out): into a new staging run
// when fresh; into the staging run of an interrupted --fresh made with the
// same config (it resumes there); otherwise into the run itself, after
// discarding a staging run made with another config. It reports whether the
// stage writes to a staging run.
func (e *Env) stageOut(fresh bool) (bool, error) {
	dir := e.Run.stagedDir(e.Stage)
	if fresh {
		if err := os.RemoveAll(dir); err != nil {
			return false, fmt.Errorf("fresh: %w", err)
		}
		out, err := OpenRun(dir)
		if err != nil {
			return false, err
		}
		e.Out = out
		return true, nil
	}
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	staged := &Run{Dir: dir}
	m, err := staged.Manifest(e.Stage)
	if err != nil {
		return false, err
	}
	if len(m.Shards) > 0 && m.ConfigHash == e.ConfigHash {
		e.Out = staged
		if _, err := staged.CleanTemp(); err != nil {
			return false, err
		}
		e.Log.Info("resuming an interrupted --fresh; the previous output stays until it completes", "staged", dir, "committed_shards", len(m.Shards))
		return true, nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return false, fmt.Errorf("discard staged output %s: %w", dir, err)
	}
	e.Log.Info("discarded the staged output of an interrupted --fresh made with other settings", "staged", dir, "config", m.ConfigHash)
	return false, nil
}

// discardStaged removes the staging run (a failed --fresh whose rows all
// failed: nothing of it is worth resuming).
func (e *Env) discardStaged() error {
	if e.Out == e.Run {
		return nil
	}
	if err := os.RemoveAll(e.Out.Dir); err != nil {
		return err
	}
	_ = os.Remove(filepath.Dir(e.Out.Dir)) // when no other stage stages output
	return nil
}

// commitStaged swaps the staged output in place of the old (see FreshDir).
func (e *Env) commitStaged(dirs []string) error {
	newM, err := e.Out.Manifest(e.Stage)
	if err != nil {
		return err
	}
	oldM, err := e.Run.Manifest(e.Stage)
	if err != nil {
		return err
	}
	j := stagedJournal{Version: 1, Stage: e.Stage, New: newM, Dirs: map[string]bool{}}
	for _, s := range oldM.Shards {
		j.Old = append(j.Old, s.Path)
	}
	for _, d := range dirs {
		_, err := os.Stat(e.Out.Path(d))
		j.Dirs[d] = err == nil
	}
	b, err := json.MarshalIndent(j, "", "  ")
	if err != nil {
		return err
	}
	if err := WriteFileAtomic(e.Run.stagedJournalPath(e.Stage), append(b, '\n')); err != nil {
		return fmt.Errorf("staged output: %w", err)
	}
	failpoint.Hit("fresh-swap")
	return e.Run.applyStaged(j)
}

// applyStaged carries out a swap's journal: owned directories, then the
// staged files, then the removal of old shards the new output lacks, then
// the manifest; last it removes the staging run and the journal. Each step
// may be repeated after a crash.
func (r *Run) applyStaged(j stagedJournal) error {
	src := r.stagedDir(j.Stage)
	fail := func(err error) error {
		return fmt.Errorf("run %s: swap in the new output of %s: %w", r.Dir, j.Stage, err)
	}
	for _, d := range slices.Sorted(maps.Keys(j.Dirs)) {
		staged, dst := filepath.Join(src, filepath.FromSlash(d)), r.Path(d)
		_, err := os.Stat(staged)
		switch {
		case j.Dirs[d] && err == nil:
			if err := os.RemoveAll(dst); err != nil {
				return fail(err)
			}
			if err := os.Rename(staged, dst); err != nil {
				return fail(err)
			}
		case !j.Dirs[d]:
			if err := os.RemoveAll(dst); err != nil {
				return fail(err)
			}
		}
	}
	synced := map[string]bool{}
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			if rel == "_manifests" {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || IsTemp(d.Name()) {
			return nil
		}
		dst := filepath.Join(r.Dir, rel)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := os.Rename(p, dst); err != nil {
			return err
		}
		synced[filepath.Dir(dst)] = true
		failpoint.Hit("fresh-swap-file")
		return nil
	})
	if err != nil {
		return fail(err)
	}
	keep := map[string]bool{}
	for _, s := range j.New.Shards {
		keep[s.Path] = true
	}
	for _, old := range j.Old {
		if keep[old] {
			continue
		}
		if err := os.Remove(r.Path(old)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fail(err)
		}
	}
	for d := range synced {
		if err := SyncDir(d); err != nil {
			return fail(err)
		}
	}
	if err := r.writeManifest(j.Stage, j.New); err != nil {
		return fail(err)
	}
	if err := os.RemoveAll(src); err != nil {
		return fail(err)
	}
	if err := os.Remove(r.stagedJournalPath(j.Stage)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fail(err)
	}
	_ = os.Remove(filepath.Join(r.Dir, FreshDir)) // when no other stage stages output
	return nil
}

// writeManifest replaces a stage's manifest with m (its shards' paths
// run-relative); an m without shards removes it.
func (r *Run) writeManifest(stage string, m *Manifest) error {
	if len(m.Shards) == 0 {
		return r.ResetStage(stage)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return WriteFileAtomic(r.manifestPath(stage), append(b, '\n'))
}
