package lora_test

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/model"
	_ "github.com/evolm/evolm/model/llama"
	"github.com/evolm/evolm/model/lora"
	"github.com/evolm/evolm/model/modeltest"
	"github.com/evolm/evolm/model/safetensors"
	"github.com/evolm/evolm/model/torch"
)

// tol is the fp32 parity bound with HF PEFT: logits and LoRA
// gradients.
const tol = 1e-5

// golden holds what scripts/peft_lora.py golden writes once per test binary: a
// tiny Qwen3 and a tiny Llama, each with a PEFT adapter and its references.
var golden = testutil.Golden{Prefix: "evolm-peft-golden-", Script: "peft_lora.py", Args: []string{"golden"}}

func TestMain(m *testing.M) {
	torch.SetNumThreads(1)
	code := m.Run()
	golden.Remove()
	os.Exit(code)
}

func logitsOf(t *testing.T, m model.CausalLM, rc modeltest.RefCase) []float32 {
	t.Helper()
	return modeltest.Logits(t, m, rc.Batch)
}

func loadBase(t *testing.T, dir string, dt torch.DType) model.CausalLM {
	t.Helper()
	m, err := model.Load(dir, model.LoadOptions{DType: dt})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// loadGolden reads golden model name's references and loads its base model
// with its PEFT adapter.
func loadGolden(t *testing.T, dir, name string) (*modeltest.Refs, model.CausalLM, *lora.Adapter) {
	t.Helper()
	r := modeltest.ReadRefs(t, filepath.Join(dir, name, "ref.safetensors"))
	m := loadBase(t, filepath.Join(dir, name, "base"), 0)
	ad, err := lora.Load(m, filepath.Join(dir, name, "adapter"))
	if err != nil {
		t.Fatal(err)
	}
	return r, m, ad
}

// TestPEFTParity: an adapter saved by PEFT loads in evolm, and the LoRA
// model's logits, its logits with the adapters off, and the gradients of
// every lora_A and lora_B equal PEFT's.
func TestPEFTParity(t *testing.T) {
	dir, names := golden.Get(t)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			live := torch.Live()
			r, m, ad := loadGolden(t, dir, name)
			want := lora.Config{Rank: 4, Alpha: 8, Dropout: 0.05, Targets: lora.DefaultTargets}
			if diff := cmp.Diff(want, ad.Config()); diff != "" {
				t.Errorf("adapter config (-want +got):\n%s", diff)
			}
			for c, rc := range r.Cases {
				d := rc.MaxDiff(logitsOf(t, m, rc), r.F32s(t, fmt.Sprintf("case%d.logits", c)))
				t.Logf("%s case%d: max |logit - PEFT| = %.3g", name, c, d)
				if d > tol {
					t.Errorf("%s case%d: LoRA logits differ from PEFT's by %.3g > %g", name, c, d, tol)
				}
				var off []float32
				_ = ad.Disabled(func() error { off = logitsOf(t, m, rc); return nil })
				d = rc.MaxDiff(off, r.F32s(t, fmt.Sprintf("case%d.base", c)))
				t.Logf("%s case%d adapters off: max |logit - PEFT disable_adapter| = %.3g", name, c, d)
				if d > tol {
					t.Errorf("%s case%d: adapters-off logits differ from PEFT's disable_adapter by %.3g > %g", name, c, d, tol)
				}
			}
			grads := loraGrads(t, m, ad, r.Cases)
			worst := 0.0
			for _, p := range ad.Parameters() {
				want := r.F32s(t, "grad."+p.Name)
				got := grads[p.Name]
				if len(got) != len(want) {
					t.Fatalf("%s: %d gradient values, PEFT has %d", p.Name, len(got), len(want))
				}
				d := 0.0
				for i := range got {
					d = math.Max(d, math.Abs(float64(got[i])-float64(want[i])))
					if math.IsNaN(float64(got[i])) {
						d = math.Inf(1)
					}
				}
				worst = math.Max(worst, d)
				if d > tol {
					t.Errorf("%s: gradient differs from PEFT's by %.3g > %g", p.Name, d, tol)
				}
			}
			t.Logf("%s: %d LoRA gradients, max |grad - PEFT| = %.3g", name, len(grads), worst)
			for _, p := range m.Parameters() {
				if torch.RequiresGrad(p.Tensor) {
					t.Errorf("base parameter %s requires grad", p.Name)
				}
			}
			ad.Close()
			m.Close()
			modeltest.CheckLeaks(t, live)
		})
	}
}

// loraGrads returns d loss / d (lora_A, lora_B) for the loss of
// peft_lora.py's golden command, summed over the cases.
func loraGrads(t *testing.T, m model.CausalLM, ad *lora.Adapter, cases []modeltest.RefCase) map[string][]float32 {
	t.Helper()
	defer torch.SetGrad(true)()
	for _, p := range ad.Parameters() {
		if err := torch.SetRequiresGrad(p.Tensor, true); err != nil {
			t.Fatal(err)
		}
	}
	for _, rc := range cases {
		s := torch.NewScope()
		b := rc.Batch(s)
		logits, err := m.Forward(s, b)
		if err != nil {
			t.Fatal(err)
		}
		loss := modeltest.NextTokenLoss(s, logits, b.IDs, b.Mask, rc.T)
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		if err := torch.Backward(loss); err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
	s := torch.NewScope()
	defer s.Close()
	return modeltest.Grads(t, s, ad.Parameters())
}

// TestMergeMatchesPEFT: MergeAndUnload gives PEFT's merge_and_unload logits
// and leaves a plain model.
func TestMergeMatchesPEFT(t *testing.T) {
	dir, names := golden.Get(t)
	for _, name := range names {
		live := torch.Live()
		r, m, ad := loadGolden(t, dir, name)
		if err := ad.MergeAndUnload(); err != nil {
			t.Fatal(err)
		}
		for _, l := range m.(model.Adaptable).Linears() {
			if *l.Adapter != nil {
				t.Fatalf("%s still carries an adapter after merge", l.Name)
			}
		}
		for c, rc := range r.Cases {
			d := rc.MaxDiff(logitsOf(t, m, rc), r.F32s(t, fmt.Sprintf("case%d.merged", c)))
			t.Logf("%s case%d merged: max |logit - PEFT merge_and_unload| = %.3g", name, c, d)
			if d > tol {
				t.Errorf("%s case%d: merged logits differ from PEFT's merge_and_unload by %.3g > %g", name, c, d, tol)
			}
		}
		m.Close()
		if n := torch.Live() - live; n != 0 {
			t.Errorf("%s: %d tensors leaked", name, n)
		}
	}
}

// TestSavedAdapterLoadsInPEFT: an adapter evolm creates and saves loads in
// PEFT's PeftModel.from_pretrained with the logits evolm computes, and loads
// back into evolm bit for bit.
func TestSavedAdapterLoadsInPEFT(t *testing.T) {
	dir, names := golden.Get(t)
	live := torch.Live()
	cfg := lora.Config{Rank: 3, Alpha: 5, Dropout: 0.1, Targets: []string{"down", "q", "v"}}
	type job struct {
		Base    string `json:"base"`
		Adapter string `json:"adapter"`
		Ref     string `json:"ref"`
	}
	var jobs []job
	var saved []*lora.Adapter
	var models []model.CausalLM
	var counts []int64
	for _, name := range names {
		baseDir := filepath.Join(dir, name, "base")
		r := modeltest.ReadRefs(t, filepath.Join(dir, name, "ref.safetensors"))
		m := loadBase(t, baseDir, 0)
		models = append(models, m)
		ad, err := lora.New(m, cfg, 11)
		if err != nil {
			t.Fatal(err)
		}
		perturbB(t, ad, 12)
		out := t.TempDir()
		if err := ad.Save(out, baseDir); err != nil {
			t.Fatal(err)
		}
		writeOurs(t, m, r.Cases, filepath.Join(out, "ours.safetensors"))
		jobs = append(jobs, job{Base: baseDir, Adapter: out, Ref: filepath.Join(out, "ours.safetensors")})
		saved = append(saved, ad)
		n, err := lora.ParamCount(m.Config(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		counts = append(counts, n)
	}
	jobFile := filepath.Join(t.TempDir(), "jobs.json")
	b, _ := json.Marshal(jobs)
	if err := os.WriteFile(jobFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	var reps []struct {
		MaxDiff   float64  `json:"max_diff"`
		Cases     int      `json:"cases"`
		R         int      `json:"r"`
		Alpha     float64  `json:"lora_alpha"`
		Dropout   float64  `json:"lora_dropout"`
		Targets   []string `json:"target_modules"`
		Trainable int64    `json:"trainable"`
	}
	raw := testutil.RunPython(t, "peft_lora.py", "check", jobFile)
	if err := json.Unmarshal(raw, &reps); err != nil || len(reps) != len(names) {
		t.Fatalf("%v: %s", err, raw)
	}
	for i, name := range names {
		rep, ad := reps[i], saved[i]
		t.Logf("%s: PEFT loads evolm's adapter: %d cases, max |PEFT - evolm| = %.3g, %d trainable", name, rep.Cases, rep.MaxDiff, rep.Trainable)
		if rep.Cases == 0 || rep.MaxDiff > tol || math.IsNaN(rep.MaxDiff) {
			t.Errorf("%s: PEFT logits of evolm's adapter differ by %.3g over %d cases", name, rep.MaxDiff, rep.Cases)
		}
		if rep.R != 3 || rep.Alpha != 5 || rep.Dropout != 0.1 || !cmp.Equal(rep.Targets, []string{"down_proj", "q_proj", "v_proj"}) {
			t.Errorf("%s: PEFT read r=%d alpha=%v dropout=%v targets %v", name, rep.R, rep.Alpha, rep.Dropout, rep.Targets)
		}
		if rep.Trainable != ad.NumParams() || counts[i] != ad.NumParams() {
			t.Errorf("%s: adapter weights: PEFT %d, NumParams %d, ParamCount %d", name, rep.Trainable, ad.NumParams(), counts[i])
		}

		// Back into evolm: the same bits.
		m2 := loadBase(t, jobs[i].Base, 0)
		ad2, err := lora.Load(m2, jobs[i].Adapter)
		if err != nil {
			t.Fatal(err)
		}
		p1, p2 := ad.Parameters(), ad2.Parameters()
		if len(p1) != len(p2) {
			t.Fatalf("%s: %d parameters reloaded, want %d", name, len(p2), len(p1))
		}
		for k := range p1 {
			a, _ := torch.Bytes(p1[k].Tensor)
			b, _ := torch.Bytes(p2[k].Tensor)
			if p1[k].Name != p2[k].Name || string(a) != string(b) {
				t.Errorf("%s: %s: reloaded adapter differs", name, p1[k].Name)
			}
		}
		ad2.Close()
		m2.Close()
	}
	for i := range saved {
		saved[i].Close()
		models[i].Close()
	}
	modeltest.CheckLeaks(t, live)
}

// perturbB gives lora_B random values: a fresh adapter's zero B would make
// the adapter invisible in the logits.
func perturbB(t *testing.T, ad *lora.Adapter, seed int64) {
	t.Helper()
	torch.ManualSeed(seed)
	err := torch.NoGrad(func() error {
		s := torch.NewScope()
		defer s.Close()
		for _, l := range ad.Layers() {
			sh, err := torch.Shape(l.B)
			if err != nil {
				return err
			}
			s.Copy_(l.B, s.MulScalar(s.Randn(sh, torch.Float32, torch.CPU), 0.1))
		}
		return s.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// writeOurs writes the cases' inputs and m's logits for peft_lora.py check.
func writeOurs(t *testing.T, m model.CausalLM, cases []modeltest.RefCase, path string) {
	t.Helper()
	var infos []safetensors.Info
	data := map[string][]byte{}
	for c, rc := range cases {
		logits := logitsOf(t, m, rc)
		b := make([]byte, 4*len(logits))
		for i, v := range logits {
			u := math.Float32bits(v)
			b[4*i], b[4*i+1], b[4*i+2], b[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
		}
		add := func(n string, dt safetensors.DType, shape []int64, bs []byte) {
			infos = append(infos, safetensors.Info{Name: fmt.Sprintf("case%d.%s", c, n), DType: dt, Shape: shape})
			data[fmt.Sprintf("case%d.%s", c, n)] = bs
		}
		add("logits", safetensors.F32, []int64{rc.B, rc.T, rc.V}, b)
		for _, x := range []struct {
			n string
			v []int64
		}{{"ids", rc.IDs}, {"mask", rc.Mask}, {"pos", rc.Pos}} {
			bs := make([]byte, 8*len(x.v))
			for i, v := range x.v {
				for k := 0; k < 8; k++ {
					bs[8*i+k] = byte(uint64(v) >> (8 * k))
				}
			}
			add(x.n, safetensors.I64, []int64{rc.B, rc.T}, bs)
		}
	}
	err := safetensors.Write(path, infos, nil, func(i safetensors.Info) ([]byte, error) { return data[i.Name], nil })
	if err != nil {
		t.Fatal(err)
	}
}
