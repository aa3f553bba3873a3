package run

import (
	"context"
	"time"

	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/serving/backend"
)

// part is one part of a step's wall time (the steps table's time_*_s
// columns).
type part int

const (
	partGeneration  part = iota // the trained role's answers and inferred questions
	partRubrics                 // the rubric generator's samples
	partJudge                   // the judge
	partRefLogprobs             // the frozen reference's log-probs
	partLearner                 // forward/backward passes and the optimizer step
	partWeightSync              // the fleet's weight sync
	partWrites                  // Parquet shards written and committed
	partCheckpoint              // checkpoints
	nParts
)

// stepClock splits the loop's wall time into parts, step by step. A step's
// window runs from the moment the previous step's row was complete (the
// first step of a process: from the loop's start) to the moment its own is,
// so that the windows tile the loop: the previous row's write, the
// checkpoint after it and the trackers' hand-off fall in the next window.
// What no part measured is the step's remainder (time_other_s): the
// loop's own bookkeeping.
type stepClock struct {
	mark   time.Time // the window's start
	parts  [nParts]time.Duration
	tokens int64 // completion tokens generated in the window
}

// begin starts the first window.
func (c *stepClock) begin() { *c = stepClock{mark: time.Now()} }

// add counts d in part p.
func (c *stepClock) add(p part, d time.Duration) { c.parts[p] += d }

// since counts the time from t0 in part p (defer c.since(p, time.Now())).
func (c *stepClock) since(p part, t0 time.Time) { c.parts[p] += time.Since(t0) }

// train counts a train step of d, of which the reference's log-probs took
// st.RefTime.
func (c *stepClock) train(d time.Duration, st backend.TrainStats) {
	ref := min(st.RefTime, d)
	c.parts[partRefLogprobs] += ref
	c.parts[partLearner] += d - ref
}

// finish closes the window: m gets its wall time, its parts, the remainder
// and tokens per second, and the next window starts now.
func (c *stepClock) finish(m *schemas.StepMetrics) {
	now := time.Now()
	el := now.Sub(c.mark)
	m.ElapsedS = el.Seconds()
	p := c.parts
	m.TimeGenerationS, m.TimeRubricsS, m.TimeJudgeS = p[partGeneration].Seconds(), p[partRubrics].Seconds(), p[partJudge].Seconds()
	m.TimeRefLogprobsS, m.TimeLearnerS, m.TimeWeightSyncS = p[partRefLogprobs].Seconds(), p[partLearner].Seconds(), p[partWeightSync].Seconds()
	m.TimeWritesS, m.TimeCheckpointS = p[partWrites].Seconds(), p[partCheckpoint].Seconds()
	var sum time.Duration
	for _, d := range p {
		sum += d
	}
	m.TimeOtherS = (el - sum).Seconds()
	if el > 0 {
		m.TokensPerS = float64(c.tokens) / el.Seconds()
	}
	*c = stepClock{mark: now}
}

// timedGen counts the time of a generator's calls in a part.
type timedGen struct {
	inner backend.Generator
	clock *stepClock
	part  part
}

func (g timedGen) Generate(ctx context.Context, reqs []backend.GenerateRequest) ([]backend.GenerateResponse, error) {
	defer g.clock.since(g.part, time.Now())
	return g.inner.Generate(ctx, reqs)
}

// timedHook counts a step hook's time in a part.
func (l *loop) timedHook(p part, fn StepHook) StepHook {
	return func(ctx context.Context, step int, m *schemas.StepMetrics) error {
		defer l.clock.since(p, time.Now())
		return fn(ctx, step, m)
	}
}
