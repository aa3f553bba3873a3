package run

import (
	"strings"
	"testing"

	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/pipeline/track"
)

// TestTrackerKeys: the tracker keys become track.Settings; an unknown or
// repeated tracker, a tag without '=', an MLflow tracker with no server and
// an unknown W&B mode are refused, naming the key.
func TestTrackerKeys(t *testing.T) {
	t.Setenv("MLFLOW_TRACKING_URI", "")
	base := map[string]any{"roles.policy.model": "p", "roles.judge.model": "j"}
	read := func(set map[string]any) (*Config, error) {
		vals := map[string]any{}
		for k, v := range base {
			vals[k] = v
		}
		for k, v := range set {
			vals[k] = v
		}
		cfg, err := pipeline.StageConfig(Name, vals)
		if err != nil {
			return nil, err
		}
		return FromConfig(cfg)
	}
	c, err := read(nil)
	if err != nil {
		t.Fatal(err)
	}
	if s := c.Track; len(s.Trackers) != 1 || s.Trackers[0] != track.Console || s.Queue != 10000 || s.WandbMode != "online" {
		t.Errorf("default trackers %+v", s)
	}
	c, err = read(map[string]any{"trackers": []string{"console", "tensorboard", "mlflow"}, "mlflow_tracking_uri": "http://127.0.0.1:5000",
		"tracker_tags": []string{"team=rl", "exp=a=b"}})
	if err != nil {
		t.Fatal(err)
	}
	if s := c.Track; len(s.Trackers) != 3 || s.Tags["team"] != "rl" || s.Tags["exp"] != "a=b" || s.MLflowURI != "http://127.0.0.1:5000" {
		t.Errorf("trackers %+v", s)
	}
	for _, tc := range []struct {
		name string
		set  map[string]any
		want string
	}{
		{"unknown tracker", map[string]any{"trackers": []string{"comet"}}, `stages.run.trackers`},
		{"repeated tracker", map[string]any{"trackers": []string{"tensorboard", "tensorboard"}}, "listed twice"},
		{"tag without =", map[string]any{"tracker_tags": []string{"team"}}, "stages.run.tracker_tags"},
		{"mlflow without a server", map[string]any{"trackers": []string{"mlflow"}}, "stages.run.mlflow_tracking_uri"},
		{"unknown wandb mode", map[string]any{"wandb_mode": "disabled"}, "wandb_mode"},
	} {
		if _, err := read(tc.set); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error = %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}
