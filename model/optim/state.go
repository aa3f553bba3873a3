package optim

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/evolm/evolm/model/safetensors"
	"github.com/evolm/evolm/model/torch"
)

// State file layout (safetensors, all tensors F32, shaped as the parameter):
//
//	exp_avg.<param>     first moment
//	exp_avg_sq.<param>  second moment
//	master.<param>      float32 master weights (only for non-float32 params)
//
// and __metadata__ {"format": StateFormat, "step": "<n>", "lr", "beta1",
// "beta2", "eps"}. Load restores moments, master weights and the step count,
// so that training resumes bit for bit; the hyperparameters are recorded for
// inspection and left as configured.
const StateFormat = "evolm.adamw.v1"

// Save writes the optimizer state to path (atomically).
func (o *AdamW) Save(path string) error {
	type entry struct {
		t    *torch.Tensor
		name string
	}
	var entries []entry
	for _, sl := range o.slots {
		entries = append(entries, entry{sl.expAvg, "exp_avg." + sl.Name}, entry{sl.expSq, "exp_avg_sq." + sl.Name})
		if sl.master != nil {
			entries = append(entries, entry{sl.master, "master." + sl.Name})
		}
	}
	infos := make([]safetensors.Info, len(entries))
	byName := map[string]*torch.Tensor{}
	for i, e := range entries {
		sh, err := torch.Shape(e.t)
		if err != nil {
			return fmt.Errorf("optim save %s: %s: %w", path, e.name, err)
		}
		infos[i] = safetensors.Info{Name: e.name, DType: safetensors.F32, Shape: sh}
		byName[e.name] = e.t
	}
	meta := map[string]string{
		"format": StateFormat,
		"step":   strconv.FormatInt(o.step, 10),
		"lr":     strconv.FormatFloat(o.cfg.LR, 'g', -1, 64),
		"beta1":  strconv.FormatFloat(o.cfg.Beta1, 'g', -1, 64),
		"beta2":  strconv.FormatFloat(o.cfg.Beta2, 'g', -1, 64),
		"eps":    strconv.FormatFloat(o.cfg.Eps, 'g', -1, 64),
	}
	err := safetensors.Write(path, infos, meta, func(t safetensors.Info) ([]byte, error) {
		return torch.Bytes(byName[t.Name])
	})
	if err != nil {
		return fmt.Errorf("optim save: %w", err)
	}
	return nil
}

// Load restores state written by Save into o, whose parameters must have
// the same names and shapes. Every expected tensor must be present, and the
// file must hold nothing else; errors list every problem.
func (o *AdamW) Load(path string) error {
	f, err := safetensors.Open(path)
	if err != nil {
		return fmt.Errorf("optim load: %w", err)
	}
	defer f.Close()
	if got := f.Metadata["format"]; got != StateFormat {
		return fmt.Errorf("optim load %s: format %q, want %q", path, got, StateFormat)
	}
	step, err := strconv.ParseInt(f.Metadata["step"], 10, 64)
	if err != nil || step < 0 {
		return fmt.Errorf("optim load %s: bad step %q", path, f.Metadata["step"])
	}
	type dst struct {
		name string
		t    *torch.Tensor
	}
	var want []dst
	for _, sl := range o.slots {
		want = append(want, dst{"exp_avg." + sl.Name, sl.expAvg}, dst{"exp_avg_sq." + sl.Name, sl.expSq})
		if sl.master != nil {
			want = append(want, dst{"master." + sl.Name, sl.master})
		}
	}
	var problems []string
	seen := map[string]bool{}
	for _, w := range want {
		seen[w.name] = true
		info, ok := f.Info(w.name)
		if !ok {
			problems = append(problems, "missing "+w.name)
			continue
		}
		sh, err := torch.Shape(w.t)
		if err != nil {
			return fmt.Errorf("optim load %s: %s: %w", path, w.name, err)
		}
		if info.DType != safetensors.F32 || !slices.Equal(info.Shape, sh) {
			problems = append(problems, fmt.Sprintf("%s is %s %v, want F32 %v", w.name, info.DType, info.Shape, sh))
		}
	}
	for _, n := range f.Names() {
		if !seen[n] {
			problems = append(problems, "unexpected "+n)
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("optim load %s: %d problems: %v", path, len(problems), problems)
	}
	for _, w := range want {
		data, err := f.Data(w.name)
		if err != nil {
			return fmt.Errorf("optim load: %w", err)
		}
		info, _ := f.Info(w.name)
		if err := copyFrom(w.t, data, info.Shape); err != nil {
			return fmt.Errorf("optim load %s: %s: %w", path, w.name, err)
		}
		if err := f.Release(w.name); err != nil { // copied: drop the mapped pages
			return fmt.Errorf("optim load: %w", err)
		}
	}
	o.step = step
	// Parameters follow their master copies, as after a Step.
	s := torch.NewScope()
	defer s.Close()
	defer torch.SetGrad(false)()
	for _, sl := range o.slots {
		if sl.master != nil {
			s.Copy_(sl.Tensor, sl.master)
		}
	}
	if err := s.Err(); err != nil {
		return fmt.Errorf("optim load %s: %w", path, err)
	}
	return nil
}

func copyFrom(dst *torch.Tensor, data []byte, shape []int64) error {
	s := torch.NewScope()
	defer s.Close()
	s.Copy_(dst, s.FromBytes(data, shape, torch.Float32))
	return s.Err()
}
