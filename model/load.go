package model

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/evolm/evolm/model/fused"
	"github.com/evolm/evolm/model/safetensors"
	"github.com/evolm/evolm/model/torch"
)

// LoadOptions says where the weights go.
type LoadOptions struct {
	// Device holds the parameters; the zero value is the CPU.
	Device torch.Device
	// DType of the parameters; zero means torch.ParamDType(Device): float32
	// on CPU, bfloat16 on CUDA. Checkpoint dtypes (f32, bf16, f16) convert.
	DType torch.DType
	// Attention is "eager", "sdpa" or "" for the device's default: sdpa on
	// CUDA (fused kernels; no (B, nh, T, T) fp32 score tensor kept for
	// backward), eager on CPU.
	Attention string
}

// Attention implementations.
const (
	AttnEager = "eager"
	AttnSDPA  = "sdpa"
)

func (o LoadOptions) resolve() (torch.Device, torch.DType) {
	dev := o.Device
	if dev.Name == "" {
		dev = torch.CPU
	}
	dt := o.DType
	if dt == 0 {
		dt = torch.ParamDType(dev)
	}
	return dev, dt
}

// Load reads an HF checkpoint directory: config.json, model.safetensors or
// the shards of model.safetensors.index.json. The architecture must be
// registered. A checkpoint that does not match the architecture fails with
// one error naming every missing, unexpected and mis-shaped tensor.
//
// The loading runs on a thread of its own that ends when Load returns
// (torch.OnOwnThread), so that the caller's thread holds no OpenMP worker
// pool for it if the model then runs on other goroutines.
func Load(dir string, opts LoadOptions) (CausalLM, error) {
	var m CausalLM
	err := torch.OnOwnThread(func() (err error) {
		m, err = load(dir, opts)
		return err
	})
	return m, err
}

func load(dir string, opts LoadOptions) (CausalLM, error) {
	cfg, err := ReadConfig(dir)
	if err != nil {
		return nil, err
	}
	ckpt, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, err
	}
	defer ckpt.Close()
	m, err := Build(cfg, opts)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	if err := LoadWeights(m, ckpt); err != nil {
		m.Close()
		return nil, fmt.Errorf("checkpoint %s (%s): %w", dir, cfg.Architectures[0], err)
	}
	return m, nil
}

// Build allocates a model for cfg with uninitialized parameters (see
// Randomize and LoadWeights).
func Build(cfg *Config, opts LoadOptions) (CausalLM, error) {
	arch, err := Lookup(cfg.Architectures[0])
	if err != nil {
		return nil, err
	}
	dev, dt := opts.resolve()
	// A CUDA device this process cannot use fails here, in one line naming
	// it, before any tensor is put there (torch.CheckDevice).
	if err := torch.CheckDevice(dev); err != nil {
		return nil, err
	}
	c := *cfg // the model gets its own copy, with the attention choice
	if c.AttnImplementation, err = attention(dev, opts.Attention); err != nil {
		return nil, err
	}
	return arch.Build(&c, dev, dt)
}

// attention is LoadOptions.Attention resolved for dev: "" is sdpa on CUDA
// and eager on the CPU.
func attention(dev torch.Device, opt string) (string, error) {
	switch opt {
	case "":
		if torch.IsCUDA(dev) {
			return AttnSDPA, nil
		}
		return AttnEager, nil
	case AttnEager, AttnSDPA:
		return opt, nil
	}
	return "", fmt.Errorf("attention %q: want eager or sdpa", opt)
}

// TensorSource is a set of named tensors stored as bytes, such as a
// safetensors.Checkpoint.
type TensorSource interface {
	Names() []string
	Info(name string) (safetensors.Info, bool)
	Data(name string) ([]byte, error)
}

// releaser is a TensorSource that can drop a copied tensor's bytes from
// memory (safetensors.File and Checkpoint: the mapped pages).
type releaser interface{ Release(name string) error }

var stDTypes = map[safetensors.DType]torch.DType{
	safetensors.F32: torch.Float32, safetensors.F16: torch.Float16, safetensors.BF16: torch.BFloat16, safetensors.F64: torch.Float64,
}

// StorageDType maps a torch dtype to its safetensors name.
func StorageDType(d torch.DType) (safetensors.DType, error) {
	for k, v := range stDTypes {
		if v == d {
			return k, nil
		}
	}
	return "", fmt.Errorf("dtype %s cannot be saved as a parameter", torch.DTypeName(d))
}

// ignored are checkpoint keys HF itself skips when loading.
var ignored = regexp.MustCompile(`\.rotary_emb\.inv_freq$`)

var layerKey = regexp.MustCompile(`^model\.layers\.(\d+)\.(.+)$`)

// label names a parameter in an error: "layer 3: … self_attn.q_norm.weight"
// reads better than the full key.
func label(what, name string) string {
	if m := layerKey.FindStringSubmatch(name); m != nil {
		return fmt.Sprintf("layer %s: %s %s", m[1], what, m[2])
	}
	return fmt.Sprintf("%s %s", what, name)
}

// LoadWeights copies every parameter of m from src, converting dtype and
// device. It checks all names and shapes first and returns one error listing
// every missing, unexpected and mis-shaped tensor; m is untouched then.
// Weights holding NaN or Inf are an error naming each such tensor
// (CheckFinite).
func LoadWeights(m CausalLM, src TensorSource) error {
	params := m.Parameters()
	want := map[string]bool{}
	var problems []string
	for _, p := range params {
		want[p.Name] = true
		info, ok := src.Info(p.Name)
		if !ok {
			problems = append(problems, label("missing", p.Name))
			continue
		}
		shape, err := torch.Shape(p.Tensor)
		if err != nil {
			return err
		}
		if !slices.Equal(shape, info.Shape) {
			problems = append(problems, fmt.Sprintf("%s: shape %v, want %v", p.Name, info.Shape, shape))
			continue
		}
		if _, ok := stDTypes[info.DType]; !ok {
			problems = append(problems, fmt.Sprintf("%s: dtype %s, want a float dtype (F32, BF16, F16)", p.Name, info.DType))
		}
	}
	tied := m.Config().TieWordEmbeddings
	for _, n := range src.Names() {
		if want[n] || ignored.MatchString(n) || (tied && n == "lm_head.weight") {
			continue
		}
		problems = append(problems, label("unexpected", n))
	}
	if len(problems) > 0 {
		return fmt.Errorf("%d problem(s):\n  %s", len(problems), strings.Join(problems, "\n  "))
	}
	return torch.NoGrad(func() error {
		s := torch.NewScope()
		defer s.Close()
		for _, p := range params {
			info, _ := src.Info(p.Name)
			data, err := src.Data(p.Name)
			if err != nil {
				return err
			}
			var drop func([]byte) // a mapped file's pages go as they are copied
			if _, ok := src.(releaser); ok {
				drop = func(b []byte) { _ = safetensors.DropPages(b) } // best effort; Release below reports
			}
			done, err := torch.CopyBytesInto(p.Tensor, data, stDTypes[info.DType], drop)
			if err != nil {
				return fmt.Errorf("%s: %w", p.Name, err)
			}
			if done { // a raw copy: tell packed copies of this weight (model/fused) it changed
				if err := fused.BumpVersion(p.Tensor); err != nil {
					return fmt.Errorf("%s: %w", p.Name, err)
				}
			} else { // another device or dtype: through a temporary tensor
				ps := s.Child()
				ps.Copy_(p.Tensor, ps.FromBytes(data, info.Shape, stDTypes[info.DType]))
				ps.Close()
				if err := s.Err(); err != nil {
					return fmt.Errorf("%s: %w", p.Name, err)
				}
			}
			if r, ok := src.(releaser); ok { // copied: drop the mapped pages
				if err := r.Release(p.Name); err != nil {
					return err
				}
			}
		}
		// NaN or Inf weights would be trained on and saved again: refuse them.
		return CheckFinite(m)
	})
}

// Randomize initializes m as HF's _init_weights does: Linear and Embedding
// weights from N(0, initializer_range²), biases 0, RMSNorm weights 1. The
// draws are made on the CPU from libtorch's generator seeded with seed, so a
// seed gives the same model on every device.
func Randomize(m CausalLM, seed int64) error {
	std := m.Config().InitializerRange
	torch.ManualSeed(seed)
	return torch.NoGrad(func() error {
		s := torch.NewScope()
		defer s.Close()
		for _, p := range m.Parameters() {
			ps := s.Child()
			shape, err := torch.Shape(p.Tensor)
			if err != nil {
				ps.Close()
				return err
			}
			ps.Copy_(p.Tensor, randomParam(ps, p.Name, shape, std))
			ps.Close()
			if err := s.Err(); err != nil {
				return fmt.Errorf("randomize %s: %w", p.Name, err)
			}
		}
		return nil
	})
}

// randomParam draws one parameter as HF's _init_weights does, in float32 on
// the CPU from libtorch's global generator.
func randomParam(s *torch.Scope, name string, shape []int64, std float64) *torch.Tensor {
	switch {
	case strings.HasSuffix(name, "norm.weight"):
		return s.Ones(shape, torch.Float32, torch.CPU)
	case strings.HasSuffix(name, ".bias"):
		return s.Zeros(shape, torch.Float32, torch.CPU)
	}
	return s.MulScalar(s.Randn(shape, torch.Float32, torch.CPU), std)
}

// ReadGenerationConfig reads dir/generation_config.json; it returns nil, nil
// when the file does not exist.
func ReadGenerationConfig(dir string) (*GenerationConfig, error) {
	b, err := os.ReadFile(filepath.Join(dir, "generation_config.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	g, err := ParseGenerationConfig(b)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: generation_config.json: %w", dir, err)
	}
	return g, nil
}
