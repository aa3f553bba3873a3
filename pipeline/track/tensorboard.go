package track

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

func init() { Register("tensorboard", openTensorBoard) }

// TensorBoard writes event files natively: each session of a run (a start
// or a resume) appends to a file of its own,
//
//	<dir>/events.out.tfevents.<unix seconds>.<host>.<pid>.evolm-<id>
//
// whose name sorts after the session before (TensorBoard reads a
// directory's files in name order). A file opens with file_version
// "brain.Event:2" and a SessionLog START at the first step the session
// writes, so that TensorBoard drops any later step a crashed session left
// behind. The first session also writes the hparams (the run's effective
// configuration) and the version, config hash and tags as text. Each step
// is one Event whose Summary holds every metric as a simple_value (what
// EventAccumulator.Scalars and the scalars dashboard read); text samples
// and checkpoint paths are text-plugin tensors. Each Write is one write(2),
// so a killed run leaves whole records (and TensorBoard's reader stops at
// a torn last one).
type tensorBoard struct {
	f    *os.File
	path string
}

type tbState struct {
	ID string `json:"id"` // the suffix of the run's event files
}

const tbPrefix = "events.out.tfevents."

func openTensorBoard(_ context.Context, s Settings, r Run) (Sink, int64, error) {
	dir := s.TensorBoardDir
	if dir == "" {
		dir = filepath.Join(r.Dir, "tensorboard", r.Sub)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, 0, err
	}
	var st tbState
	if ok, err := loadState(r, "tensorboard", &st); err != nil {
		return nil, 0, err
	} else if !ok {
		st.ID = newID()
		if err := saveState(r, "tensorboard", st); err != nil {
			return nil, 0, err
		}
	}
	ours, others, err := tbFiles(dir, st.ID)
	if err != nil {
		return nil, 0, err
	}
	if len(others) > 0 {
		// TensorBoard shows a directory's files as one run.
		return nil, 0, fmt.Errorf("%s holds event files of another run (%s): TensorBoard would show both as one run; remove them, or set %s to a directory of this run's own",
			dir, others[0], s.key("tensorboard_dir"))
	}
	last, lastTS, err := tbScan(ours)
	if err != nil {
		return nil, 0, err
	}
	ts := max(time.Now().Unix(), lastTS+1)
	host, _ := os.Hostname()
	host = strings.NewReplacer("/", "_", " ", "_").Replace(host)
	path := filepath.Join(dir, fmt.Sprintf("%s%010d.%s.%d.evolm-%s", tbPrefix, ts, host, os.Getpid(), st.ID))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, 0, err
	}
	t := &tensorBoard{f: f, path: path}
	wall := float64(time.Now().UnixNano()) / 1e9
	head := appendRecord(nil, tbFileVersion(wall))
	head = appendRecord(head, tbSessionStart(wall, last+1))
	if len(ours) == 0 {
		params := append(slices.Clone(r.Params), Param{"evolm.version", r.Version}, Param{"evolm.config_hash", r.ConfigHash})
		head = appendRecord(head, tbSummary(wall, 0, tbHParams("_hparams_/experiment", tbExperiment(params, MetricTags()))))
		head = appendRecord(head, tbSummary(wall, 0, tbHParams("_hparams_/session_start_info", tbSessionStartInfo(params, float64(r.Start.Unix())))))
		var cfg strings.Builder
		for _, p := range r.Params {
			fmt.Fprintf(&cfg, "%s: %s  \n", p.Key, p.Text())
		}
		head = appendRecord(head, tbSummary(wall, 0, tbText("evolm/config", cfg.String())))
		head = appendRecord(head, tbSummary(wall, 0, tbText("evolm/version", r.Version+" (config "+r.ConfigHash+")")))
		if len(s.Tags) > 0 {
			var tags []string
			for k, v := range s.Tags {
				tags = append(tags, k+"="+v)
			}
			slices.Sort(tags)
			head = appendRecord(head, tbSummary(wall, 0, tbText("evolm/tags", strings.Join(tags, ", "))))
		}
	}
	if _, err := f.Write(head); err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("%s: %w", path, err)
	}
	return t, last, nil
}

// tbFiles lists dir's event files: the run's own (suffix evolm-<id>), in
// name order, and any others.
func tbFiles(dir, id string) (ours, others []string, err error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	for _, e := range ents {
		n := e.Name()
		switch {
		case !strings.HasPrefix(n, tbPrefix) || e.IsDir():
		case strings.HasSuffix(n, ".evolm-"+id):
			ours = append(ours, filepath.Join(dir, n))
		default:
			others = append(others, n)
		}
	}
	slices.Sort(ours)
	return ours, others, nil
}

// tbScan reads the run's event files in order and returns the last step
// TensorBoard shows a scalar for (a SessionLog START at step s drops the
// steps from s on) and the latest file's timestamp. A torn record ends a
// file, as TensorBoard's reader has it.
func tbScan(files []string) (last, ts int64, err error) {
	last = -1
	for _, path := range files {
		if f := strings.Split(strings.TrimPrefix(filepath.Base(path), tbPrefix), "."); len(f) > 0 {
			if n, err := strconv.ParseInt(f[0], 10, 64); err == nil {
				ts = max(ts, n)
			}
		}
		fh, err := os.Open(path)
		if err != nil {
			return 0, 0, err
		}
		for rec, err := range readRecords(fh) {
			if errors.Is(err, errTorn) {
				break
			}
			if err != nil {
				fh.Close()
				return 0, 0, fmt.Errorf("%s: %w", path, err)
			}
			ev, err := readTBEvent(rec)
			if err != nil {
				fh.Close()
				return 0, 0, fmt.Errorf("%s: %w", path, err)
			}
			switch {
			case ev.session:
				last = min(last, ev.step-1)
			case ev.scalar:
				last = max(last, ev.step)
			}
		}
		fh.Close()
	}
	return last, ts, nil
}

// Write appends the events' records in one write.
func (t *tensorBoard) Write(_ context.Context, evs []Event) error {
	var b []byte
	for _, e := range evs {
		wall := float64(e.Time.UnixNano()) / 1e9
		switch e.Kind {
		case Scalars:
			vals := make([][]byte, len(e.Points))
			for i, p := range e.Points {
				vals[i] = tbScalar(p.Tag, float32(p.Value))
			}
			b = appendRecord(b, tbSummary(wall, e.Step, vals...))
		case Text:
			b = appendRecord(b, tbSummary(wall, e.Step, tbText(e.Tag, e.Text)))
		case Checkpoint:
			b = appendRecord(b, tbSummary(wall, e.Step, tbText("evolm/checkpoints", e.Tag+": "+e.Text)))
		}
	}
	if _, err := t.f.Write(b); err != nil {
		return fmt.Errorf("%s: %w", t.path, err)
	}
	return nil
}

// Close writes the session's end and closes the file.
func (t *tensorBoard) Close(_ context.Context, status Status) error {
	now := float64(time.Now().UnixNano()) / 1e9
	_, err := t.f.Write(appendRecord(nil, tbSummary(now, 0, tbHParams("_hparams_/session_end_info", tbSessionEndInfo(status == Finished, now)))))
	return errors.Join(err, t.f.Close())
}
