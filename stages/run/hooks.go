package run

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"sort"

	"github.com/evolm/evolm/schemas"
)

// StepHook runs after each step with the step's metrics (ElapsedS filled).
// An error stops the run and is returned as it is.
type StepHook func(ctx context.Context, step int, m *schemas.StepMetrics) error

// Priority orders the hooks of a step, in gomlx's manner: lower runs first;
// equal priorities run in the order they were registered.
type Priority int

// The loop's own hooks.
const (
	// PriorityMetrics: the steps row and the step's log line.
	PriorityMetrics Priority = 0
	// PriorityGuard: stop a run that diverged, after its row is written and
	// before it is checkpointed.
	PriorityGuard Priority = 100
	// PriorityProgress: the progress counter.
	PriorityProgress Priority = 200
	// PriorityCheckpoint: checkpoints (last: a checkpoint follows every
	// other effect of its step).
	PriorityCheckpoint Priority = 300
)

type namedHook struct {
	name     string
	priority Priority
	fn       StepHook
}

// hooks are the hooks registered on a loop.
type hooks struct {
	list   []namedHook
	sorted bool
}

// OnStep registers fn to run after every step.
func (h *hooks) OnStep(name string, p Priority, fn StepHook) {
	h.list = append(h.list, namedHook{name: name, priority: p, fn: fn})
	h.sorted = false
}

// afterStep runs the hooks of step in priority order, stopping at the first
// error.
func (h *hooks) afterStep(ctx context.Context, step int, m *schemas.StepMetrics) error {
	if !h.sorted {
		sort.SliceStable(h.list, func(i, j int) bool { return h.list[i].priority < h.list[j].priority })
		h.sorted = true
	}
	for _, k := range h.list {
		if err := k.fn(ctx, step, m); err != nil {
			return err
		}
	}
	return nil
}

// registerHooks registers the loop's hooks: the steps row and log line
// (metrics), the divergence guard, progress, and checkpoints.
func (l *loop) registerHooks() {
	l.hooks.OnStep("steps_row", PriorityMetrics, l.writeStepRow)
	l.hooks.OnStep("log", PriorityMetrics, l.logStep)
	l.hooks.OnStep("divergence", PriorityGuard, l.checkDiverged)
	l.hooks.OnStep("progress", PriorityProgress, func(context.Context, int, *schemas.StepMetrics) error {
		l.prog.Add(1)
		return nil
	})
	l.hooks.OnStep("checkpoint", PriorityCheckpoint, l.timedHook(partCheckpoint, l.checkpointHook))
	l.registerTrackerHooks()
}

// writeStepRow commits the step's steps row.
func (l *loop) writeStepRow(_ context.Context, step int, m *schemas.StepMetrics) error {
	return write(l, schemas.Steps, []schemas.StepMetrics{*m}, step, m.Phase)
}

// logStep logs the step's main metrics: at info level with the console
// tracker (the default), else at debug.
func (l *loop) logStep(ctx context.Context, step int, m *schemas.StepMetrics) error {
	level := slog.LevelDebug
	if l.track.console {
		level = slog.LevelInfo
	}
	l.env.Log.Log(ctx, level, "step", "step", step, "phase", m.Phase, "reward", round(m.RewardMean), "loss", round(m.Loss),
		"kl", round(m.KL), "clip", round(m.ClipFrac), "grad_norm", round(m.GradNorm), "zero_std", round(m.ZeroStdFrac),
		"elapsed_s", round(m.ElapsedS))
	return nil
}

// checkDiverged stops the run after max_skipped_updates updates in a row
// were skipped for a non-finite loss or gradient norm. The steps row records
// the step; no checkpoint is taken of a run that stopped learning.
func (l *loop) checkDiverged(_ context.Context, step int, m *schemas.StepMetrics) error {
	if l.skipped < l.cfg.MaxSkippedUpdates {
		return nil
	}
	return fmt.Errorf("step %d (%s): %d updates in a row skipped for a NaN or Inf loss or gradient norm (%s = %d): the run diverged; lower the learning rate, check the rewards, or resume from an earlier checkpoint",
		step, m.Phase, l.skipped, "max_skipped_updates", l.cfg.MaxSkippedUpdates)
}

func round(x float64) float64 { return math.Round(x*1e4) / 1e4 }
