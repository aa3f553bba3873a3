package pipeline

import (
	"errors"
	"fmt"
	"os"
	"sync"
)

// RowFailures counts the rows a stage asked a model backend for and the rows
// the backend failed on (HTTP errors, rejected requests, unreachable
// servers), keeping the first failure's text. It is safe for concurrent
// use: the tasks of MapShards add to it as they go.
//
// A row the model answered badly (an unparseable rubric, a judge reply with
// no score) is not a failure here: the model ran. RunStage checks the counts
// when the stage returns (see RowFailures.Check).
type RowFailures struct {
	mu           sync.Mutex
	rows, failed int64
	first        string
}

// Add records rows sent to the backend, of which failed failed; first is
// the text of the first failure among them ("" when failed is 0). A nil
// RowFailures counts nothing.
func (f *RowFailures) Add(rows, failed int, first string) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rows += int64(rows)
	f.failed += int64(failed)
	if f.first == "" && failed > 0 {
		f.first = first
	}
}

// Counts returns the rows recorded, the failed ones and the first failure.
func (f *RowFailures) Counts() (rows, failed int64, first string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rows, f.failed, f.first
}

// ErrAllRowsFailed is wrapped by the error of a stage whose every model
// row failed on its backend.
var ErrAllRowsFailed = errors.New("every row failed on the model backend")

// Check judges the counts: when every recorded row failed it returns an
// error wrapping ErrAllRowsFailed with the first failure; when more than
// warnFraction of them failed it returns a warning text (and a nil error);
// otherwise both are empty.
func (f *RowFailures) Check(warnFraction float64) (warning string, err error) {
	rows, failed, first := f.Counts()
	switch {
	case rows == 0 || failed == 0:
		return "", nil
	case failed == rows:
		return "", fmt.Errorf("%w: %d of %d rows; the first: %s", ErrAllRowsFailed, failed, rows, first)
	case float64(failed) > warnFraction*float64(rows):
		return fmt.Sprintf("%d of %d rows (%.1f%%) failed on the model backend, above pipeline.warn_failure_fraction %g; the first: %s",
			failed, rows, 100*float64(failed)/float64(rows), warnFraction, first), nil
	}
	return "", nil
}

// checkFailures applies RowFailures.Check after a stage ran: a stage whose
// rows all failed has the shards it committed in this run removed (so that
// a rerun after the fix redoes them; under --fresh the staged output is
// discarded and the old one stays) and fails; above the warning fraction it
// warns on the log.
func (e *Env) checkFailures(warnFraction float64) error {
	warning, err := e.Failures.Check(warnFraction)
	if warning != "" {
		e.Log.Warn("MANY ROWS FAILED: " + warning + " (their rows hold the reasons; fix the backend and rerun with --fresh)")
	}
	if err == nil {
		return nil
	}
	if e.Out != e.Run {
		if rerr := e.discardStaged(); rerr != nil {
			return errors.Join(err, rerr)
		}
		return fmt.Errorf("%w (the new output was discarded and the previous one is untouched: check the model, --model-id of the server, the endpoints, then rerun)", err)
	}
	m, merr := e.Out.Manifest(e.Stage)
	if merr != nil {
		return errors.Join(err, merr)
	}
	kept := 0
	for _, s := range m.Shards {
		if old, ok := e.before[s.Path]; ok && old == s {
			kept++
			continue
		}
		if rerr := os.Remove(e.Out.Path(s.Path)); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			return errors.Join(err, rerr)
		}
	}
	if rerr := e.Out.keepShards(e.Stage, e.before); rerr != nil {
		return errors.Join(err, rerr)
	}
	if kept > 0 {
		return fmt.Errorf("%w (the shards of this run were removed, the %d committed before it are kept: check the model, --model-id of the server, the endpoints, then rerun)", err, kept)
	}
	return fmt.Errorf("%w (nothing was kept: check the model, --model-id of the server, the endpoints, then rerun)", err)
}

// keepShards rewrites stage's manifest to list only its shards that are in
// keep unchanged (removing it when none is).
func (r *Run) keepShards(stage string, keep map[string]ShardInfo) error {
	m, err := r.Manifest(stage)
	if err != nil {
		return err
	}
	var shards []ShardInfo
	for _, s := range m.Shards {
		if old, ok := keep[s.Path]; ok && old == s {
			shards = append(shards, s)
		}
	}
	m.Shards = shards
	return r.writeManifest(stage, m)
}
