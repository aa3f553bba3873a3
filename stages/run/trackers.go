package run

import (
	"context"
	"slices"

	"github.com/evolm/evolm/internal/failpoint"
	"github.com/evolm/evolm/pipeline/track"
	"github.com/evolm/evolm/schemas"
)

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
	h, err := track.OpenStage(ctx, s, l.env, "", start)
	if err != nil {
		return err
	}
	l.track.hub = h
	return nil
}

// closeTrackers ends the trackers' runs: finished, killed (the run was
// interrupted) or failed.
func (l *loop) closeTrackers(err error) { l.track.hub.Close(track.StatusOf(err)) }

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
