package track

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
)

// What a training stage (the loop, supervised fine-tuning) shares in
// reporting to its trackers: opening them for its run directory, sending
// the steps rows an earlier session committed but did not deliver, and the
// status its tracker runs end with.

// OpenStage opens the trackers of s for the stage env runs, whose session
// starts at step start: the tracker runs report env's run directory under
// sub (Run.Sub; "" for the loop's own directories), named after it unless
// s names them, with the stage's config as hyperparameters. A tracker that
// cannot start is an error: call it before loading models, so that the
// stage stops before its costly part. The committed steps rows after the
// last step every tracker holds and before start are sent first (Backfill);
// failing to read them is logged, not returned.
func OpenStage(ctx context.Context, s Settings, env *pipeline.Env, sub string, start int) (*Hub, error) {
	section := "stages." + env.Stage
	if s.Section == "" {
		s.Section = section
	}
	if s.RunName == "" {
		s.RunName = filepath.Base(env.Run.Dir)
		if sub != "" {
			s.RunName += "-" + sub
		}
	}
	r := Run{Dir: env.Out.Dir, Sub: sub, Params: ConfigParams(env.Config, section), Version: pipeline.CodeVersion(),
		ConfigHash: env.ConfigHash, Start: time.Now()}
	h, err := Open(ctx, s, r, env.Log)
	if err != nil {
		return nil, err
	}
	if h.Len() == 0 {
		return h, nil
	}
	if err := Backfill(ctx, h, env, start); err != nil {
		// The steps table is intact or not; either way the trackers must
		// not stop the stage.
		env.Log.Warn("trackers: could not send the steps committed before this session", "err", err)
	}
	return h, nil
}

// Backfill sends h the steps rows that env's stage committed after the
// last step every tracker holds (Hub.Last) and before start: the steps an
// earlier session committed but did not deliver (it was killed with events
// queued). A tracker that holds a step already is not sent it again.
func Backfill(ctx context.Context, h *Hub, env *pipeline.Env, start int) error {
	last := h.Last()
	if h.Len() == 0 || int64(start) <= last+1 {
		return nil
	}
	man, err := env.Out.Manifest(env.Stage)
	if err != nil {
		return err
	}
	var rows []schemas.StepMetrics
	for _, sh := range man.Shards {
		step, ok := stepOf(sh.Path)
		if !ok || !strings.HasPrefix(sh.Path, schemas.Steps.Name+"/") || step <= last || step >= int64(start) {
			continue
		}
		path := env.Out.Path(sh.Path)
		for rec, err := range pipeline.ReadShard(ctx, path, env.ReadOptions(schemas.Steps.Schema())) {
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
		h.Step(&rows[i])
	}
	if len(rows) > 0 {
		env.Log.Info("trackers: sent the steps an earlier session committed", "steps", fmt.Sprintf("%d..%d", rows[0].Step, rows[len(rows)-1].Step))
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

// StatusOf is the status a stage's tracker runs end with when it returns
// err: finished (nil), killed (interrupted: the context was cancelled) or
// failed.
func StatusOf(err error) Status {
	switch {
	case err == nil:
		return Finished
	case errors.Is(err, context.Canceled):
		return Killed
	}
	return Failed
}
