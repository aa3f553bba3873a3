package llama_test

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/modeltest"
	"github.com/evolm/evolm/model/safetensors"
	"github.com/evolm/evolm/model/torch"
)

// writeOurs runs m on every case and writes the inputs and our logits to
// dir/ours.safetensors for hf_check_saved.py.
func writeOurs(t *testing.T, m model.CausalLM, dir string, cases []refCase) {
	t.Helper()
	var infos []safetensors.Info
	data := map[string][]byte{}
	add := func(name string, dt safetensors.DType, shape []int64, b []byte) {
		infos = append(infos, safetensors.Info{Name: name, DType: dt, Shape: shape})
		data[name] = b
	}
	for c, rc := range cases {
		s := torch.NewScope()
		ids, mask, pos := s.FromInt64(rc.IDs, rc.B, rc.T), s.FromInt64(rc.Mask, rc.B, rc.T), s.FromInt64(rc.Pos, rc.B, rc.T)
		logits, err := m.Forward(s, model.Batch{IDs: ids, Positions: pos, Mask: mask})
		if err != nil {
			t.Fatal(err)
		}
		p := "case" + string(rune('0'+c)) + "."
		for _, x := range []struct {
			name string
			t    *torch.Tensor
			dt   safetensors.DType
		}{{"ids", ids, safetensors.I64}, {"mask", mask, safetensors.I64}, {"pos", pos, safetensors.I64}, {"logits", logits, safetensors.F32}} {
			b, err := torch.Bytes(x.t)
			if err != nil {
				t.Fatal(err)
			}
			sh, _ := torch.Shape(x.t)
			add(p+x.name, x.dt, sh, b)
		}
		s.Close()
	}
	err := safetensors.Write(filepath.Join(dir, "ours.safetensors"), infos, nil, func(i safetensors.Info) ([]byte, error) { return data[i.Name], nil })
	if err != nil {
		t.Fatal(err)
	}
}

type hfReport struct {
	MaxDiff      float64  `json:"max_diff"`
	Cases        int      `json:"cases"`
	Architecture string   `json:"architecture"`
	Missing      []string `json:"missing"`
	Unexpected   []string `json:"unexpected"`
	Mismatched   []string `json:"mismatched"`
	Tied         bool     `json:"tied"`
}

// TestSavedCheckpointsLoadInHF: checkpoints we save (after loading HF ones,
// sharded, in bf16, and fresh from model.Init) load in transformers with no
// missing or unexpected keys and the same logits as our engine gives for them.
func TestSavedCheckpointsLoadInHF(t *testing.T) {
	dir, _ := golden.Get(t)
	out := t.TempDir()
	type saved struct {
		dir          string
		arch         string
		tied         bool
		exactReload  bool // a float32 save reloads bit-identically
		sourceLogits []refCase
	}
	var all []saved
	for _, tc := range []struct {
		name string
		opts model.SaveOptions
	}{
		{"qwen3_gqa_tied", model.SaveOptions{}},
		{"qwen3_mha_untied_bias", model.SaveOptions{MaxShardBytes: 30_000}},
		{"llama_gqa_untied", model.SaveOptions{DType: torch.BFloat16}},
		{"llama_mha_tied_bias", model.SaveOptions{}},
		{"qwen2_gqa_untied", model.SaveOptions{MaxShardBytes: 50_000}},
	} {
		src := filepath.Join(dir, tc.name)
		m, err := model.Load(src, model.LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		gen, err := model.ReadGenerationConfig(src)
		if err != nil {
			t.Fatal(err)
		}
		tc.opts.Generation = gen
		dst := filepath.Join(out, tc.name)
		if err := model.Save(m, dst, tc.opts); err != nil {
			t.Fatal(err)
		}
		m.Close()
		cases := readRefs(t, filepath.Join(src, "ref.safetensors"))
		all = append(all, saved{dst, m.Config().Architectures[0], m.Config().TieWordEmbeddings, tc.opts.DType == 0, cases})
	}
	// A fresh random checkpoint with the real tokenizer.
	initDir := filepath.Join(out, "init_qwen3_tiny")
	cfg, err := model.Init(model.InitOptions{Arch: "qwen3", Preset: "tiny", Seed: 7, OutDir: initDir})
	if err != nil {
		t.Fatal(err)
	}
	initCases := []refCase{{RefCase: modeltest.RefCase{B: 2, T: 5, V: int64(cfg.VocabSize),
		IDs:  []int64{151644, 872, 198, 9707, 151645, 0, 0, 151644, 77091, 198},
		Mask: []int64{1, 1, 1, 1, 1, 0, 0, 1, 1, 1},
		Pos:  []int64{0, 1, 2, 3, 4, 1, 1, 0, 1, 2}}}}
	all = append(all, saved{initDir, "Qwen3ForCausalLM", true, false, initCases})

	var dirs []string
	for _, sv := range all {
		m, err := model.Load(sv.dir, model.LoadOptions{})
		if err != nil {
			t.Fatalf("reload %s: %v", sv.dir, err)
		}
		if sv.exactReload {
			for c, rc := range sv.sourceLogits {
				if d := maxDiff(rc, forward(t, m, rc)); d != 0 {
					t.Errorf("%s case%d: reloaded float32 save differs from the HF reference by %.3g", sv.dir, c, d)
				}
			}
		}
		writeOurs(t, m, sv.dir, sv.sourceLogits)
		m.Close()
		dirs = append(dirs, sv.dir)
	}
	raw := testutil.RunPython(t, "hf_check_saved.py", dirs...)
	var report map[string]hfReport
	if err := json.Unmarshal(raw, &report); err != nil {
		t.Fatalf("%v\n%s", err, raw)
	}
	for _, sv := range all {
		r, ok := report[sv.dir]
		if !ok {
			t.Errorf("%s: no report", sv.dir)
			continue
		}
		t.Logf("%s: transformers %s, max |logit - ours| = %.3g over %d case(s)", filepath.Base(sv.dir), r.Architecture, r.MaxDiff, r.Cases)
		if r.MaxDiff > tol || math.IsNaN(r.MaxDiff) {
			t.Errorf("%s: transformers' logits differ from ours by %.3g", sv.dir, r.MaxDiff)
		}
		if len(r.Missing)+len(r.Unexpected)+len(r.Mismatched) > 0 {
			t.Errorf("%s: transformers found missing %v, unexpected %v, mismatched %v", sv.dir, r.Missing, r.Unexpected, r.Mismatched)
		}
		if r.Architecture != sv.arch || r.Tied != sv.tied {
			t.Errorf("%s: transformers built %s (tied %v), want %s (tied %v)", sv.dir, r.Architecture, r.Tied, sv.arch, sv.tied)
		}
	}
	// Init ships the tokenizer and Qwen's generation config.
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json", "generation_config.json"} {
		if _, err := os.Stat(filepath.Join(initDir, f)); err != nil {
			t.Errorf("init checkpoint: %v", err)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "qwen2_gqa_untied", safetensors.IndexFile)); err != nil {
		t.Errorf("sharded save: %v", err)
	}
	gen, err := model.ReadGenerationConfig(initDir)
	if err != nil || gen == nil {
		t.Fatalf("init generation config: %v", err)
	}
	if diff := cmp.Diff(model.TokenIDs{151645, 151643}, gen.EOSTokenID); diff != "" {
		t.Errorf("init eos ids (-want +got):\n%s", diff)
	}
}
