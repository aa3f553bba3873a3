package main

import (
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/evolm/evolm/method/grpo"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/serving/roles"
)

// A backend and a rubric reward that exist only in this test file, each
// registered the way a real one registers (one registration, no edit
// elsewhere), to show that the config, its enums and --help come from the
// registries.
const (
	doubleBackend = "testdouble"
	doubleReward  = "test_inverted_margin"
)

var errDoubleOpened = errors.New("test double backend opened")

func init() {
	roles.Register(roles.BackendSpec{
		Name:    doubleBackend,
		Summary: "a test double that only this test file registers",
		Fields: func(string) []pipeline.Field {
			return []pipeline.Field{{Key: "double_knob", Type: pipeline.TypeInt, Default: 3, Min: pipeline.Bound(1),
				Description: "testdouble: a key only this backend declares"}}
		},
		Open: func(c roles.Config, _ *slog.Logger) (*roles.Backend, error) {
			return nil, errDoubleOpened
		},
	})
	grpo.RubricRewards.Register(doubleReward, "−(s+ − s−): a test-only reward", func(in grpo.RubricInput) float64 {
		return in.SMinus - in.SPlus
	})
}

// TestRegisteredVariantsPlugIn: a backend registered in a test file is a
// value of every role's backend key, brings its own key (flag, env var,
// bounds) and appears in --help; a rubric reward registered the same way is
// a value of stages.run.rubric_reward, appears in --help, and the loop's
// reward computation uses it.
func TestRegisteredVariantsPlugIn(t *testing.T) {
	out, err := run(t, "run", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{doubleBackend, "--judge-double-knob", "--policy-double-knob", doubleReward} {
		if !strings.Contains(out, want) {
			t.Errorf("run --help lacks %q", want)
		}
	}
	cfg, err := pipeline.LoadConfig(pipeline.LoadOptions{Env: []string{
		"EVOLM_ROLES_JUDGE_BACKEND=" + doubleBackend, "EVOLM_ROLES_JUDGE_DOUBLE_KNOB=5", "EVOLM_ROLES_JUDGE_MODEL=m",
		"EVOLM_STAGES_RUN_RUBRIC_REWARD=" + doubleReward,
	}})
	if err != nil {
		t.Fatalf("a config naming the test backend and reward: %v", err)
	}
	rc, err := roles.Read(cfg, roles.Judge)
	if err != nil {
		t.Fatal(err)
	}
	if rc.Backend != doubleBackend || rc.Engine.Int("double_knob") != 5 {
		t.Errorf("judge: backend %q, double_knob %d", rc.Backend, rc.Engine.Int("double_knob"))
	}
	if _, err := roles.Open(rc, slog.Default()); !errors.Is(err, errDoubleOpened) {
		t.Errorf("opening the judge: %v, want the test backend's opener", err)
	}
	if _, err := pipeline.LoadConfig(pipeline.LoadOptions{Env: []string{"EVOLM_ROLES_JUDGE_DOUBLE_KNOB=0"}}); err == nil ||
		!strings.Contains(err.Error(), "roles.judge.double_knob") {
		t.Errorf("double_knob below its bound: %v", err)
	}
	r, ok, err := grpo.RubricPairReward(doubleReward, grpo.RubricInput{SPlus: 0.9, SMinus: 0.2, Alpha: 0.7})
	if err != nil || !ok || r != 0.2-0.9 {
		t.Errorf("the test reward through the registry: %v, %v, %v", r, ok, err)
	}
	if _, err := pipeline.LoadConfig(pipeline.LoadOptions{Env: []string{"EVOLM_STAGES_RUN_RUBRIC_REWARD=no_such_reward"}}); err == nil ||
		!strings.Contains(err.Error(), doubleReward) {
		t.Errorf("an unknown reward: %v, want the error to list the registered ones", err)
	}
}
