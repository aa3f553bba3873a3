package sft

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"

	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/serving/roles"
)

// dataParallel is the stage's data-parallel group (nil: one process),
// opened under torchrun's variables (evolm sft --nproc N, or torchrun)
// through the trained role's backend. Every rank reads and tokenizes the
// same input and takes the same steps: the learner trains each rank's block
// of the global batch's micro-batches and all-reduces the gradients
// (backend.LearnerConfig.Group), so a step equals the one-process step.
// Rank 0 alone writes the steps rows, the checkpoints and the final model,
// but for each rank's optimizer shard at zero_stage ≥ 1, and reports to the
// trackers.
type dataParallel struct {
	g backend.Group
}

// openDP joins the group WORLD_SIZE > 1 names, or returns nil.
func openDP(ctx context.Context, c *Config) (*dataParallel, error) {
	if n, err := strconv.Atoi(os.Getenv("WORLD_SIZE")); err != nil || n <= 1 {
		return nil, nil
	}
	g, err := roles.OpenGroup(ctx, roles.GroupOptions{Timeout: c.DistTimeout, Roles: []*roles.Config{&c.Model}})
	if err != nil {
		return nil, err
	}
	return &dataParallel{g: g}, nil
}

func (d *dataParallel) close() {
	if d != nil {
		_ = d.g.Close()
	}
}

// lead reports whether this process writes the outputs: rank 0, or the
// only process.
func (d *dataParallel) lead() bool { return d == nil || d.g.Rank() == 0 }

func (d *dataParallel) rank() int {
	if d == nil {
		return 0
	}
	return d.g.Rank()
}

func (d *dataParallel) world() int {
	if d == nil {
		return 1
	}
	return d.g.WorldSize()
}

// peerErr words a failed collective: which ranks may have died.
func (d *dataParallel) peerErr(what string, err error) error {
	return fmt.Errorf("data-parallel rank %d of %d: %s: %w\n(another rank died, failed or stalled past dist_timeout; rank 0 commits a step only after its collectives succeed: rerun the same command to resume from the last checkpoint)",
		d.g.Rank(), d.g.WorldSize(), what, err)
}

// barrier waits for every rank.
func (d *dataParallel) barrier(what string) error {
	if d == nil {
		return nil
	}
	if err := d.g.Barrier(); err != nil {
		return d.peerErr(what, err)
	}
	return nil
}

// gather runs compute on every rank and returns each rank's result, in
// rank order (one process: its own). A rank's error reaches every rank, so
// that all fail together with the same message.
func gather[T any](d *dataParallel, what string, compute func() (T, error)) ([]T, error) {
	v, err := compute()
	if d == nil {
		return []T{v}, err
	}
	type msg struct {
		V   T
		Err string
	}
	m := msg{V: v}
	if err != nil {
		m = msg{Err: err.Error()}
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("%s: encode: %w", what, err)
	}
	parts, err := d.g.AllGatherBytes(b)
	if err != nil {
		return nil, d.peerErr(what, err)
	}
	out := make([]T, len(parts))
	for k, p := range parts {
		var mk msg
		if err := json.Unmarshal(p, &mk); err != nil {
			return nil, fmt.Errorf("%s: rank %d's answer: %w", what, k, err)
		}
		if mk.Err != "" {
			return nil, fmt.Errorf("%s on rank %d: %s", what, k, mk.Err)
		}
		out[k] = mk.V
	}
	return out, nil
}

// agree runs decide on rank 0 and hands its result, or its error, to every
// rank.
func agree[T any](d *dataParallel, what string, decide func() (T, error)) (T, error) {
	all, err := gather(d, what, func() (T, error) {
		var zero T
		if !d.lead() {
			return zero, nil
		}
		return decide()
	})
	if err != nil {
		var zero T
		return zero, err
	}
	return all[0], nil
}
