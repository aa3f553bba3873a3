package track

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
)

// Console is the tracker that is the step's log line; it has no sink.
const Console = "console"

// Settings are the trackers of a run and each one's settings (a stage's
// tracker keys: Keys.Settings).
type Settings struct {
	// Section is the config section of the keys (stages.run), named in
	// messages that point at a key; OpenStage sets it.
	Section  string
	Trackers []string          // from Names(); Console is the log line
	RunName  string            // the run's name in every tracker
	Tags     map[string]string // tags of the tracker run
	// Queue is how many events each tracker may hold while it is slow or
	// failing; beyond it, events are dropped (the steps table has them).
	Queue int
	// FlushTimeout bounds how long Close waits for a tracker to take what
	// is queued at the end of the run.
	FlushTimeout time.Duration

	TensorBoardDir   string // "" is <run>/tensorboard
	MLflowURI        string // the tracking server, http(s)
	MLflowExperiment string
	WandbProject     string
	WandbEntity      string
	WandbMode        string // online or offline
	WandbPython      string // the Python that runs the sidecar
}

// key names a tracker key in full in messages (section.key).
func (s Settings) key(k string) string {
	if s.Section == "" {
		return k
	}
	return s.Section + "." + k
}

// Run is what each tracker is told of the run it reports.
type Run struct {
	// Dir is the run directory the stage writes to; trackers keep their
	// state in Dir/trackers and default outputs beside it.
	Dir string
	// Sub, when set, is the stage's own subdirectory of those
	// (Dir/trackers/<Sub>, Dir/tensorboard/<Sub>), so that two stages of
	// one run directory (evolm sft before evolm run) report two tracker
	// runs; the loop's are Dir/trackers and Dir/tensorboard themselves.
	Sub        string
	Params     []Param // the effective configuration, by key
	Version    string  // evolm's code version
	ConfigHash string
	Start      time.Time
}

// StateDir is where trackers keep what a resumed run needs (their run ids).
func (r Run) StateDir() string { return filepath.Join(r.Dir, "trackers", r.Sub) }

// Param is one configuration key with its value (string, int, int64,
// float64, bool or []string).
type Param struct {
	Key   string
	Value any
}

// Text renders the value as a string (lists comma-separated).
func (p Param) Text() string {
	switch v := p.Value.(type) {
	case []string:
		return strings.Join(v, ",")
	case nil:
		return ""
	}
	return fmt.Sprint(p.Value)
}

// ConfigParams flattens a stage's config view — its section (named section,
// e.g. "stages.run") and the sections it uses (roles.*) — into params
// sorted by full key. A key named like a credential (api_key, token,
// secret, password) is sent as "<redacted>": trackers are often shared.
func ConfigParams(cfg *pipeline.Config, section string) []Param {
	var out []Param
	add := func(prefix string, c *pipeline.Config) {
		for _, k := range c.Keys() {
			v := c.Get(k)
			if d, ok := v.(time.Duration); ok {
				v = d.String()
			}
			if credential(k) {
				v = "<redacted>"
			}
			out = append(out, Param{Key: prefix + "." + k, Value: v})
		}
	}
	add(section, cfg)
	for _, u := range cfg.Uses() {
		add(u, cfg.At(u))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

func credential(key string) bool {
	k := strings.ToLower(key)
	for _, w := range []string{"api_key", "apikey", "token", "secret", "password"} {
		if strings.Contains(k, w) {
			return true
		}
	}
	return false
}

// Kind is what an event carries.
type Kind int

const (
	// Scalars: one step's metrics.
	Scalars Kind = iota
	// Text: a sample (Tag names it).
	Text
	// Checkpoint: a checkpoint written (Tag is its name, Text its path).
	Checkpoint
)

// Event is one thing a tracker records at a step.
type Event struct {
	Kind   Kind
	Step   int64
	Time   time.Time
	Points []Point // Scalars
	Tag    string
	Text   string
}

// Point is one scalar.
type Point struct {
	Tag   string
	Value float64
}

// Tag is the tracker name of a steps-table column: time/<part> for the
// time breakdown (time_judge_s → time/judge_s), train/<column> for the
// rest.
func Tag(column string) string {
	if rest, ok := strings.CutPrefix(column, "time_"); ok {
		return "time/" + rest
	}
	return "train/" + column
}

// Points returns every numeric column of a steps row as a point (Tag of
// its name), in the table's column order: the whole row but its step and
// its phase (a string), and optional columns that are null.
func Points(m *schemas.StepMetrics) []Point {
	rec := schemas.Steps.Build(memory.DefaultAllocator, []schemas.StepMetrics{*m})
	defer rec.Release()
	var out []Point
	for i, f := range rec.Schema().Fields() {
		if f.Name == "step" {
			continue
		}
		col := rec.Column(i)
		if col.IsNull(0) {
			continue
		}
		switch a := col.(type) {
		case *array.Float64:
			out = append(out, Point{Tag(f.Name), a.Value(0)})
		case *array.Int64:
			out = append(out, Point{Tag(f.Name), float64(a.Value(0))})
		case *array.Int32:
			out = append(out, Point{Tag(f.Name), float64(a.Value(0))})
		default:
			if f.Type.ID() != arrow.STRING {
				panic(fmt.Sprintf("track: steps column %s has type %s, which has no scalar", f.Name, f.Type))
			}
		}
	}
	return out
}

// Status is how a tracker run ends.
type Status string

const (
	Finished Status = "FINISHED"
	Failed   Status = "FAILED"
	Killed   Status = "KILLED"
)

// Sink is one tracker's connection. The hub calls it from one goroutine.
type Sink interface {
	// Write records events, in order. An error leaves them unrecorded: the
	// hub retries the same events later, unless the error is Permanent.
	Write(ctx context.Context, evs []Event) error
	// Close ends the tracker's run with status.
	Close(ctx context.Context, status Status) error
}

// Opener opens a tracker for a run at start-up. last is the last step the
// tracker already holds from earlier sessions of the run (-1: none); the
// hub sends it nothing at or before last. An error stops the run before
// its first step.
type Opener func(ctx context.Context, s Settings, r Run) (sink Sink, last int64, err error)

var openers = map[string]Opener{}

// Register makes a tracker available by name; a tracker's file calls it
// from init.
func Register(name string, o Opener) {
	if _, dup := openers[name]; dup || name == Console {
		panic("track: tracker " + name + " registered twice")
	}
	openers[name] = o
}

// Names lists the trackers: console and the registered ones, sorted.
func Names() []string {
	out := []string{Console}
	for n := range openers {
		out = append(out, n)
	}
	slices.Sort(out[1:])
	return out
}

// permanent marks an error retrying cannot fix.
type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }
func (p permanent) Unwrap() error { return p.err }

// Permanent wraps err so that the hub drops the events instead of retrying.
func Permanent(err error) error { return permanent{err} }

// IsPermanent reports whether err was wrapped by Permanent.
func IsPermanent(err error) bool {
	var p permanent
	return errors.As(err, &p)
}
