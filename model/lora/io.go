package lora

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/safetensors"
	"github.com/evolm/evolm/model/torch"
)

// Save writes the adapter to dir in PEFT's format: adapter_config.json
// (base_model_name_or_path = base) and adapter_model.safetensors, float32
// tensors named as in Parameters. HF PEFT's PeftModel.from_pretrained and
// vLLM's LoRA loader read the directory as it is.
func (a *Adapter) Save(dir, base string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("lora: save %s: %w", dir, err)
	}
	infos, byName, err := model.ParamInfos(a.Parameters(), safetensors.F32)
	if err != nil {
		return fmt.Errorf("lora: save %s: %w", dir, err)
	}
	fetch := func(i safetensors.Info) ([]byte, error) {
		s := torch.NewScope()
		defer s.Close()
		x := s.Contiguous(s.To(s.Detach(byName[i.Name]), torch.CPU, torch.Float32))
		if err := s.Err(); err != nil {
			return nil, err
		}
		return torch.Bytes(x)
	}
	if err := safetensors.Write(filepath.Join(dir, WeightsFile), infos, map[string]string{"format": "pt"}, fetch); err != nil {
		return fmt.Errorf("lora: save %s: %w", dir, err)
	}
	if err := WriteConfig(dir, a.cfg, base); err != nil {
		return fmt.Errorf("lora: save %s: %w", dir, err)
	}
	return nil
}

// Load attaches the adapter saved in dir (by evolm or by PEFT's
// save_pretrained) to m. The adapter's tensors are float32 on m's device,
// whatever dtype the file holds; weights that are NaN or ±Inf are refused,
// as a checkpoint's are.
func Load(m model.CausalLM, dir string) (*Adapter, error) {
	a, err := LoadDetached(m, dir)
	if err != nil {
		return nil, err
	}
	if err := a.occupy(); err != nil {
		a.Close()
		return nil, fmt.Errorf("%w (adapter %s)", err, dir)
	}
	return a, nil
}

// LoadDetached reads the adapter saved in dir for m's layers without
// attaching it: a Switch puts it in the slots when its turn comes, so that
// several adapters share m's weights, each holding only its factors.
func LoadDetached(m model.CausalLM, dir string) (*Adapter, error) {
	cfg, _, err := ReadConfig(dir)
	if err != nil {
		return nil, err
	}
	a, err := prepare(m, cfg)
	if err != nil {
		return nil, fmt.Errorf("%w (adapter %s)", err, dir)
	}
	if err := a.LoadWeights(dir); err != nil {
		a.Close()
		return nil, err
	}
	return a, nil
}

// LoadWeights copies the weights of the adapter saved in dir into a, in
// place (a trainer's references to the tensors stay valid: this is how a
// run resumes). dir's adapter_config.json must describe the same adapter
// (rank, alpha, targets). The error names every missing, mis-shaped or
// unexpected tensor.
func (a *Adapter) LoadWeights(dir string) error {
	cfg, _, err := ReadConfig(dir)
	if err != nil {
		return err
	}
	if cfg.Rank != a.cfg.Rank || cfg.Alpha != a.cfg.Alpha || cfg.RSLoRA != a.cfg.RSLoRA ||
		cfg.TargetPattern != a.cfg.TargetPattern || strings.Join(cfg.Targets, ",") != strings.Join(a.cfg.Targets, ",") {
		return fmt.Errorf("lora: adapter %s has r=%d alpha=%v rslora=%v targets %v%s; this adapter has r=%d alpha=%v rslora=%v targets %v%s",
			dir, cfg.Rank, cfg.Alpha, cfg.RSLoRA, cfg.Targets, cfg.TargetPattern, a.cfg.Rank, a.cfg.Alpha, a.cfg.RSLoRA, a.cfg.Targets, a.cfg.TargetPattern)
	}
	path := filepath.Join(dir, WeightsFile)
	f, err := safetensors.Open(path)
	if err != nil {
		return fmt.Errorf("lora: %w", err)
	}
	defer f.Close()
	params := a.Parameters()
	want := make(map[string]bool, len(params))
	var problems []string
	for _, p := range params {
		want[p.Name] = true
		info, ok := f.Info(p.Name)
		if !ok {
			problems = append(problems, "missing "+p.Name)
			continue
		}
		shape, err := torch.Shape(p.Tensor)
		if err != nil {
			return fmt.Errorf("lora: %s: %w", p.Name, err)
		}
		if fmt.Sprint(info.Shape) != fmt.Sprint(shape) {
			problems = append(problems, fmt.Sprintf("%s has shape %v, want %v", p.Name, info.Shape, shape))
		}
		if _, ok := stDTypes[info.DType]; !ok {
			problems = append(problems, fmt.Sprintf("%s has dtype %s", p.Name, info.DType))
		}
	}
	var extra []string
	for _, n := range f.Names() {
		if !want[n] {
			extra = append(extra, n)
		}
	}
	sort.Strings(extra)
	for _, n := range extra {
		problems = append(problems, "unexpected "+n)
	}
	if len(problems) > 0 {
		return fmt.Errorf("lora: %s: %s", path, strings.Join(problems, "; "))
	}
	return torch.NoGrad(func() error {
		s := torch.NewScope()
		defer s.Close()
		for _, p := range params {
			info, _ := f.Info(p.Name)
			data, err := f.Data(p.Name)
			if err != nil {
				return fmt.Errorf("lora: %s: %w", path, err)
			}
			ps := s.Child()
			ps.Copy_(p.Tensor, ps.FromBytes(data, info.Shape, stDTypes[info.DType]))
			err = ps.Err()
			ps.Close()
			if err != nil {
				return fmt.Errorf("lora: %s: %s: %w", path, p.Name, err)
			}
			n, err := model.NonFinite(p.Tensor)
			if err != nil {
				return fmt.Errorf("lora: %s: %s: %w", path, p.Name, err)
			}
			if n > 0 {
				return fmt.Errorf("lora: %s: %s holds %d NaN or infinite values: the adapter would compute garbage", path, p.Name, n)
			}
		}
		return nil
	})
}

var stDTypes = map[safetensors.DType]torch.DType{
	safetensors.F32: torch.Float32, safetensors.BF16: torch.BFloat16, safetensors.F16: torch.Float16, safetensors.F64: torch.Float64,
}
