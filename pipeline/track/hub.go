package track

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/evolm/evolm/schemas"
)

// Hub fans a run's events out to its trackers. Each tracker has a bounded
// queue and a goroutine of its own, so that a slow or failing tracker never
// blocks the loop: Step, Text and Checkpoint never wait.
type Hub struct {
	log     *slog.Logger
	workers []*worker
	flush   time.Duration
}

// Retry and report intervals: a failing tracker is retried with a backoff
// that doubles from retryMin to retryMax, and reported once when it starts
// failing, then at most once every reportEvery.
var (
	retryMin    = time.Second
	retryMax    = 30 * time.Second
	reportEvery = time.Minute
	// stuckWait is how long a stopped worker's write may take to return,
	// before the sink is aborted and again after.
	stuckWait = 10 * time.Second
)

// maxBatch is the most events a tracker is handed in one Write.
const maxBatch = 256

// Open opens every tracker of s (but the console) for run r. A tracker
// that cannot start is an error: nothing is left open.
func Open(ctx context.Context, s Settings, r Run, log *slog.Logger) (*Hub, error) {
	h := &Hub{log: log, flush: s.FlushTimeout}
	for _, name := range s.Trackers {
		if name == Console {
			continue
		}
		open, ok := openers[name]
		if !ok {
			h.abort()
			return nil, fmt.Errorf("tracker %q: unknown (known: %v)", name, Names())
		}
		sink, last, err := open(ctx, s, r)
		if err != nil {
			h.abort()
			return nil, fmt.Errorf("tracker %s: %w", name, err)
		}
		w := &worker{name: name, sink: sink, last: last, log: log.With("tracker", name), keys: s,
			ch: make(chan Event, max(s.Queue, 1)), done: make(chan struct{}), stop: make(chan struct{})}
		h.workers = append(h.workers, w)
		go w.run()
	}
	return h, nil
}

// Last returns the lowest step up to which every tracker already holds the
// run (-1: a tracker holds nothing), so that a resumed run can send the
// steps table's rows after it.
func (h *Hub) Last() int64 {
	if h == nil || len(h.workers) == 0 {
		return -1
	}
	low := h.workers[0].last
	for _, w := range h.workers[1:] {
		low = min(low, w.last)
	}
	return low
}

// Len is the number of trackers the hub feeds.
func (h *Hub) Len() int {
	if h == nil {
		return 0
	}
	return len(h.workers)
}

// Step queues a steps row's metrics (Points) for every tracker.
func (h *Hub) Step(m *schemas.StepMetrics) {
	if h.Len() == 0 {
		return
	}
	h.send(Event{Kind: Scalars, Step: m.Step, Time: time.Now(), Points: Points(m)})
}

// Text queues a text sample.
func (h *Hub) Text(step int64, tag, text string) {
	h.send(Event{Kind: Text, Step: step, Time: time.Now(), Tag: tag, Text: text})
}

// Checkpoint queues a checkpoint written after step.
func (h *Hub) Checkpoint(step int64, name, path string) {
	h.send(Event{Kind: Checkpoint, Step: step, Time: time.Now(), Tag: name, Text: path})
}

func (h *Hub) send(ev Event) {
	if h == nil {
		return
	}
	for _, w := range h.workers {
		w.enqueue(ev)
	}
}

// Close ends every tracker's run with status. It waits at most the flush
// timeout for the trackers to take what is queued, then reports what was
// not delivered; a tracker's failure is logged, never returned.
func (h *Hub) Close(status Status) {
	if h == nil {
		return
	}
	deadline := time.Now().Add(h.flush)
	for _, w := range h.workers {
		close(w.ch)
	}
	for _, w := range h.workers {
		w.finish(deadline, status)
	}
	h.workers = nil
}

// abort closes the trackers opened so far (a later one failed to open).
func (h *Hub) abort() {
	for _, w := range h.workers {
		close(w.ch)
		close(w.stop)
		<-w.done
		_ = w.sink.Close(context.Background(), Failed)
	}
	h.workers = nil
}

// worker feeds one tracker.
type worker struct {
	name string
	sink Sink
	last int64 // events at or before this step are not sent (the tracker has them)
	log  *slog.Logger
	keys Settings // names the keys in messages
	ch   chan Event
	done chan struct{} // closed when run returns
	stop chan struct{} // closed to abandon retries
	// Owned by the producer (the loop's goroutine).
	dropped            int
	firstDrop, lastDrp int64
	dropReported       time.Time
	// Owned by run until done.
	undelivered []Event
}

// enqueue queues ev unless the tracker already has its step (a checkpoint
// is always sent: a resumed run writes again the one it resumed before) or
// the queue is full; a full queue drops it and says so (once, then at most
// once every reportEvery).
func (w *worker) enqueue(ev Event) {
	if ev.Step <= w.last && ev.Kind != Checkpoint {
		return
	}
	select {
	case w.ch <- ev:
		return
	default:
	}
	if w.dropped == 0 {
		w.firstDrop = ev.Step
	}
	w.dropped++
	w.lastDrp = ev.Step
	if now := time.Now(); w.dropReported.IsZero() || now.Sub(w.dropReported) >= reportEvery {
		w.dropReported = now
		w.log.Warn("tracker queue full: events dropped; the steps table keeps every row",
			"queue", cap(w.ch), "dropped", w.dropped, "steps", stepRange(w.firstDrop, w.lastDrp),
			"hint", "the tracker is failing or slower than training; raise "+w.keys.key("tracker_queue")+" to hold more")
	}
}

// run delivers the queue in batches, retrying a failed batch with backoff
// until it succeeds, fails permanently, or stop is closed.
func (w *worker) run() {
	defer close(w.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-w.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	var failingSince, reported time.Time
	for ev := range w.ch {
		batch := append(make([]Event, 0, maxBatch), ev)
	fill:
		for len(batch) < maxBatch {
			select {
			case e, ok := <-w.ch:
				if !ok {
					break fill
				}
				batch = append(batch, e)
			default:
				break fill
			}
		}
		wait := retryMin
		for {
			err := w.sink.Write(ctx, batch)
			if err == nil {
				if !failingSince.IsZero() {
					w.log.Info("tracker recovered", "after", time.Since(failingSince).Round(time.Second).String())
					failingSince = time.Time{}
				}
				break
			}
			if IsPermanent(err) {
				w.log.Warn("tracker refused events; dropped (the steps table keeps every row)",
					"steps", eventSteps(batch), "err", err)
				break
			}
			now := time.Now()
			switch {
			case failingSince.IsZero():
				failingSince, reported = now, now
				w.log.Warn("tracker failing; training goes on and its events wait in the queue, retried",
					"queue", cap(w.ch), "err", err)
			case now.Sub(reported) >= reportEvery:
				reported = now
				w.log.Warn("tracker still failing", "for", now.Sub(failingSince).Round(time.Second).String(),
					"queued", len(w.ch)+len(batch), "err", err)
			}
			select {
			case <-w.stop:
				w.undelivered = append(batch, w.drain()...)
				return
			case <-time.After(wait):
			}
			wait = min(2*wait, retryMax)
		}
	}
}

// drain takes what is left in the closed or abandoned queue.
func (w *worker) drain() []Event {
	var out []Event
	for {
		select {
		case e, ok := <-w.ch:
			if !ok {
				return out
			}
			out = append(out, e)
		default:
			return out
		}
	}
}

// finish waits until deadline for the worker to deliver its queue (closed
// by the caller), then ends the tracker's run.
func (w *worker) finish(deadline time.Time, status Status) {
	select {
	case <-w.done:
	case <-time.After(time.Until(deadline)):
		close(w.stop)
		if !w.stopped() {
			w.log.Warn("tracker stuck in a write after the flush timeout; abandoned (the steps table keeps every row)")
			return
		}
	}
	if n := len(w.undelivered); n > 0 {
		w.log.Warn("tracker did not take every event before the flush timeout ("+w.keys.key("tracker_flush_timeout")+"); the steps table keeps every row",
			"undelivered", n, "steps", eventSteps(w.undelivered))
	}
	if w.dropped > 0 {
		w.log.Warn("tracker queue overflowed during the run; the steps table keeps every row",
			"dropped", w.dropped, "steps", stepRange(w.firstDrop, w.lastDrp))
	}
	// The run's end is worth a short wait even after a slow flush.
	ctx, cancel := context.WithDeadline(context.Background(), maxTime(deadline, time.Now().Add(10*time.Second)))
	defer cancel()
	if err := w.sink.Close(ctx, status); err != nil {
		w.log.Warn("tracker did not close cleanly", "err", err)
	}
}

// aborter is a sink that can end a write that does not return (a sidecar
// that stopped reading).
type aborter interface{ Abort() }

// stopped waits for the worker to return once stop is closed: a write in
// flight sees its context cancelled; one that ignores it is aborted
// (aborter), and one that still does not return is abandoned (false).
func (w *worker) stopped() bool {
	select {
	case <-w.done:
		return true
	case <-time.After(stuckWait):
	}
	if a, ok := w.sink.(aborter); ok {
		a.Abort()
	}
	select {
	case <-w.done:
		return true
	case <-time.After(stuckWait):
		return false
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func stepRange(a, b int64) string {
	if a == b {
		return fmt.Sprint(a)
	}
	return fmt.Sprintf("%d..%d", a, b)
}

func eventSteps(evs []Event) string {
	var steps []int64
	for _, e := range evs {
		steps = append(steps, e.Step)
	}
	if len(steps) == 0 {
		return ""
	}
	return stepRange(slices.Min(steps), slices.Max(steps))
}
