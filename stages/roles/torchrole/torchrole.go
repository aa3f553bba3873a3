// Package torchrole registers the `torch` backend of package roles: a role
// whose backend is torch runs in process on model/torchbe. Import it for
// its side effect wherever roles are opened in process (cmd/evolm, tests):
//
//	import _ "github.com/evolm/evolm/stages/roles/torchrole"
package torchrole

import (
	"log/slog"

	"github.com/evolm/evolm/model/torchbe"
	"github.com/evolm/evolm/stages/roles"
)

func init() { roles.RegisterBackend(roles.BackendTorch, open) }

// Options are the torchbe load options of a role.
func Options(c roles.Config, dir, id string) torchbe.Options {
	return torchbe.Options{Dir: dir, ModelID: id, Device: c.Device, DType: c.DType, Threads: c.Threads,
		MaxBatch: c.MaxBatch, DisableThinking: c.DisableThinking}
}

func open(c roles.Config, _ *slog.Logger) (*roles.Backend, error) {
	m, err := torchbe.Load(Options(c, c.Model, ""))
	if err != nil {
		return nil, err
	}
	return roles.NewBackend(roles.BackendTorch, m.ID(), m, m, m, m.Close), nil
}
