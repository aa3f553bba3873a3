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
// an HF checkpoint, or the LoRA adapter), optimizer.safetensors and
// state.json (the next step and the config hash). It is written to a
// temporary directory and renamed, so a crash never leaves a partial one
// under its name.
type checkpoints struct {
	env *pipeline.Env
	cfg *Config
}

type state struct {
	Step       int    `json:"step"` // the next step to take
	ConfigHash string `json:"config_hash"`
}

const (
	ckptDir   = "checkpoints"
	modelDir  = "model"
	optimFile = "optimizer.safetensors"
	stateFile = "state.json"
)

func (c checkpoints) dir() string { return c.env.Out.Path(ckptDir) }

// latest returns the newest complete checkpoint to resume from (nil and
// step 0 when there is none). A checkpoint made under another config is
// refused.
func (c checkpoints) latest() (*roles.Resume, int, error) {
	ents, err := os.ReadDir(c.dir())
	if os.IsNotExist(err) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
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
			return nil, 0, fmt.Errorf("checkpoint %s: %s: %w", d, stateFile, err)
		}
		if st.ConfigHash != c.env.ConfigHash {
			return nil, 0, fmt.Errorf("checkpoint %s was made under another stages.sft config (hash %s, now %s); rerun with --fresh to start over", d, st.ConfigHash, c.env.ConfigHash)
		}
		c.env.Log.Info("sft resumes", "checkpoint", d, "step", st.Step)
		return &roles.Resume{Dir: filepath.Join(d, modelDir), Optimizer: filepath.Join(d, optimFile)}, st.Step, nil
	}
	return nil, 0, nil
}

// save writes the checkpoint taken before step next and removes older ones.
func (c checkpoints) save(ctx context.Context, tr backend.SFTTrainer, next int) error {
	name := fmt.Sprintf("step-%06d", next)
	tmp := filepath.Join(c.dir(), ".tmp-"+name)
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	if _, err := tr.Save(ctx, filepath.Join(tmp, modelDir)); err != nil {
		return fmt.Errorf("checkpoint %s: %w", name, err)
	}
	if err := tr.SaveOptimizer(filepath.Join(tmp, optimFile)); err != nil {
		return fmt.Errorf("checkpoint %s: %w", name, err)
	}
	b, _ := json.Marshal(state{Step: next, ConfigHash: c.env.ConfigHash})
	if err := os.WriteFile(filepath.Join(tmp, stateFile), b, 0o644); err != nil {
		return err
	}
	final := filepath.Join(c.dir(), name)
	if err := os.RemoveAll(final); err != nil {
		return err
	}
	if err := os.Rename(tmp, final); err != nil {
		return err
	}
	ents, err := os.ReadDir(c.dir())
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), "step-") && e.Name() < name {
			if err := os.RemoveAll(filepath.Join(c.dir(), e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// export writes the final model to the output directory (default
// <run>/model) once it is complete: to a sibling temporary directory first,
// which then replaces the old output.
func (c checkpoints) export(ctx context.Context, tr backend.SFTTrainer, total int) error {
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
