package track_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/pipeline/track"
	"github.com/evolm/evolm/schemas"
)

// doubleSink is a test double of a tracker: it records the steps it took
// and fails, blocks or refuses as the test says.
type doubleSink struct {
	mu      sync.Mutex
	steps   []int64
	closed  track.Status
	gate    chan struct{}  // non-nil: Write waits for it to close
	failN   int            // the first failN writes fail
	refuse  map[int64]bool // steps refused permanently
	always  bool           // every write fails
	written chan struct{}  // signalled after each write attempt
	deaf    bool           // Write ignores its context while gated
	aborted chan struct{}  // non-nil: the double is an aborter; Abort closes it
}

// stuckSink is a doubleSink that can be aborted.
type stuckSink struct{ *doubleSink }

func (s stuckSink) Abort() { close(s.aborted) }

func (d *doubleSink) Write(ctx context.Context, evs []track.Event) error {
	defer func() {
		select {
		case d.written <- struct{}{}:
		default:
		}
	}()
	if d.gate != nil {
		done := ctx.Done()
		if d.deaf {
			done = d.aborted // nil: never
		}
		select {
		case <-d.gate:
		case <-done:
			return errors.New("aborted")
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.always || d.failN > 0 {
		d.failN--
		return errors.New("connection refused")
	}
	for _, e := range evs {
		if d.refuse[e.Step] {
			return track.Permanent(fmt.Errorf("step %d refused", e.Step))
		}
	}
	for _, e := range evs {
		d.steps = append(d.steps, e.Step)
	}
	return nil
}

func (d *doubleSink) Close(_ context.Context, s track.Status) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = s
	return nil
}

// The double the next Open returns, and the last step it claims to hold;
// the settings and run the last Open passed it.
var (
	nextDouble *doubleSink
	nextLast   int64 = -1
	openedWith track.Settings
	openedRun  track.Run
)

func init() {
	track.Register("test-double", func(_ context.Context, s track.Settings, r track.Run) (track.Sink, int64, error) {
		openedWith, openedRun = s, r
		if nextDouble.aborted != nil {
			return stuckSink{nextDouble}, nextLast, nil
		}
		return nextDouble, nextLast, nil
	})
}

func openDouble(t *testing.T, d *doubleSink, last int64, queue int, flush time.Duration) (*track.Hub, *logBuffer) {
	t.Helper()
	nextDouble, nextLast = d, last
	log, logs := newLog()
	h, err := track.Open(t.Context(), track.Settings{Trackers: []string{track.Console, "test-double"}, Queue: queue, FlushTimeout: flush}, runInfo(t.TempDir()), log)
	if err != nil {
		t.Fatal(err)
	}
	return h, logs
}

func steps(h *track.Hub, from, to int64) {
	for s := from; s < to; s++ {
		h.Step(&schemas.StepMetrics{Step: s, Phase: schemas.PhasePolicy, Loss: float64(s)})
	}
}

func seq(from, to int64) []int64 {
	var out []int64
	for s := from; s < to; s++ {
		out = append(out, s)
	}
	return out
}

// TestHubQueueFullDrops: a tracker that hangs never blocks Step; once its
// queue is full new events are dropped, and the hub says so once (not per
// event) and again at the end, naming the steps.
func TestHubQueueFullDrops(t *testing.T) {
	defer track.SetIntervals(time.Millisecond, time.Hour)()
	d := &doubleSink{gate: make(chan struct{}), written: make(chan struct{}, 1)}
	h, logs := openDouble(t, d, -1, 4, time.Minute)
	steps(h, 0, 1)
	steps(h, 1, 20)
	close(d.gate)
	h.Close(track.Finished)
	if n := logs.count("tracker queue full"); n != 1 {
		t.Errorf("%d 'queue full' lines, want 1:\n%s", n, logs)
	}
	if logs.count("queue overflowed") != 1 {
		t.Errorf("no overflow summary at close:\n%s", logs)
	}
	// Delivered: steps in order, each once, the first ones whole; every
	// other step counted as dropped.
	if len(d.steps) < 4 || !slices.IsSorted(d.steps) || len(slices.Compact(slices.Clone(d.steps))) != len(d.steps) || d.steps[0] != 0 {
		t.Errorf("delivered %v", d.steps)
	}
	if want := fmt.Sprintf("dropped=%d ", 20-len(d.steps)); !strings.Contains(logs.String(), "queue overflowed during the run; the steps table keeps every row\" tracker=test-double "+want) {
		t.Errorf("delivered %d of 20 steps; the log does not say %q:\n%s", len(d.steps), want, logs)
	}
	if d.closed != track.Finished {
		t.Errorf("closed %q", d.closed)
	}
}

// TestHubFailingTracker: a tracker that fails for a while is retried until
// it recovers; nothing is lost or sent twice, and the log has one warning
// when it starts failing, at most a line per report interval meanwhile,
// and one when it recovers.
func TestHubFailingTracker(t *testing.T) {
	defer track.SetIntervals(time.Millisecond, time.Hour)()
	d := &doubleSink{failN: 50}
	h, logs := openDouble(t, d, -1, 100, time.Minute)
	steps(h, 0, 30)
	h.Close(track.Finished)
	if diff := cmp.Diff(seq(0, 30), d.steps); diff != "" {
		t.Errorf("delivered (-want +got):\n%s", diff)
	}
	if logs.count("tracker failing") != 1 || logs.count("tracker still failing") != 0 || logs.count("tracker recovered") != 1 {
		t.Errorf("log:\n%s", logs)
	}
}

// TestHubPermanentAndFlush: events a tracker refuses are dropped with a
// warning and the rest delivered; a tracker still failing at the end is
// given up after the flush timeout, naming the steps it did not take.
func TestHubPermanentAndFlush(t *testing.T) {
	defer track.SetIntervals(time.Millisecond, time.Hour)()
	d := &doubleSink{refuse: map[int64]bool{3: true}, written: make(chan struct{}, 1)}
	h, logs := openDouble(t, d, -1, 100, time.Minute)
	for s := int64(0); s < 6; s++ {
		steps(h, s, s+1)
		<-d.written // one step a write, so that the refusal drops step 3 alone
	}
	h.Close(track.Finished)
	if diff := cmp.Diff([]int64{0, 1, 2, 4, 5}, d.steps); diff != "" {
		t.Errorf("delivered (-want +got):\n%s", diff)
	}
	if logs.count("tracker refused events") != 1 {
		t.Errorf("log:\n%s", logs)
	}

	d = &doubleSink{always: true}
	h, logs = openDouble(t, d, -1, 100, 50*time.Millisecond)
	steps(h, 0, 5)
	h.Close(track.Failed)
	if logs.count("did not take every event") != 1 || logs.count("steps=0..4") != 1 || d.closed != track.Failed {
		t.Errorf("closed %q, log:\n%s", d.closed, logs)
	}
}

// TestHubSkipsWhatTheTrackerHolds: a resumed tracker that holds steps up to
// 5 is sent only the later ones, and the checkpoints.
func TestHubSkipsWhatTheTrackerHolds(t *testing.T) {
	d := &doubleSink{}
	h, _ := openDouble(t, d, 5, 100, time.Minute)
	if h.Last() != 5 {
		t.Fatalf("Last() = %d", h.Last())
	}
	h.Checkpoint(3, "step-000004", "/run/checkpoints/step-000004") // written again by the resumed run
	steps(h, 3, 9)
	h.Close(track.Finished)
	if diff := cmp.Diff([]int64{3, 6, 7, 8}, d.steps); diff != "" {
		t.Errorf("delivered (-want +got):\n%s", diff)
	}
}

// TestPoints: every numeric steps column is a point, named by Tag, the
// optional ones only when set.
func TestPoints(t *testing.T) {
	m := stepRows(4)[2] // a rubric step with a margin
	pts := track.Points(&m)
	got := map[string]float64{}
	for _, p := range pts {
		got[p.Tag] = p.Value
	}
	want := map[string]float64{"train/loss": m.Loss, "train/margin_mean": *m.MarginMean, "time/judge_s": m.TimeJudgeS,
		"train/skipped_updates": float64(m.SkippedUpdates), "train/elapsed_s": m.ElapsedS}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if _, ok := got["train/reward_temporal"]; ok {
		t.Error("a null column is a point")
	}
	if len(track.MetricTags()) < len(pts) {
		t.Errorf("MetricTags lists %d tags, a row has %d", len(track.MetricTags()), len(pts))
	}
}

// TestHubStuckTracker: a write that ignores its cancelled context at the
// end of the run gets the sink aborted; one that does not return even then
// is abandoned, and Close returns all the same.
func TestHubStuckTracker(t *testing.T) {
	defer track.SetIntervals(time.Millisecond, time.Hour)()
	defer track.SetStuckWait(10 * time.Millisecond)()
	d := &doubleSink{gate: make(chan struct{}), deaf: true, aborted: make(chan struct{})}
	h, logs := openDouble(t, d, -1, 10, time.Millisecond)
	steps(h, 0, 3)
	h.Close(track.Finished)
	if logs.count("did not take every event") != 1 || logs.count("abandoned") != 0 || d.closed != track.Finished {
		t.Errorf("aborted sink: closed %q, log:\n%s", d.closed, logs)
	}

	d = &doubleSink{gate: make(chan struct{}), deaf: true} // no Abort: stays stuck
	h, logs = openDouble(t, d, -1, 10, time.Millisecond)
	steps(h, 0, 3)
	h.Close(track.Finished)
	if logs.count("abandoned") != 1 {
		t.Errorf("stuck sink, log:\n%s", logs)
	}
	close(d.gate) // let its goroutine end
}

// TestConfigParams: a stage's section flattens to its full keys, durations
// as text, lists as lists, credentials redacted.
func TestConfigParams(t *testing.T) {
	pipeline.Register(pipeline.Spec{Name: "tracktest", Summary: "test double", Fields: []pipeline.Field{
		{Key: "lr", Type: pipeline.TypeFloat, Default: 1e-6, Description: "a float"},
		{Key: "timeout", Type: pipeline.TypeDuration, Default: 90 * time.Second, Description: "a duration"},
		{Key: "strategies", Type: pipeline.TypeStrings, Default: []string{"a", "b"}, Description: "a list"},
		{Key: "hub_api_key", Type: pipeline.TypeString, Default: "", Description: "a credential"},
	}, New: func(*pipeline.Config) (pipeline.Stage, error) { return nil, nil }})
	cfg, err := pipeline.StageConfig("tracktest", map[string]any{"lr": 2e-6, "hub_api_key": "sk-123"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]any{}
	for _, p := range track.ConfigParams(cfg, "stages.tracktest") {
		got[p.Key] = p.Value
	}
	want := map[string]any{"stages.tracktest.lr": 2e-6, "stages.tracktest.timeout": "1m30s",
		"stages.tracktest.strategies": []string{"a", "b"}, "stages.tracktest.hub_api_key": "<redacted>"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("params (-want +got):\n%s", diff)
	}
}
