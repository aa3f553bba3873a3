package track_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/pipeline/track"
	"github.com/evolm/evolm/schemas"
)

// testStageKeys are a training stage's keys: its own, and the tracker keys
// embedded.
type testStageKeys struct {
	Steps int `key:"steps" default:"8" min:"1" help:"steps"`
	track.Keys
}

func init() {
	pipeline.Register(pipeline.Spec{
		Name: "trackstage", Summary: "a stage that reports to trackers",
		FieldsFunc: func() ([]pipeline.Field, error) { return pipeline.FieldsOf(testStageKeys{}) },
		Volatile:   pipeline.VolatileOf(testStageKeys{}),
		New: func(cfg *pipeline.Config) (pipeline.Stage, error) {
			return pipeline.StageFunc(func(context.Context, *pipeline.Env) error { return nil }), nil
		},
	})
}

// TestKeysSettings: the tracker keys embedded in a stage's keys become
// Settings; bad values are refused naming the stage's key.
func TestKeysSettings(t *testing.T) {
	t.Setenv("MLFLOW_TRACKING_URI", "")
	settings := func(vals map[string]any) (track.Settings, error) {
		cfg, err := pipeline.StageConfig("trackstage", vals)
		if err != nil {
			return track.Settings{}, err
		}
		var k testStageKeys
		if err := pipeline.Bind(cfg, &k); err != nil {
			return track.Settings{}, err
		}
		return k.Settings(cfg)
	}
	s, err := settings(map[string]any{"trackers": []string{"console", "tensorboard"}, "tracker_tags": []string{"team=rl"}, "tracker_flush_timeout": "5s"})
	if err != nil {
		t.Fatal(err)
	}
	want := track.Settings{Trackers: []string{"console", "tensorboard"}, Tags: map[string]string{"team": "rl"}, Queue: 10000,
		FlushTimeout: 5 * time.Second, MLflowExperiment: "evolm", WandbProject: "evolm", WandbMode: "online"}
	if d := cmp.Diff(want, s); d != "" {
		t.Errorf("settings (-want +got):\n%s", d)
	}
	for _, tc := range []struct {
		vals map[string]any
		want string
	}{
		{map[string]any{"trackers": []string{"comet"}}, "stages.trackstage.trackers"},
		{map[string]any{"trackers": []string{"console", "console"}}, "listed twice"},
		{map[string]any{"tracker_tags": []string{"=x"}}, "stages.trackstage.tracker_tags"},
		{map[string]any{"trackers": []string{"mlflow"}}, "stages.trackstage.mlflow_tracking_uri"},
	} {
		if _, err := settings(tc.vals); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.vals, err, tc.want)
		}
	}
	vol := pipeline.VolatileOf(testStageKeys{})
	if len(vol) != 12 {
		t.Errorf("volatile keys %v: want the 12 tracker keys", vol)
	}
}

// TestOpenStage: a stage's trackers report its run directory under their
// own subdirectory and name, with the section's keys in messages; on resume
// they are sent the committed steps rows after the last step they hold and
// before the session's first step, once.
func TestOpenStage(t *testing.T) {
	cfg, err := pipeline.StageConfig("trackstage", map[string]any{"trackers": []string{"console", "test-double"}})
	if err != nil {
		t.Fatal(err)
	}
	var k testStageKeys
	if err := pipeline.Bind(cfg, &k); err != nil {
		t.Fatal(err)
	}
	s, err := k.Settings(cfg)
	if err != nil {
		t.Fatal(err)
	}
	run, err := pipeline.OpenRun(filepath.Join(t.TempDir(), "warm"))
	if err != nil {
		t.Fatal(err)
	}
	log, _ := newLog()
	env := &pipeline.Env{Stage: "trackstage", Run: run, Out: run, Mem: memory.DefaultAllocator, Log: log, Config: cfg, ConfigHash: "sha256:test"}
	for step := range 6 { // committed by an earlier session
		commitStep(t, env, step)
	}
	d := &doubleSink{}
	nextDouble, nextLast = d, 1 // the tracker holds steps 0 and 1
	h, err := track.OpenStage(context.Background(), s, env, "sub", 5)
	if err != nil {
		t.Fatal(err)
	}
	steps(h, 5, 7)
	h.Close(track.StatusOf(nil))
	if diff := cmp.Diff(seq(2, 7), d.steps); diff != "" {
		t.Errorf("delivered (-want +got):\n%s", diff)
	}
	if d.closed != track.Finished {
		t.Errorf("closed %q", d.closed)
	}
	if openedWith.RunName != "warm-sub" || openedWith.Section != "stages.trackstage" {
		t.Errorf("run name %q, section %q", openedWith.RunName, openedWith.Section)
	}
	if got, want := openedRun.StateDir(), filepath.Join(run.Dir, "trackers", "sub"); got != want {
		t.Errorf("state dir %s, want %s", got, want)
	}
	params := map[string]any{}
	for _, p := range openedRun.Params {
		params[p.Key] = p.Value
	}
	if openedRun.ConfigHash != "sha256:test" || params["stages.trackstage.steps"] != 8 {
		t.Errorf("run %+v", openedRun)
	}
	if track.StatusOf(context.Canceled) != track.Killed || track.StatusOf(context.DeadlineExceeded) != track.Failed {
		t.Error("StatusOf")
	}
}

// commitStep commits a steps row of step as a stage does.
func commitStep(t *testing.T, env *pipeline.Env, step int) {
	t.Helper()
	rel := pipeline.ShardPath(schemas.Steps.Name, 0, pipeline.Phase("sft"), pipeline.Step(step))
	w, err := pipeline.CreateShard(env.Out.Path(rel), schemas.Steps.Schema(), pipeline.WriteOptions{Mem: env.Mem})
	if err != nil {
		t.Fatal(err)
	}
	rec := schemas.Steps.Build(env.Mem, []schemas.StepMetrics{{Step: int64(step), Phase: "sft", Loss: float64(step)}})
	defer rec.Release()
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Out.Commit(w, rel, env.Provenance(), ""); err != nil {
		t.Fatal(err)
	}
}
