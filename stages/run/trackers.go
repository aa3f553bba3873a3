package run

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/evolm/evolm/internal/failpoint"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/pipeline/track"
	"github.com/evolm/evolm/schemas"
)

// trackSettings reads the tracker keys into track.Settings, refusing
// unknown trackers, malformed tags and an MLflow tracker with no server.
func trackSettings(cfg *pipeline.Config, k *Keys) (track.Settings, error) {
	s := track.Settings{RunName: k.TrackerRunName, Queue: k.TrackerQueue, FlushTimeout: k.TrackerFlush,
		TensorBoardDir: k.TensorBoardDir, MLflowURI: k.MLflowURI, MLflowExperiment: k.MLflowExperiment,
		WandbProject: k.WandbProject, WandbEntity: k.WandbEntity, WandbMode: k.WandbMode, WandbPython: k.WandbPython}
	for _, n := range k.Trackers {
		if !slices.Contains(track.Names(), n) {
			return s, cfg.Errorf("trackers", "unknown tracker %q (known: %s)", n, strings.Join(track.Names(), ", "))
		}
		if slices.Contains(s.Trackers, n) {
			return s, cfg.Errorf("trackers", "%s listed twice", n)
		}
		s.Trackers = append(s.Trackers, n)
	}
	for _, t := range k.TrackerTags {
		key, val, ok := strings.Cut(t, "=")
		if !ok || strings.TrimSpace(key) == "" {
			return s, cfg.Errorf("tracker_tags", "%q: want key=value", t)
		}
		if s.Tags == nil {
			s.Tags = map[string]string{}
		}
		s.Tags[strings.TrimSpace(key)] = val
	}
	if slices.Contains(s.Trackers, "mlflow") && s.MLflowURI == "" && os.Getenv("MLFLOW_TRACKING_URI") == "" {
		return s, cfg.Errorf("mlflow_tracking_uri", "trackers has mlflow: set the tracking server's URL (or MLFLOW_TRACKING_URI)")
	}
	return s, nil
}

// tracking is the loop's part in reporting to the trackers.
type tracking struct {
	hub     *track.Hub // nil: no tracker (or not rank 0)
	console bool       // the step's log line at info level
	texts   []trackText
	ckpt    string // the last checkpoint sent
}

type trackText struct{ tag, text string }

// openTrackers opens the run's trackers on rank 0, before any model is
// loaded (a tracker that cannot start stops the run here), and sends them
// the committed steps rows after the last step they hold and before start.
func (l *loop) openTrackers(ctx context.Context, start int) error {
	s := l.cfg.Track
	l.track.console = slices.Contains(s.Trackers, track.Console)
	if !l.lead() {
		return nil
	}
	if s.RunName == "" {
		s.RunName = filepath.Base(l.env.Run.Dir)
	}
	r := track.Run{Dir: l.env.Out.Dir, Params: track.ConfigParams(l.env.Config, "stages."+Name), Version: pipeline.CodeVersion(),
		ConfigHash: l.env.ConfigHash, Start: time.Now()}
	h, err := track.Open(ctx, s, r, l.env.Log)
	if err != nil {
		return err
	}
	l.track.hub = h
	if h.Len() == 0 {
		return nil
	}
	if err := l.backfill(ctx, h.Last(), start); err != nil {
		// The steps table is intact or not; either way the trackers must
		// not stop the run.
		l.env.Log.Warn("trackers: could not send the steps committed before this session", "err", err)
	}
	return nil
}

// backfill sends the trackers the committed steps rows after last and
// before start: steps an earlier session committed but did not deliver.
func (l *loop) backfill(ctx context.Context, last int64, start int) error {
	if int64(start) <= last+1 {
		return nil
	}
	man, err := l.env.Out.Manifest(Name)
	if err != nil {
		return err
	}
	var rows []schemas.StepMetrics
	for _, sh := range man.Shards {
		step, ok := stepOf(sh.Path)
		if !ok || !strings.HasPrefix(sh.Path, schemas.Steps.Name+"/") || step <= last || step >= int64(start) {
			continue
		}
		path := l.env.Out.Path(sh.Path)
		for rec, err := range pipeline.ReadShard(ctx, path, l.env.ReadOptions(schemas.Steps.Schema())) {
			if err != nil {
				return err
			}
			rs, err := schemas.Steps.Read(rec)
			if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			rows = append(rows, rs...)
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Step < rows[j].Step })
	for i := range rows {
		l.track.hub.Step(&rows[i])
	}
	if len(rows) > 0 {
		l.env.Log.Info("trackers: sent the steps an earlier session committed", "steps", fmt.Sprintf("%d..%d", rows[0].Step, rows[len(rows)-1].Step))
	}
	return nil
}

// stepOf reads the step partition of a run-relative shard path.
func stepOf(rel string) (int64, bool) {
	for _, seg := range strings.Split(rel, "/") {
		if v, ok := strings.CutPrefix(seg, "step="); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// closeTrackers ends the trackers' runs: finished, killed (the run was
// interrupted) or failed.
func (l *loop) closeTrackers(err error) {
	status := track.Finished
	switch {
	case errors.Is(err, context.Canceled):
		status = track.Killed
	case err != nil:
		status = track.Failed
	}
	l.track.hub.Close(status)
}

// registerTrackerHooks sends each step's row and samples to the trackers
// after the row is committed, and each checkpoint once written.
func (l *loop) registerTrackerHooks() {
	l.track.ckpt = l.ckpt
	l.hooks.OnStep("trackers", PriorityMetrics, func(_ context.Context, step int, m *schemas.StepMetrics) error {
		l.track.hub.Step(m)
		for _, t := range l.track.texts {
			l.track.hub.Text(int64(step), t.tag, t.text)
		}
		l.track.texts = nil
		failpoint.Hit("trackers-step") // crash tests: killed after a step's hand-off
		return nil
	})
	l.hooks.OnStep("trackers_checkpoint", PriorityCheckpoint+1, func(_ context.Context, step int, _ *schemas.StepMetrics) error {
		if l.ckpt != l.track.ckpt {
			l.track.ckpt = l.ckpt
			l.track.hub.Checkpoint(int64(step), l.ckpt, l.env.Out.Path(ckptDir(l.ckpt)))
		}
		return nil
	})
}

// keepSamples keeps a step's first rubric and answer for the trackers'
// text (TensorBoard's text dashboard).
func (l *loop) keepSamples(rubs []schemas.Rubric, answers []schemas.Rollout) {
	if l.track.hub.Len() == 0 {
		return
	}
	const most = 4000
	cut := func(s string) string {
		if len(s) > most {
			return s[:most] + " …"
		}
		return s
	}
	if len(rubs) > 0 {
		l.track.texts = append(l.track.texts, trackText{"samples/rubric", cut(rubs[0].RawText)})
	}
	for _, a := range answers {
		if a.Error == nil {
			l.track.texts = append(l.track.texts, trackText{"samples/answer", cut(a.Text)})
			break
		}
	}
}
