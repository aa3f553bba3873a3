package model_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/internal/testutil/sttest"

	"github.com/evolm/evolm/model"
	_ "github.com/evolm/evolm/model/llama"
	"github.com/evolm/evolm/model/modeltest"
	"github.com/evolm/evolm/model/safetensors"
	"github.com/evolm/evolm/model/torch"
)

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name string
		json string
		want func(c *model.Config) []any // got values, compared to wantVals
		vals []any
	}{
		{
			name: "qwen3 defaults head_dim to 128 and enables qk norm",
			json: `{"architectures":["Qwen3ForCausalLM"],"hidden_size":256,"num_attention_heads":4,"num_key_value_heads":2,"num_hidden_layers":1,"intermediate_size":8,"vocab_size":10}`,
			want: func(c *model.Config) []any {
				return []any{c.HeadDim, c.KVGroups, c.QKNorm, c.QKVBias, c.RopeTheta, c.ModelType}
			},
			vals: []any{128, 2, true, false, 10000.0, "qwen3"},
		},
		{
			name: "qwen2 has q/k/v bias but no o bias; head_dim from hidden size",
			json: `{"architectures":["Qwen2ForCausalLM"],"hidden_size":64,"num_attention_heads":4,"num_hidden_layers":1,"intermediate_size":8,"vocab_size":10,"eos_token_id":[1,2]}`,
			want: func(c *model.Config) []any {
				return []any{c.HeadDim, c.NumKeyValueHeads, c.QKVBias, c.OBias, c.QKNorm, []int(c.EOSTokenID)}
			},
			vals: []any{16, 4, true, false, false, []int{1, 2}},
		},
		{
			name: "llama attention_bias and scale",
			json: `{"architectures":["LlamaForCausalLM"],"hidden_size":64,"num_attention_heads":4,"num_key_value_heads":1,"num_hidden_layers":1,"intermediate_size":8,"vocab_size":10,"attention_bias":true,"eos_token_id":2}`,
			want: func(c *model.Config) []any {
				return []any{c.KVGroups, c.QKVBias, c.OBias, c.AttnScale, []int(c.EOSTokenID)}
			},
			vals: []any{4, true, true, 0.25, []int{2}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := model.ParseConfig([]byte(tc.json))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.vals, tc.want(c)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestConfigKeepsUnknownKeys(t *testing.T) {
	in := `{"architectures":["Qwen3ForCausalLM"],"hidden_size":64,"num_attention_heads":4,"num_hidden_layers":1,"intermediate_size":8,"vocab_size":10,"head_dim":16,"sliding_window":4096,"max_window_layers":28}`
	c, err := model.ParseConfig([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"sliding_window": 4096`, `"max_window_layers": 28`, `"rope_scaling": null`, `"head_dim": 16`} {
		if !strings.Contains(string(out), key) {
			t.Errorf("config.json lacks %s:\n%s", key, out)
		}
	}
	again, err := model.ParseConfig(out)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(c, again); diff != "" {
		t.Errorf("round trip (-first +second):\n%s", diff)
	}
}

func TestConfigErrors(t *testing.T) {
	base := `"hidden_size":64,"num_attention_heads":4,"num_hidden_layers":1,"intermediate_size":8,"vocab_size":10`
	tests := []struct{ name, json, want string }{
		{"unknown architecture", `{"architectures":["GPT2LMHeadModel"],` + base + `}`, `unknown architecture "GPT2LMHeadModel" (known: LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM)`},
		{"no architectures", `{` + base + `}`, `no "architectures"`},
		{"heads not divisible", `{"architectures":["LlamaForCausalLM"],"num_key_value_heads":3,` + base + `}`, "not a multiple of num_key_value_heads 3"},
		{"hidden not divisible", `{"architectures":["LlamaForCausalLM"],"hidden_size":66,"num_attention_heads":4,"num_hidden_layers":1,"intermediate_size":8,"vocab_size":10}`, "hidden_size 66 is not a multiple"},
		{"rope scaling", `{"architectures":["LlamaForCausalLM"],"rope_scaling":{"type":"llama3"},` + base + `}`, "only null"},
		{"zero layers", `{"architectures":["LlamaForCausalLM"],"hidden_size":64,"num_attention_heads":4,"num_hidden_layers":0,"intermediate_size":8,"vocab_size":10}`, "num_hidden_layers = 0"},
		{"bad json", `{"architectures":["LlamaForCausalLM"],`, "config.json"},
		{"activation", `{"architectures":["LlamaForCausalLM"],"hidden_act":"gelu",` + base + `}`, `hidden_act "gelu"`},
		// Every field against its meaning (issue: a max_position_embeddings
		// of 0 or −5 removed the context-length guard).
		{"context 0", `{"architectures":["LlamaForCausalLM"],"max_position_embeddings":0,` + base + `}`, "max_position_embeddings = 0, want in [1,"},
		{"context negative", `{"architectures":["Qwen3ForCausalLM"],"max_position_embeddings":-5,` + base + `}`, "max_position_embeddings = -5"},
		{"vocab too big", `{"architectures":["LlamaForCausalLM"],"hidden_size":64,"num_attention_heads":4,"num_hidden_layers":1,"intermediate_size":8,"vocab_size":100000000}`, "vocab_size = 100000000"},
		{"width typo", `{"architectures":["LlamaForCausalLM"],"hidden_size":64,"num_attention_heads":4,"num_hidden_layers":1,"intermediate_size":8000000,"vocab_size":10}`, "intermediate_size = 8000000"},
		{"eps zero", `{"architectures":["LlamaForCausalLM"],"rms_norm_eps":0,` + base + `}`, "rms_norm_eps 0"},
		{"eps one", `{"architectures":["LlamaForCausalLM"],"rms_norm_eps":1,` + base + `}`, "rms_norm_eps 1"},
		{"theta negative", `{"architectures":["LlamaForCausalLM"],"rope_theta":-1,` + base + `}`, "rope_theta -1"},
		{"init range", `{"architectures":["LlamaForCausalLM"],"initializer_range":-0.02,` + base + `}`, "initializer_range -0.02"},
		{"model type", `{"architectures":["Qwen3ForCausalLM"],"model_type":"llama",` + base + `}`, `model_type "llama" does not match`},
		{"eos outside", `{"architectures":["LlamaForCausalLM"],"eos_token_id":[2,10],` + base + `}`, "eos_token_id 10 is outside the vocabulary [0, 10)"},
		{"bos negative", `{"architectures":["LlamaForCausalLM"],"bos_token_id":-1,` + base + `}`, "bos_token_id -1"},
		{"pad outside", `{"architectures":["LlamaForCausalLM"],"pad_token_id":10,` + base + `}`, "pad_token_id 10"},
		{"dtype", `{"architectures":["LlamaForCausalLM"],"torch_dtype":"int8",` + base + `}`, `torch_dtype "int8"`},
		{"kv heads negative", `{"architectures":["LlamaForCausalLM"],"num_key_value_heads":-2,` + base + `}`, "num_key_value_heads -2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := model.ParseConfig([]byte(tc.json))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// buildJSON builds the model of an HF config.json; the caller closes it.
func buildJSON(t *testing.T, config string) model.CausalLM {
	t.Helper()
	cfg, err := model.ParseConfig([]byte(config))
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Build(cfg, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// tinyCheckpoint saves a random 2-layer Qwen3 (vocab 32) and returns its dir.
func tinyCheckpoint(t *testing.T) string {
	t.Helper()
	m := buildJSON(t, `{"architectures":["Qwen3ForCausalLM"],"hidden_size":16,"num_attention_heads":2,"num_key_value_heads":1,"head_dim":8,"num_hidden_layers":2,"intermediate_size":24,"vocab_size":32,"tie_word_embeddings":false}`)
	defer m.Close()
	if err := model.Randomize(m, 1); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := model.Save(m, dir, model.SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// rewrite replaces dir/model.safetensors by edit(infos), keeping the bytes of
// tensors that keep their name and filling new ones with zeros.
func rewrite(t *testing.T, dir string, edit func([]safetensors.Info) []safetensors.Info) {
	t.Helper()
	sttest.Edit(t, filepath.Join(dir, safetensors.SingleFile), func(infos []safetensors.Info, _ map[string][]byte) []safetensors.Info {
		return edit(infos)
	})
}

func TestLoadBadInput(t *testing.T) {
	tests := []struct {
		name   string
		break_ func(t *testing.T, dir string)
		want   []string
	}{
		{"fine", func(*testing.T, string) {}, nil},
		{"missing tensor", func(t *testing.T, dir string) {
			rewrite(t, dir, func(in []safetensors.Info) (out []safetensors.Info) {
				for _, i := range in {
					if i.Name != "model.layers.1.self_attn.q_norm.weight" {
						out = append(out, i)
					}
				}
				return out
			})
		}, []string{"layer 1: missing self_attn.q_norm.weight"}},
		{"shape mismatch and unexpected tensor, both reported", func(t *testing.T, dir string) {
			rewrite(t, dir, func(in []safetensors.Info) []safetensors.Info {
				for k := range in {
					if in[k].Name == "model.embed_tokens.weight" {
						in[k].Shape = []int64{30, 16}
					}
				}
				return append(in, safetensors.Info{Name: "model.layers.7.mlp.extra.weight", DType: safetensors.F32, Shape: []int64{2}})
			})
		}, []string{"model.embed_tokens.weight: shape [30 16], want [32 16]", "layer 7: unexpected mlp.extra.weight", "2 problem(s)"}},
		{"integer weights", func(t *testing.T, dir string) {
			rewrite(t, dir, func(in []safetensors.Info) []safetensors.Info {
				for k := range in {
					if in[k].Name == "model.norm.weight" {
						in[k].DType = safetensors.I32
					}
				}
				return in
			})
		}, []string{"model.norm.weight: dtype I32"}},
		{"truncated safetensors", func(t *testing.T, dir string) {
			p := filepath.Join(dir, safetensors.SingleFile)
			st, _ := os.Stat(p)
			if err := os.Truncate(p, st.Size()-100); err != nil {
				t.Fatal(err)
			}
		}, []string{"model.safetensors", "beyond the", "truncated"}},
		{"garbage header", func(t *testing.T, dir string) {
			p := filepath.Join(dir, safetensors.SingleFile)
			b, _ := os.ReadFile(p)
			copy(b[8:], "{not json")
			os.WriteFile(p, b, 0o644)
		}, []string{"model.safetensors", "header is not a JSON object"}},
		{"unknown architecture", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "config.json")
			b, _ := os.ReadFile(p)
			os.WriteFile(p, []byte(strings.Replace(string(b), "Qwen3ForCausalLM", "MambaForCausalLM", 1)), 0o644)
		}, []string{`unknown architecture "MambaForCausalLM"`, "Qwen3ForCausalLM"}},
		{"no weights", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, safetensors.SingleFile))
		}, []string{"neither model.safetensors nor model.safetensors.index.json exists"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			base := torch.Live()
			dir := tinyCheckpoint(t)
			tc.break_(t, dir)
			m, err := model.Load(dir, model.LoadOptions{})
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				m.Close()
			} else {
				if err == nil {
					m.Close()
				} else {
					t.Logf("error: %v", err)
				}
				testutil.ErrorContains(t, err, "Load succeeded", tc.want...)
			}
			modeltest.CheckLeaks(t, base)
		})
	}
}

func TestInitErrors(t *testing.T) {
	for _, tc := range []struct{ arch, preset, want string }{
		{"gpt2", "tiny", `unknown architecture "gpt2"`},
		{"qwen3", "huge", `unknown preset "huge" (known: qwen3-0.6b, qwen3-1.7b, qwen3-4b, qwen3-8b, small, tiny, toy)`},
	} {
		_, err := model.Init(model.InitOptions{Arch: tc.arch, Preset: tc.preset, OutDir: t.TempDir()})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Init(%s, %s): err = %v, want %q", tc.arch, tc.preset, err, tc.want)
		}
	}
}

func TestNumParams(t *testing.T) {
	m := buildJSON(t, `{"architectures":["Qwen3ForCausalLM"],"hidden_size":16,"num_attention_heads":2,"num_key_value_heads":1,"head_dim":8,"num_hidden_layers":2,"intermediate_size":24,"vocab_size":32,"attention_bias":true}`)
	defer m.Close()
	var n int64
	for _, p := range m.Parameters() {
		sh, _ := torch.Shape(p.Tensor)
		n += torch.Numel(sh)
	}
	if cfg := m.Config(); n != cfg.NumParams() {
		t.Errorf("parameters hold %d values, NumParams says %d", n, cfg.NumParams())
	}
}

// TestInitFullAttention checks that a Qwen checkpoint made by Init attends to
// the whole context in transformers too: 4.51's Qwen2/Qwen3 mask applies
// config.sliding_window whenever it is set, whatever use_sliding_window says.
func TestInitFullAttention(t *testing.T) {
	for _, arch := range []string{"qwen3", "qwen2"} {
		t.Run(arch, func(t *testing.T) {
			dir := t.TempDir()
			if _, err := model.Init(model.InitOptions{Arch: arch, Preset: "tiny", OutDir: dir}); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(filepath.Join(dir, "config.json"))
			if err != nil {
				t.Fatal(err)
			}
			for _, key := range []string{`"sliding_window": null`, `"use_sliding_window": false`} {
				if !strings.Contains(string(b), key) {
					t.Errorf("config.json lacks %s:\n%s", key, b)
				}
			}
			// Read and written back by the engine, the keys survive.
			cfg, err := model.ReadConfig(dir)
			if err != nil {
				t.Fatal(err)
			}
			again, err := cfg.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			for _, key := range []string{`"sliding_window": null`, `"use_sliding_window": false`} {
				if !strings.Contains(string(again), key) {
					t.Errorf("re-saved config.json lacks %s", key)
				}
			}
			script := `import sys, transformers
c = transformers.AutoConfig.from_pretrained(sys.argv[1])
print(transformers.__version__, c.model_type, c.sliding_window, c.use_sliding_window)`
			py := filepath.Join(t.TempDir(), "read_config.py")
			if err := os.WriteFile(py, []byte(script), 0o644); err != nil {
				t.Fatal(err)
			}
			got := strings.TrimSpace(string(testutil.RunPython(t, py, dir)))
			if want := "4.51.3 " + arch + " None False"; got != want {
				t.Errorf("transformers reads %q, want %q", got, want)
			}
		})
	}
}
