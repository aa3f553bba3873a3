package model

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/evolm/evolm/model/safetensors"
	"github.com/evolm/evolm/model/torch"
)

// DefaultMaxShardBytes is HF save_pretrained's default max_shard_size (5GB).
const DefaultMaxShardBytes = 5_000_000_000

// TokenizerFiles are the tokenizer files Save copies when they exist.
var TokenizerFiles = []string{"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "vocab.json", "merges.txt"}

// SaveOptions controls Save.
type SaveOptions struct {
	// DType of the saved weights; zero keeps the model's dtype.
	DType torch.DType
	// MaxShardBytes splits the weights into shards of at most this size
	// (plus an index) when they are larger; zero means DefaultMaxShardBytes.
	MaxShardBytes int64
	// Generation, when set, is written as generation_config.json.
	Generation *GenerationConfig
	// TokenizerDir, when set, is where tokenizer.json and friends are copied
	// from (typically the directory the model was loaded from).
	TokenizerDir string
}

// Save writes m to dir in HF format: config.json (torch_dtype set to the
// saved dtype), model.safetensors or shards with model.safetensors.index.json,
// generation_config.json and the tokenizer files. Parameters are converted
// and written one at a time. A tied lm_head is not written, as in HF. A
// model with NaN or Inf parameters is refused before anything is written
// (CheckFinite).
func Save(m CausalLM, dir string, opts SaveOptions) error {
	return save(m, dir, opts, nil)
}

// save is Save; a non-nil draw supplies each parameter's values (in the
// saved dtype, owned by s) instead of m's own tensors, which are then only
// read for their names and shapes (Init's streaming write).
func save(m CausalLM, dir string, opts SaveOptions, draw func(s *torch.Scope, name string, shape []int64) *torch.Tensor) error {
	dt := opts.DType
	if dt == 0 {
		dt = m.DType()
	}
	st, err := StorageDType(dt)
	if err != nil {
		return fmt.Errorf("save %s: %w", dir, err)
	}
	maxShard := opts.MaxShardBytes
	if maxShard == 0 {
		maxShard = DefaultMaxShardBytes
	}
	if draw == nil { // drawn weights are finite; m's own are never written (or read)
		if err := CheckFinite(m); err != nil {
			return fmt.Errorf("save %s: refusing to write a model with %w", dir, err)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("save %s: %w", dir, err)
	}
	cfg := *m.Config()
	cfg.TorchDType = torch.DTypeName(dt)
	if cfg.TransformersVersion == "" {
		cfg.TransformersVersion = "4.51.3"
	}
	b, err := cfg.MarshalJSON()
	if err != nil {
		return fmt.Errorf("save %s: config.json: %w", dir, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
		return fmt.Errorf("save %s: %w", dir, err)
	}

	infos, byName, err := ParamInfos(m.Parameters(), st)
	if err != nil {
		return fmt.Errorf("save %s: %w", dir, err)
	}
	fetch := func(i safetensors.Info) ([]byte, error) {
		s := torch.NewScope()
		defer s.Close()
		var x *torch.Tensor
		if draw != nil {
			x = draw(s, i.Name, i.Shape)
		} else {
			x = s.To(s.Detach(byName[i.Name]), torch.CPU, dt)
		}
		if err := s.Err(); err != nil {
			return nil, err
		}
		return torch.Bytes(x)
	}
	if err := safetensors.WriteDir(dir, infos, map[string]string{"format": "pt"}, maxShard, fetch); err != nil {
		return fmt.Errorf("save %s: %w", dir, err)
	}

	if opts.Generation != nil {
		g := *opts.Generation
		if g.TransformersVersion == "" {
			g.TransformersVersion = cfg.TransformersVersion
		}
		b, err := g.MarshalJSON()
		if err != nil {
			return fmt.Errorf("save %s: generation_config.json: %w", dir, err)
		}
		if err := os.WriteFile(filepath.Join(dir, "generation_config.json"), b, 0o644); err != nil {
			return fmt.Errorf("save %s: %w", dir, err)
		}
	}
	if opts.TokenizerDir != "" {
		if err := copyTokenizer(opts.TokenizerDir, dir); err != nil {
			return fmt.Errorf("save %s: %w", dir, err)
		}
	}
	return nil
}

// copyTokenizer copies the TokenizerFiles that exist in src (tokenizer.json
// must) to dst.
func copyTokenizer(src, dst string) error {
	if _, err := os.Stat(filepath.Join(src, "tokenizer.json")); err != nil {
		return fmt.Errorf("tokenizer: %w", err)
	}
	for _, name := range TokenizerFiles {
		if err := copyFile(filepath.Join(src, name), filepath.Join(dst, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("tokenizer: %w", err)
		}
	}
	return nil
}

func copyFile(src, dst string) error {
	if filepath.Clean(src) == filepath.Clean(dst) {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// ParamInfos describes params as the safetensors entries of a file of dtype
// dt, in order, and maps each name to its tensor; an error names the
// parameter.
func ParamInfos(params []Param, dt safetensors.DType) ([]safetensors.Info, map[string]*torch.Tensor, error) {
	byName := make(map[string]*torch.Tensor, len(params))
	infos := make([]safetensors.Info, 0, len(params))
	for _, p := range params {
		shape, err := torch.Shape(p.Tensor)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", p.Name, err)
		}
		byName[p.Name] = p.Tensor
		infos = append(infos, safetensors.Info{Name: p.Name, DType: dt, Shape: shape})
	}
	return infos, byName, nil
}
