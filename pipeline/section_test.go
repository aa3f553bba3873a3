package pipeline_test

import (
	"context"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/evolm/evolm/pipeline"
)

// A section and a stage that uses it, registered for these tests only.
func init() {
	pipeline.RegisterSection(pipeline.SectionSpec{Name: "testroles.actor", Summary: "a test role", Flag: "actor", Fields: []pipeline.Field{
		{Key: "model", Type: pipeline.TypeString, Default: "", Description: "model"},
		{Key: "temperature", Type: pipeline.TypeFloat, Default: 0.5, Min: pipeline.Bound(0), Description: "temperature"},
		{Key: "top_p", Type: pipeline.TypeFloat, Default: 1.0, Min: pipeline.Bound(0), ExclusiveMin: true, Max: pipeline.Bound(1), Description: "top_p"},
		{Key: "threads", Type: pipeline.TypeInt, Default: 0, Volatile: true, Description: "threads"},
	}})
	pipeline.Register(pipeline.Spec{
		Name: "testuser", Summary: "uses testroles.actor",
		Fields: []pipeline.Field{{Key: "n", Type: pipeline.TypeInt, Default: 2, Min: pipeline.Bound(1), Description: "n"}},
		Uses:   []string{"testroles.actor"},
		Moved:  map[string]string{"actor_model": "testroles.actor.model"},
		New: func(cfg *pipeline.Config) (pipeline.Stage, error) {
			return pipeline.StageFunc(func(context.Context, *pipeline.Env) error { return nil }), nil
		},
	})
}

func TestSectionKeysEnvFlagsAndHash(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	spec, _ := pipeline.Lookup("testuser")
	if err := pipeline.AddStageFlags(fs, spec); err != nil {
		t.Fatal(err)
	}
	if err := fs.Parse([]string{"--actor-temperature", "0.25"}); err != nil {
		t.Fatal(err)
	}
	cfg, err := pipeline.LoadConfig(pipeline.LoadOptions{Env: []string{"EVOLM_TESTROLES_ACTOR_MODEL=m"}, Flags: pipeline.FlagKeys(fs)})
	if err != nil {
		t.Fatal(err)
	}
	view := pipeline.StageView(cfg, spec)
	actor := view.At("testroles.actor")
	if actor.String("model") != "m" || actor.Float("temperature") != 0.25 || actor.Source("temperature") != "flag --actor-temperature" {
		t.Errorf("section values %v", actor.Map())
	}
	// The stage's config file and hash cover the section it uses.
	b, err := view.FileYAML()
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if _, ok := doc["testroles"]; !ok {
		t.Errorf("stage config file lacks its section:\n%s", b)
	}
	other, err := pipeline.LoadConfig(pipeline.LoadOptions{Env: []string{"EVOLM_TESTROLES_ACTOR_MODEL=other"}})
	if err != nil {
		t.Fatal(err)
	}
	if pipeline.StageView(other, spec).Hash() == view.Hash() {
		t.Error("changing a used section's key does not change the stage's hash")
	}
	if _, err := pipeline.LoadConfig(pipeline.LoadOptions{Env: []string{"EVOLM_TESTROLES_ACTOR_MODLE=x"}}); err == nil || !strings.Contains(err.Error(), "EVOLM_TESTROLES_ACTOR_MODLE") {
		t.Errorf("misspelt section env var: %v", err)
	}
}

func TestMovedKeysNameTheirNewPlace(t *testing.T) {
	file := writeFile(t, "old.yaml", "stages:\n  testuser:\n    actor_model: m\n")
	_, err := pipeline.LoadConfig(pipeline.LoadOptions{File: file})
	if err == nil || !strings.Contains(err.Error(), "stages.testuser.actor_model has moved to testroles.actor.model") {
		t.Errorf("file: %v", err)
	}
	_, err = pipeline.LoadConfig(pipeline.LoadOptions{Env: []string{"EVOLM_STAGES_TESTUSER_ACTOR_MODEL=m"}})
	if err == nil || !strings.Contains(err.Error(), "has moved to testroles.actor.model") {
		t.Errorf("env: %v", err)
	}
}

func TestFieldBounds(t *testing.T) {
	for _, tc := range []struct {
		env, want string
	}{
		{"EVOLM_TESTROLES_ACTOR_TEMPERATURE=-0.1", "testroles.actor.temperature (from env EVOLM_TESTROLES_ACTOR_TEMPERATURE): -0.1, want ≥ 0"},
		{"EVOLM_TESTROLES_ACTOR_TOP_P=0", "want in (0, 1]"},
		{"EVOLM_TESTROLES_ACTOR_TOP_P=1.5", "want in (0, 1]"},
		{"EVOLM_TESTROLES_ACTOR_TOP_P=NaN", "testroles.actor.top_p"},
		{"EVOLM_STAGES_TESTUSER_N=0", "stages.testuser.n (from env EVOLM_STAGES_TESTUSER_N): 0, want ≥ 1"},
	} {
		_, err := pipeline.LoadConfig(pipeline.LoadOptions{Env: []string{tc.env}})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.env, err, tc.want)
		}
	}
	for _, env := range []string{"EVOLM_TESTROLES_ACTOR_TOP_P=1", "EVOLM_TESTROLES_ACTOR_TEMPERATURE=0"} {
		if _, err := pipeline.LoadConfig(pipeline.LoadOptions{Env: []string{env}}); err != nil {
			t.Errorf("%s: %v", env, err)
		}
	}
	if _, err := pipeline.StageConfig("testuser", map[string]any{"testroles.actor.top_p": 2.0}); err == nil || !strings.Contains(err.Error(), "testroles.actor.top_p") {
		t.Errorf("StageConfig bound: %v", err)
	}
}

// A volatile key of a used section (a thread count) is left out of the
// stage's config hash: changing it alone does not block a resume.
func TestSectionVolatileKeys(t *testing.T) {
	spec, _ := pipeline.Lookup("testuser")
	hash := func(env ...string) string {
		cfg, err := pipeline.LoadConfig(pipeline.LoadOptions{Env: env})
		if err != nil {
			t.Fatal(err)
		}
		return pipeline.StageView(cfg, spec).HashExcept(spec.Volatile...)
	}
	base := hash()
	if h := hash("EVOLM_TESTROLES_ACTOR_THREADS=8"); h != base {
		t.Errorf("threads changed the hash: %s → %s", base, h)
	}
	if h := hash("EVOLM_TESTROLES_ACTOR_TEMPERATURE=0.9"); h == base {
		t.Errorf("temperature did not change the hash")
	}
}
