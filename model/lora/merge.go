package lora

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/torch"
)

// MergeAndUnload folds every layer's adapter into its base weight,
// W ← W + scaling·(B @ A) computed in float32 and rounded once to W's dtype
// (PEFT's merge_and_unload), then detaches and frees the adapter. The model
// is then a plain model that model.Save writes as an HF checkpoint. On error
// the adapter stays attached, and layers already merged keep their new
// weights.
func (a *Adapter) MergeAndUnload() error {
	err := a.eachLayer(func(ls *torch.Scope, l *Layer) {
		w := l.base.Weight
		delta := ls.MulScalar(ls.Matmul(l.B, l.A), a.scaling) // (out, in)
		merged := ls.Add(ls.Float32(w), delta)
		ls.Copy_(w, merged)
	})
	if err != nil {
		return fmt.Errorf("lora: merge: %w", err)
	}
	a.Close()
	return nil
}

// ParamCount is the number of adapter weights that cfg puts on a model of
// config c, Σ r·(in + out) over the targeted linear layers, computed from the
// config alone (for memory planning).
func ParamCount(c *model.Config, cfg Config) (int64, error) {
	cfg, err := cfg.Normalize()
	if err != nil {
		return 0, err
	}
	C, I := int64(c.HiddenSize), int64(c.IntermediateSize)
	q := int64(c.NumAttentionHeads) * int64(c.HeadDim)
	kv := int64(c.NumKeyValueHeads) * int64(c.HeadDim)
	shapes := []struct {
		name    string
		in, out int64
	}{
		{"self_attn.q_proj", C, q}, {"self_attn.k_proj", C, kv}, {"self_attn.v_proj", C, kv}, {"self_attn.o_proj", q, C},
		{"mlp.gate_proj", C, I}, {"mlp.up_proj", C, I}, {"mlp.down_proj", I, C},
	}
	match := cfg.matcher()
	var n int64
	for i := 0; i < c.NumHiddenLayers; i++ {
		for _, sh := range shapes {
			if match(fmt.Sprintf("model.layers.%d.%s", i, sh.name)) {
				n += int64(cfg.Rank) * (sh.in + sh.out)
			}
		}
	}
	return n, nil
}

// MergeOptions controls MergeDir.
type MergeOptions struct {
	// DType of the merged checkpoint; zero keeps the base checkpoint's
	// torch_dtype (float32 when it names none).
	DType torch.DType
	// MaxShardBytes is model.SaveOptions.MaxShardBytes.
	MaxShardBytes int64
}

// MergeDir loads the base checkpoint in float32, attaches the adapter saved
// in adapterDir, merges it (MergeAndUnload) and writes the merged model to
// out as an HF checkpoint, with the base's generation config and tokenizer
// files. It returns the merged model's config.
func MergeDir(baseDir, adapterDir, out string, opts MergeOptions) (*model.Config, error) {
	m, err := model.Load(baseDir, model.LoadOptions{Device: torch.CPU, DType: torch.Float32})
	if err != nil {
		return nil, err
	}
	defer m.Close()
	dt := opts.DType
	if dt == 0 {
		dt = torch.Float32
		if name := m.Config().TorchDType; name != "" {
			if dt, err = torch.ParseDType(name); err != nil {
				return nil, fmt.Errorf("lora: base %s: torch_dtype: %w", baseDir, err)
			}
		}
	}
	ad, err := Load(m, adapterDir)
	if err != nil {
		return nil, err
	}
	if err := ad.MergeAndUnload(); err != nil {
		ad.Close()
		return nil, err
	}
	gen, err := model.ReadGenerationConfig(baseDir)
	if err != nil {
		return nil, err
	}
	so := model.SaveOptions{DType: dt, MaxShardBytes: opts.MaxShardBytes, Generation: gen}
	if _, err := os.Stat(filepath.Join(baseDir, "tokenizer.json")); err == nil {
		so.TokenizerDir = baseDir
	}
	if err := model.Save(m, out, so); err != nil {
		return nil, err
	}
	cfg := *m.Config()
	return &cfg, nil
}
