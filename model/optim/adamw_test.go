package optim

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/model/modeltest"
	"github.com/evolm/evolm/model/safetensors"
	"github.com/evolm/evolm/model/torch"
	"github.com/google/go-cmp/cmp"
)

// loadF32 reads every F32 tensor of a safetensors file into s.
func loadF32(t *testing.T, s *torch.Scope, path string) map[string]*torch.Tensor {
	t.Helper()
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]*torch.Tensor{}
	for _, n := range f.Names() {
		info, _ := f.Info(n)
		if info.DType != safetensors.F32 {
			t.Fatalf("%s: %s is %s, want F32", path, n, info.DType)
		}
		data, err := f.Data(n)
		if err != nil {
			t.Fatal(err)
		}
		out[n] = s.Clone(s.FromBytes(data, info.Shape, torch.Float32))
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// reference builds a tiny Qwen3 checkpoint with transformers, the torch
// gradient of a log-prob loss on it, and torch's AdamW trajectory for hp.
func reference(t *testing.T, hp map[string]any) (dir string, norms []float64) {
	t.Helper()
	dir = t.TempDir()
	ckpt := filepath.Join(dir, "ckpt")
	testutil.RunPython(t, "hf_generate.py", "make", "--arch", "qwen3", "--out", ckpt, "--seed", "5")
	rows := `{"rows":[{"prompt":[5,6,7,8],"completion":[9,10,11]},{"prompt":[3],"completion":[40,41,42,43,44]}]}`
	writeFile(t, filepath.Join(dir, "rows.json"), rows)
	testutil.RunPython(t, "hf_grad.py", "grad", "--model", ckpt, "--in", filepath.Join(dir, "rows.json"), "--out", dir)
	b, _ := json.Marshal(hp)
	writeFile(t, filepath.Join(dir, "hp.json"), string(b))
	testutil.RunPython(t, "hf_grad.py", "adamw", "--model", ckpt, "--grads", filepath.Join(dir, "grads.safetensors"),
		"--in", filepath.Join(dir, "hp.json"), "--out", dir)
	var out struct{ Norms []float64 }
	raw, err := os.ReadFile(filepath.Join(dir, "adamw.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return dir, out.Norms
}

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// setGrads makes p.grad = c·g exactly for every param: the gradient of
// Σ p·(c·g) is c·g, and c is a power of two.
func setGrads(t *testing.T, params []Param, grads map[string]*torch.Tensor, c float64) {
	t.Helper()
	restore := torch.SetGrad(true)
	defer restore()
	s := torch.NewScope()
	defer s.Close()
	for _, p := range params {
		if err := torch.ZeroGrad(p.Tensor); err != nil {
			t.Fatal(err)
		}
		loss := s.Sum(s.Mul(p.Tensor, s.MulScalar(grads[p.Name], c)))
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		if err := torch.Backward(loss); err != nil {
			t.Fatal(err)
		}
	}
}

// maxDiff is the largest |a−b| and the largest |a−b|/(|b|+1e-6) over two
// equal-shaped tensors.
func maxDiff(t *testing.T, a, b *torch.Tensor) (abs, rel float64) {
	t.Helper()
	x, y := modeltest.Float32s(t, a), modeltest.Float32s(t, b)
	if len(x) != len(y) {
		t.Fatalf("sizes %d and %d differ", len(x), len(y))
	}
	for i := range x {
		d := math.Abs(float64(x[i]) - float64(y[i]))
		abs = max(abs, d)
		rel = max(rel, d/(math.Abs(float64(y[i]))+1e-6))
	}
	return abs, rel
}

var hp = map[string]any{
	"lr": 0.01, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1,
	"max_norm": 1.0, "scales": []float64{1, -0.5, 2},
}

func newOpt(t *testing.T, params []Param) *AdamW {
	t.Helper()
	groups, err := DefaultGroups(params, hp["weight_decay"].(float64))
	if err != nil {
		t.Fatal(err)
	}
	o, err := NewAdamW(groups, AdamWConfig{LR: 0.01, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func paramsOf(t *testing.T, m map[string]*torch.Tensor) []Param {
	t.Helper()
	var ps []Param
	for _, n := range sortedKeys(m) {
		if err := torch.SetRequiresGrad(m[n], true); err != nil {
			t.Fatal(err)
		}
		ps = append(ps, Param{Name: n, Tensor: m[n]})
	}
	return ps
}

func sortedKeys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// TestAdamWMatchesTorch: three steps of clip_grad_norm_ + AdamW (weight
// decay on ≥2-dim tensors only, clipping active) on torch's own gradients
// of a tiny Qwen3 match torch.optim.AdamW tensor by tensor.
func TestAdamWMatchesTorch(t *testing.T) {
	base := torch.Live()
	dir, norms := reference(t, hp)
	func() {
		s := torch.NewScope()
		defer s.Close()
		params := paramsOf(t, loadF32(t, s, filepath.Join(dir, "ckpt", "model.safetensors")))
		grads := loadF32(t, s, filepath.Join(dir, "grads.safetensors"))
		want := loadF32(t, s, filepath.Join(dir, "adamw.safetensors"))
		o := newOpt(t, params)
		defer o.Close()
		for step, c := range hp["scales"].([]float64) {
			setGrads(t, params, grads, c)
			norm, err := ClipGradNorm(params, hp["max_norm"].(float64))
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(norm-norms[step]) > 1e-5*norms[step] {
				t.Errorf("step %d: pre-clip norm %.7g, torch %.7g", step+1, norm, norms[step])
			}
			if err := o.Step(); err != nil {
				t.Fatal(err)
			}
			worst := 0.0
			for _, p := range params {
				abs, rel := maxDiff(t, p.Tensor, want[fmt.Sprintf("p%d.%s", step+1, p.Name)])
				t.Logf("step %d %-45s max abs %.2e rel %.2e", step+1, p.Name, abs, rel)
				worst = max(worst, abs)
			}
			if worst > 1e-6 {
				t.Errorf("step %d: params differ from torch by up to %.3g > 1e-6", step+1, worst)
			}
		}
		for _, sl := range o.slots {
			for _, st := range []struct {
				name string
				got  *torch.Tensor
				tol  float64
			}{{"exp_avg", sl.expAvg, 1e-6}, {"exp_avg_sq", sl.expSq, 1e-8}} {
				abs, _ := maxDiff(t, st.got, want[st.name+"."+sl.Name])
				if abs > st.tol {
					t.Errorf("%s.%s differs from torch by %.3g > %g", st.name, sl.Name, abs, st.tol)
				}
			}
		}
	}()
	if got := torch.Live(); got != base {
		t.Errorf("live tensors %d, want %d", got, base)
	}
}

// TestStateResumesExactly: 1 step, save, load into a fresh optimizer, 2 more
// steps equals 3 steps in one go, bit for bit.
func TestStateResumesExactly(t *testing.T) {
	dir := t.TempDir()
	s := torch.NewScope()
	defer s.Close()
	mk := func() map[string]*torch.Tensor {
		return map[string]*torch.Tensor{
			"w": s.Randn([]int64{4, 3}, torch.Float32, torch.CPU),
			"b": s.Randn([]int64{3}, torch.Float32, torch.CPU),
		}
	}
	torch.ManualSeed(3)
	initial := mk()
	grads := mk()
	clone := func() []Param {
		m := map[string]*torch.Tensor{}
		for k, v := range initial {
			m[k] = s.Clone(v)
		}
		return paramsOf(t, m)
	}
	run := func(o *AdamW, ps []Param, scales ...float64) {
		for _, c := range scales {
			setGrads(t, ps, grads, c)
			if _, err := ClipGradNorm(ps, 0.5); err != nil {
				t.Fatal(err)
			}
			if err := o.Step(); err != nil {
				t.Fatal(err)
			}
		}
	}
	straight := clone()
	o1 := newOpt(t, straight)
	defer o1.Close()
	run(o1, straight, 1, -0.5, 2)

	resumed := clone()
	o2 := newOpt(t, resumed)
	run(o2, resumed, 1)
	path := filepath.Join(dir, "optim.safetensors")
	if err := o2.Save(path); err != nil {
		t.Fatal(err)
	}
	o2.Close()
	o3 := newOpt(t, resumed)
	defer o3.Close()
	if err := o3.Load(path); err != nil {
		t.Fatal(err)
	}
	if o3.StepCount() != 1 {
		t.Errorf("step after load = %d, want 1", o3.StepCount())
	}
	run(o3, resumed, -0.5, 2)
	for i := range straight {
		a, _ := torch.Float32s(straight[i].Tensor)
		b, _ := torch.Float32s(resumed[i].Tensor)
		if diff := cmp.Diff(a, b); diff != "" {
			t.Errorf("%s: straight vs resumed (-straight +resumed):\n%s", straight[i].Name, diff)
		}
	}

	// A state file for other parameters is refused, naming every problem.
	other := paramsOf(t, map[string]*torch.Tensor{"w": s.Zeros([]int64{4, 4}, torch.Float32, torch.CPU)})
	o4 := newOpt(t, other)
	defer o4.Close()
	err := o4.Load(path)
	if err == nil {
		t.Fatal("loading a mismatched state: no error")
	}
	for _, want := range []string{"exp_avg.w is F32 [4 3], want F32 [4 4]", "unexpected exp_avg.b"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

func TestDefaultGroups(t *testing.T) {
	s := torch.NewScope()
	defer s.Close()
	ps := []Param{
		{"embed", s.Zeros([]int64{8, 4}, torch.Float32, torch.CPU)},
		{"norm", s.Zeros([]int64{4}, torch.Float32, torch.CPU)},
		{"proj", s.Zeros([]int64{4, 4}, torch.Float32, torch.CPU)},
		{"bias", s.Zeros([]int64{4}, torch.Float32, torch.CPU)},
	}
	gs, err := DefaultGroups(ps, 0.1)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	wd := map[string]float64{}
	for _, g := range gs {
		wd[g.Name] = g.WeightDecay
		for _, p := range g.Params {
			got[g.Name] = append(got[g.Name], p.Name)
		}
	}
	if diff := cmp.Diff(map[string][]string{"decay": {"embed", "proj"}, "no_decay": {"norm", "bias"}}, got); diff != "" {
		t.Errorf("groups (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]float64{"decay": 0.1, "no_decay": 0}, wd); diff != "" {
		t.Errorf("weight decay (-want +got):\n%s", diff)
	}
}

// TestBF16MasterWeights: with bf16 parameters the update runs on a float32
// master copy, which follows the float32 trajectory exactly (inputs chosen
// representable in bf16), and the parameter is the master rounded to bf16.
func TestBF16MasterWeights(t *testing.T) {
	s := torch.NewScope()
	defer s.Close()
	init := []float32{0.5, -1.25, 2, 0.375, -0.75, 1.5}
	grad := []float32{0.25, 0.5, -1, 0.125, -2, 4}
	p32 := paramsOf(t, map[string]*torch.Tensor{"w": s.Clone(s.FromFloat32(init, 2, 3))})
	p16 := paramsOf(t, map[string]*torch.Tensor{"w": s.ToDType(s.FromFloat32(init, 2, 3), torch.BFloat16)})
	g := map[string]*torch.Tensor{"w": s.FromFloat32(grad, 2, 3)}
	g16 := map[string]*torch.Tensor{"w": s.ToDType(g["w"], torch.BFloat16)}
	o32, o16 := newOpt(t, p32), newOpt(t, p16)
	defer o32.Close()
	defer o16.Close()
	for _, c := range []float64{1, -0.5, 2, 1} {
		setGrads(t, p32, g, c)
		setGrads(t, p16, g16, c)
		if err := o32.Step(); err != nil {
			t.Fatal(err)
		}
		if err := o16.Step(); err != nil {
			t.Fatal(err)
		}
	}
	want, _ := torch.Float32s(p32[0].Tensor)
	master, _ := torch.Float32s(o16.slots[0].master)
	if diff := cmp.Diff(want, master); diff != "" {
		t.Errorf("bf16 master vs float32 params (-want +got):\n%s", diff)
	}
	if torch.DTypeOf(p16[0].Tensor) != torch.BFloat16 {
		t.Fatalf("param dtype changed to %s", torch.DTypeName(torch.DTypeOf(p16[0].Tensor)))
	}
	rounded, _ := torch.Float32s(s.ToDType(s.ToDType(p32[0].Tensor, torch.BFloat16), torch.Float32))
	got, _ := torch.Float32s(p16[0].Tensor)
	if diff := cmp.Diff(rounded, got); diff != "" {
		t.Errorf("bf16 param vs rounded master (-want +got):\n%s", diff)
	}
}
