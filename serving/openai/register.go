package openai

import (
	"log/slog"

	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/serving/roles"
)

// The openai backend: a role served by OpenAI-compatible servers, and a
// fleet that generates for a trained role (NewFleet).
func init() {
	roles.Register(roles.BackendSpec{
		Name:    roles.BackendOpenAI,
		Summary: "OpenAI-compatible servers: vLLM, SGLang, 'evolm serve'",
		Fields:  roleFields,
		Check: func(c roles.Config, sec *pipeline.Config) error {
			if len(c.Endpoints) == 0 {
				return sec.Errorf(roles.KeyEndpoints, "the openai backend needs at least one endpoint")
			}
			return nil
		},
		Open:  openRole,
		Fleet: openFleet,
	})
}

func roleFields(role string) []pipeline.Field {
	zero, one := pipeline.Bound(0), pipeline.Bound(1)
	// Volatile: where the servers are and how they are called may change on
	// resume (servers restarted elsewhere); the model name may not.
	fs := []pipeline.Field{
		{Key: roles.KeyEndpoints, Type: pipeline.TypeStrings, Default: []string{}, Volatile: true,
			Description: "openai: base URLs of the servers", Example: []string{"http://127.0.0.1:8000/v1"}},
		{Key: roles.KeyInFlight, Type: pipeline.TypeInt, Default: 16, Min: one, Max: pipeline.Bound(1 << 16), Volatile: true, Description: "openai: most requests in flight over all endpoints"},
		{Key: roles.KeyTimeout, Type: pipeline.TypeDuration, Default: "10m", Min: zero, ExclusiveMin: true, Volatile: true, Description: "openai: timeout of one HTTP attempt"},
		{Key: roles.KeyAttempts, Type: pipeline.TypeInt, Default: 6, Min: one, Max: pipeline.Bound(100), Volatile: true, Description: "openai: attempts per request (retries on 429, 5xx, timeouts)"},
	}
	if role == roles.Judge {
		fs = append(fs, pipeline.Field{Key: roles.KeyTopLogprobs, Type: pipeline.TypeInt, Default: 20, Min: zero, Max: pipeline.Bound(1 << 18),
			Description: "openai yesno: alternatives asked per scored position (vLLM caps it at 20); a candidate outside them has no mass"})
	}
	return fs
}

func openRole(c roles.Config, log *slog.Logger) (*roles.Backend, error) {
	cl, err := New(Config{Endpoints: c.Endpoints, Model: c.Model, MaxInFlight: c.MaxInFlight,
		MaxAttempts: c.MaxAttempts, RequestTimeout: c.RequestTimeout, ScoreTopLogprobs: c.TopLogprobs, Logger: log})
	if err != nil {
		return nil, err
	}
	return roles.NewBackend(roles.BackendOpenAI, cl.Model(), cl, cl, nil, cl.Close), nil
}

func openFleet(o roles.FleetOptions) (roles.Fleet, error) {
	return NewFleet(FleetConfig{Endpoints: o.Endpoints, MaxInFlight: o.MaxInFlight, MaxAttempts: o.MaxAttempts,
		RequestTimeout: o.RequestTimeout, Mode: o.Mode, Dir: o.Dir, Run: FleetRunName(o.RunDir), Role: o.Role,
		Encode: o.Encode, EndID: o.EndID, Log: o.Log})
}
