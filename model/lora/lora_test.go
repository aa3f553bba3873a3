package lora_test

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/lora"
	"github.com/evolm/evolm/model/modeltest"
	"github.com/evolm/evolm/model/torch"
)

func TestConfigNormalize(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   lora.Config
		want []string
		err  string
	}{
		{"default targets", lora.Config{Rank: 8, Alpha: 16}, lora.DefaultTargets, ""},
		{"short names, any order", lora.Config{Rank: 8, Alpha: 16, Targets: []string{"down", "q", "v_proj"}}, []string{"q_proj", "v_proj", "down_proj"}, ""},
		{"rank 0", lora.Config{Rank: 0, Alpha: 16}, nil, "rank 0"},
		{"no alpha", lora.Config{Rank: 4}, nil, "alpha"},
		{"dropout 1", lora.Config{Rank: 4, Alpha: 1, Dropout: 1}, nil, "dropout"},
		{"lm_head", lora.Config{Rank: 4, Alpha: 1, Targets: []string{"q", "lm_head"}}, nil, "lm_head"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.in.Normalize()
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one mentioning %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got.Targets); diff != "" {
				t.Errorf("targets (-want +got):\n%s", diff)
			}
		})
	}
	if s := (lora.Config{Rank: 16, Alpha: 32}).Scaling(); s != 2 {
		t.Errorf("scaling %v, want alpha/r = 2", s)
	}
	if s := (lora.Config{Rank: 16, Alpha: 32, RSLoRA: true}).Scaling(); s != 8 {
		t.Errorf("rslora scaling %v, want alpha/√r = 8", s)
	}
}

// TestReadConfigRefusesUnsupported: PEFT features evolm does not compute are
// refused by name instead of silently computing something else.
func TestReadConfigRefusesUnsupported(t *testing.T) {
	for _, tc := range []struct{ edit, want string }{
		{`"use_dora": true`, "use_dora"},
		{`"bias": "all"`, "bias"},
		{`"rank_pattern": {"q_proj": 8}`, "rank_pattern"},
		{`"modules_to_save": ["lm_head"]`, "modules_to_save"},
		{`"peft_type": "IA3"`, "peft_type"},
	} {
		dir := t.TempDir()
		if err := lora.WriteConfig(dir, lora.Config{Rank: 4, Alpha: 8}, "base"); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, lora.ConfigFile)
		b, _ := os.ReadFile(p)
		key := tc.edit[:strings.Index(tc.edit, ":")]
		lines := strings.Split(string(b), "\n")
		for i, l := range lines {
			if strings.HasPrefix(strings.TrimSpace(l), key+":") {
				lines[i] = "  " + tc.edit + map[bool]string{true: ",", false: ""}[strings.HasSuffix(l, ",")]
			}
		}
		if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
		_, _, err := lora.ReadConfig(dir)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want one naming %s", tc.edit, err, tc.want)
		}
	}
	dir := t.TempDir()
	if err := lora.WriteConfig(dir, lora.Config{Rank: 4, Alpha: 8, Dropout: 0.05, Targets: []string{"k", "o"}}, "some/base"); err != nil {
		t.Fatal(err)
	}
	c, base, err := lora.ReadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(lora.Config{Rank: 4, Alpha: 8, Dropout: 0.05, Targets: []string{"k_proj", "o_proj"}}, c); diff != "" || base != "some/base" {
		t.Errorf("round trip (-want +got):\n%s base %q", diff, base)
	}
}

func tinyModel(t *testing.T, dt torch.DType) model.CausalLM {
	t.Helper()
	cfg := &model.Config{
		Architectures: []string{"Qwen3ForCausalLM"}, ModelType: "qwen3",
		VocabSize: 128, HiddenSize: 64, IntermediateSize: 96, NumHiddenLayers: 2,
		NumAttentionHeads: 4, NumKeyValueHeads: 2, HeadDim: 16, HiddenAct: "silu",
		MaxPositionEmbeddings: 256, InitializerRange: 0.02, RMSNormEps: 1e-6,
		RopeTheta: 1e6, TieWordEmbeddings: true,
	}
	if err := model.NewConfig(cfg); err != nil {
		t.Fatal(err)
	}
	m, err := model.Build(cfg, model.LoadOptions{DType: dt})
	if err != nil {
		t.Fatal(err)
	}
	if err := model.Randomize(m, 1); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestFreshAdapter: lora_A ~ U(−1/√in, 1/√in) (kaiming_uniform_(a=√5)),
// lora_B = 0, so a fresh adapter computes the base model exactly; the
// adapter is float32 on a bfloat16 base.
func TestFreshAdapter(t *testing.T) {
	live := torch.Live()
	m := tinyModel(t, torch.BFloat16)
	ids := []int64{5, 9, 100, 3, 77, 1}
	before := tinyLogits(t, m, ids)
	ad, err := lora.New(m, lora.Config{Rank: 8, Alpha: 16}, 42)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(ad.Layers()), 2*7; got != want {
		t.Fatalf("%d adapted layers, want %d", got, want)
	}
	count, _ := lora.ParamCount(m.Config(), ad.Config())
	if count != ad.NumParams() {
		t.Errorf("ParamCount %d, NumParams %d", count, ad.NumParams())
	}
	for _, l := range ad.Layers() {
		if l.A.DType() != torch.Float32 || l.B.DType() != torch.Float32 {
			t.Fatalf("%s: adapter dtypes %s %s, want float32", l.Module, torch.DTypeName(l.A.DType()), torch.DTypeName(l.B.DType()))
		}
		a, _ := torch.Float32s(l.A)
		sh, _ := torch.Shape(l.A)
		bound := 1 / math.Sqrt(float64(sh[1]))
		var sum, sq float64
		for _, v := range a {
			if math.Abs(float64(v)) > bound {
				t.Fatalf("%s: lora_A value %v outside ±%v", l.Module, v, bound)
			}
			sum += float64(v)
			sq += float64(v) * float64(v)
		}
		n := float64(len(a))
		if mean, vr := sum/n, sq/n; math.Abs(mean) > 0.2*bound || math.Abs(vr/(bound*bound/3)-1) > 0.25 {
			t.Errorf("%s: lora_A mean %.4f var %.5f, want ≈0 and %.5f (uniform)", l.Module, mean, vr, bound*bound/3)
		}
		b, _ := torch.Float32s(l.B)
		for _, v := range b {
			if v != 0 {
				t.Fatalf("%s: lora_B not zero", l.Module)
			}
		}
	}
	if diff := cmp.Diff(before, tinyLogits(t, m, ids)); diff != "" {
		t.Errorf("a fresh adapter changed the logits")
	}
	ad.Close()
	m.Close()
	modeltest.CheckLeaks(t, live)
}

// TestDropout: dropout acts only in training, is reproducible from the
// libtorch seed.
func TestDropout(t *testing.T) {
	m := tinyModel(t, torch.Float32)
	defer m.Close()
	ad, err := lora.New(m, lora.Config{Rank: 4, Alpha: 4, Dropout: 0.5, Targets: []string{"q"}}, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer ad.Close()
	if err := torch.NoGrad(func() error {
		s := torch.NewScope()
		defer s.Close()
		for _, l := range ad.Layers() {
			s.Copy_(l.B, s.Ones([]int64{64, 4}, torch.Float32, torch.CPU))
		}
		return s.Err()
	}); err != nil {
		t.Fatal(err)
	}
	ids := []int64{5, 9, 100, 3}
	eval := tinyLogits(t, m, ids)
	if diff := cmp.Diff(eval, tinyLogits(t, m, ids)); diff != "" {
		t.Fatal("evaluation mode is not deterministic")
	}
	ad.SetTraining(true)
	torch.ManualSeed(9)
	d1 := tinyLogits(t, m, ids)
	torch.ManualSeed(9)
	d2 := tinyLogits(t, m, ids)
	d3 := tinyLogits(t, m, ids)
	ad.SetTraining(false)
	if diff := cmp.Diff(d1, d2); diff != "" {
		t.Error("the same seed gave different dropout masks")
	}
	if cmp.Equal(d1, d3) || cmp.Equal(d1, eval) {
		t.Error("dropout did not change the training forward")
	}
	if diff := cmp.Diff(eval, tinyLogits(t, m, ids)); diff != "" {
		t.Error("evaluation after training mode differs")
	}
}

func tinyLogits(t *testing.T, m model.CausalLM, ids []int64) []float32 {
	t.Helper()
	return modeltest.Logits(t, m, func(s *torch.Scope) model.Batch {
		return model.Batch{IDs: s.FromInt64(ids, 1, int64(len(ids)))}
	})
}

// TestLoadRefusesBrokenAdapters: an adapter whose weights hold NaN or Inf,
// or whose lora_alpha scales it absurdly, is refused at load, as a
// checkpoint with such weights is (a loaded one would answer "!!!!!!").
func TestLoadRefusesBrokenAdapters(t *testing.T) {
	m := tinyModel(t, torch.Float32)
	defer m.Close()
	save := func(cfg lora.Config, poison float64) string {
		t.Helper()
		ad, err := lora.New(m, cfg, 1)
		if err != nil {
			t.Fatal(err)
		}
		defer ad.Close()
		if poison != 0 {
			err := torch.NoGrad(func() error {
				s := torch.NewScope()
				defer s.Close()
				l := ad.Layers()[1]
				s.Copy_(l.B, s.AddScalar(s.MulScalar(l.B, 0), poison))
				return s.Err()
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		dir := t.TempDir()
		if err := ad.Save(dir, "base"); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	good := lora.Config{Rank: 4, Alpha: 8}
	for _, tc := range []struct {
		name, dir, want string
	}{
		{"NaN weights", save(good, math.NaN()), "NaN or infinite"},
		{"Inf weights", save(good, math.Inf(1)), "NaN or infinite"},
	} {
		if a, err := lora.Load(m, tc.dir); err == nil || !strings.Contains(err.Error(), tc.want) {
			if a != nil {
				a.Close()
			}
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
		if a, err := lora.LoadDetached(m, tc.dir); err == nil {
			a.Close()
			t.Errorf("%s: loaded detached", tc.name)
		}
	}
	// An absurd lora_alpha in a config a client wrote.
	dir := save(good, 0)
	cfgPath := filepath.Join(dir, lora.ConfigFile)
	b, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, []byte(strings.Replace(string(b), `"lora_alpha": 8`, `"lora_alpha": 1e+38`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if a, err := lora.Load(m, dir); err == nil || !strings.Contains(err.Error(), "swamped") {
		if a != nil {
			a.Close()
		}
		t.Errorf("lora_alpha 1e38: %v", err)
	}
}
