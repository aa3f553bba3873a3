package pipeline_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/pipeline"
)

// A base config (a source run's saved config.yaml) replaces the defaults of
// the sections given, under what the command set; the keys the command
// changed from it are reported.
func TestConfigWithBase(t *testing.T) {
	base := filepath.Join(t.TempDir(), "config.yaml")
	err := os.WriteFile(base, []byte(`stages:
  testuser:
    n: 9
  gone_stage:
    x: 1
testroles:
  actor:
    model: saved-model
    temperature: 0.1
    top_p: 0.9
    removed_key: 3
`), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := pipeline.LoadConfig(pipeline.LoadOptions{Env: []string{"EVOLM_TESTROLES_ACTOR_TEMPERATURE=0.7"}})
	if err != nil {
		t.Fatal(err)
	}
	got, changes, err := cfg.WithBase(base, []string{"testroles.actor"})
	if err != nil {
		t.Fatal(err)
	}
	actor := got.At("testroles.actor")
	if actor.String("model") != "saved-model" || actor.Float("top_p") != 0.9 || actor.Float("temperature") != 0.7 {
		t.Errorf("values %v, want the base's model and top_p, the env's temperature", actor.Map())
	}
	if src := actor.Source("model"); src != "base config "+base {
		t.Errorf("model's source %q", src)
	}
	// Only the sections given: stages.testuser.n keeps its default.
	if n := got.Int("stages.testuser.n"); n != 2 {
		t.Errorf("stages.testuser.n = %d, want the default 2", n)
	}
	// The original is untouched.
	if m := cfg.String("testroles.actor.model"); m != "" {
		t.Errorf("WithBase changed its receiver: model %q", m)
	}
	var lines []string
	for _, c := range changes {
		lines = append(lines, c.String())
	}
	want := []string{"testroles.actor.temperature: 0.7 (env EVOLM_TESTROLES_ACTOR_TEMPERATURE), was 0.1 in " + base}
	if diff := cmp.Diff(want, lines); diff != "" {
		t.Errorf("changes (-want +got):\n%s", diff)
	}
	// A base value its key's field refuses is an error naming the key.
	os.WriteFile(base, []byte("testroles:\n  actor:\n    top_p: 2\n"), 0o644)
	if _, _, err := cfg.WithBase(base, []string{"testroles.actor"}); err == nil || !strings.Contains(err.Error(), "testroles.actor.top_p") {
		t.Errorf("bad base value: %v", err)
	}
}
