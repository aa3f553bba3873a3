package trained

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/evolm/evolm/serving/roles"
)

func TestOpenDispatchesOnTheBackend(t *testing.T) {
	c := roles.Config{Role: roles.Policy, Backend: roles.BackendTorch, Model: "m"}
	if _, err := Open(c, Options{}, slog.Default()); err == nil || !strings.Contains(err.Error(), "torchrole") {
		t.Errorf("torch not linked: %v", err)
	}
	c.Backend = roles.BackendOpenAI
	if _, err := Open(c, Options{}, slog.Default()); err == nil || !strings.Contains(err.Error(), "cannot train") {
		t.Errorf("openai: %v", err)
	}
	var got Options
	Register("fake", func(c roles.Config, opt Options, _ *slog.Logger) (*Role, error) {
		got = opt
		return &Role{Backend: roles.NewBackend("fake", c.Model, nil, nil, nil, nil)}, nil
	})
	defer openers.Unregister("fake")
	c.Backend = "fake"
	r, err := Open(c, Options{Resume: &Resume{Dir: "d", Optimizer: "o"}}, slog.Default())
	if err != nil || r.Model != "m" || got.Resume == nil || got.Resume.Optimizer != "o" {
		t.Errorf("fake: %+v, %v, options %+v", r, err, got)
	}
}
