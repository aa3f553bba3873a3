package sft

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/serving/roles"
)

// A checkpoint is checkpoints/step-NNNNNN/: model/ (what the trainer saves:
// an HF checkpoint, or the LoRA adapter), optimizer.safetensors (with the
// optimizer state sharded at zero_stage ≥ 1, each rank's
// optimizer.rank-K-of-N.safetensors) and state.json (the next step, the
// config hash, the data-parallel world). It is written to a temporary
// directory and renamed, so a crash never leaves a partial one under its
// name.
type checkpoints struct {
	env *pipeline.Env
	cfg *Config
	dp  *dataParallel
}

type state struct {
	Step       int    `json:"step"` // the next step to take
	ConfigHash string `json:"config_hash"`
	// WorldSize and ZeRO are the data-parallel ranks and sharding stage
	// that wrote the checkpoint (absent: one process).
	WorldSize int `json:"world_size,omitempty"`
	ZeRO      int `json:"zero_stage,omitempty"`
}

const (
	ckptDir   = "checkpoints"
	modelDir  = "model"
	optimFile = "optimizer.safetensors"
	stateFile = "state.json"
)

func (c checkpoints) dir() string { return c.env.Out.Path(ckptDir) }

// sharded reports whether each rank saves its own optimizer file.
func (c checkpoints) sharded() bool { return c.dp != nil && c.cfg.ZeRO > 0 }

// optimizerName is this rank's optimizer file in a checkpoint.
func (c checkpoints) optimizerName() string {
	if !c.sharded() {
		return optimFile
	}
	return fmt.Sprintf("optimizer.rank-%d-of-%d.safetensors", c.dp.rank(), c.dp.world())
}

// resume is what this rank loads from checkpoint name (nil: none).
func (c checkpoints) resume(name string) *roles.Resume {
	if name == "" {
		return nil
	}
	d := filepath.Join(c.dir(), name)
	return &roles.Resume{Dir: filepath.Join(d, modelDir), Optimizer: filepath.Join(d, c.optimizerName())}
}

// latest returns the name of the newest complete checkpoint to resume from
// and its next step ("" and 0 when there is none). A checkpoint made under
// another config, or with its optimizer state sharded over another number
// of ranks, is refused.
func (c checkpoints) latest() (string, int, error) {
	ents, err := os.ReadDir(c.dir())
	if os.IsNotExist(err) {
		return "", 0, nil
	}
	if err != nil {
		return "", 0, err
	}
	var names []string
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), "step-") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	for i := len(names) - 1; i >= 0; i-- {
		d := filepath.Join(c.dir(), names[i])
		b, err := os.ReadFile(filepath.Join(d, stateFile))
		if err != nil {
			continue // not a complete checkpoint
		}
		var st state
		if err := json.Unmarshal(b, &st); err != nil {
			return "", 0, fmt.Errorf("checkpoint %s: %s: %w", d, stateFile, err)
		}
		if st.ConfigHash != c.env.ConfigHash {
			return "", 0, fmt.Errorf("checkpoint %s was made under another stages.sft config (hash %s, now %s); rerun with --fresh to start over", d, st.ConfigHash, c.env.ConfigHash)
		}
		if ws := max(st.WorldSize, 1); st.ZeRO > 0 && ws > 1 && ws != c.dp.world() {
			return "", 0, fmt.Errorf("checkpoint %s was written by %d data-parallel ranks at zero_stage %d (the optimizer state is sharded in %d files); this run has %d: rerun with --nproc %d (or torchrun with %d processes), or start over with --fresh",
				d, ws, st.ZeRO, ws, c.dp.world(), ws, ws)
		}
		c.env.Log.Info("sft resumes", "checkpoint", d, "step", st.Step)
		return names[i], st.Step, nil
	}
	return "", 0, nil
}

// save writes the checkpoint taken before step next and removes older
// ones. Under data parallelism rank 0 writes the model and state.json, and
// the optimizer state (each rank its shard at zero_stage ≥ 1), between
// barriers.
func (c checkpoints) save(ctx context.Context, tr backend.SFTTrainer, next int) (name string, err error) {
	name = fmt.Sprintf("step-%06d", next)
	tmp := filepath.Join(c.dir(), ".tmp-"+name)
	if c.dp.lead() {
		if err := os.RemoveAll(tmp); err != nil {
			return "", err
		}
		if err := os.MkdirAll(tmp, 0o755); err != nil {
			return "", err
		}
		if _, err := tr.Save(ctx, filepath.Join(tmp, modelDir)); err != nil {
			return "", fmt.Errorf("checkpoint %s: %w", name, err)
		}
	}
	if err := c.dp.barrier("checkpoint " + name); err != nil {
		return "", err
	}
	if c.dp.lead() || c.sharded() {
		if err := tr.SaveOptimizer(filepath.Join(tmp, c.optimizerName())); err != nil {
			return "", fmt.Errorf("checkpoint %s: %w", name, err)
		}
	}
	if err := c.dp.barrier("checkpoint " + name); err != nil {
		return "", err
	}
	if !c.dp.lead() {
		return name, nil
	}
	st := state{Step: next, ConfigHash: c.env.ConfigHash}
	if c.dp != nil {
		st.WorldSize, st.ZeRO = c.dp.world(), c.cfg.ZeRO
	}
	b, _ := json.Marshal(st)
	if err := os.WriteFile(filepath.Join(tmp, stateFile), b, 0o644); err != nil {
		return "", err
	}
	final := filepath.Join(c.dir(), name)
	if err := os.RemoveAll(final); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, final); err != nil {
		return "", err
	}
	ents, err := os.ReadDir(c.dir())
	if err != nil {
		return "", err
	}
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), "step-") && e.Name() < name {
			if err := os.RemoveAll(filepath.Join(c.dir(), e.Name())); err != nil {
				return "", err
			}
		}
	}
	return name, nil
}

// export writes the final model to the output directory (default
// <run>/model) once it is complete: to a sibling temporary directory first,
// which then replaces the old output. Rank 0 alone writes it.
func (c checkpoints) export(ctx context.Context, tr backend.SFTTrainer, total int) error {
	if !c.dp.lead() {
		return nil
	}
	out := c.cfg.Output
	if out == "" {
		out = c.env.Out.Path(modelDir)
	}
	tmp := out + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if _, err := tr.Save(ctx, tmp); err != nil {
		return fmt.Errorf("output %s: %w", out, err)
	}
	old := out + ".old"
	_ = os.RemoveAll(old)
	if _, err := os.Stat(out); err == nil {
		if err := os.Rename(out, old); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp, out); err != nil {
		return err
	}
	_ = os.RemoveAll(old)
	c.env.Log.Info("sft done", "steps", total, "model", out)
	return nil
}
