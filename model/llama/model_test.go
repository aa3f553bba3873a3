package llama_test

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/modeltest"
	"github.com/evolm/evolm/model/torch"
)

// TestParameterNames: Parameters lists HF's named_parameters, in order.
func TestParameterNames(t *testing.T) {
	dir, names := golden.Get(t)
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join(dir, name, "params.json"))
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		m, err := model.Load(filepath.Join(dir, name), model.LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, p := range m.Parameters() {
			got = append(got, p.Name)
		}
		m.Close()
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s parameter names (-HF +ours):\n%s", name, diff)
		}
	}
}

// TestFrozenCopy: the copy computes the same logits, does not require grad
// and shares no storage with the original.
func TestFrozenCopy(t *testing.T) {
	dir, _ := golden.Get(t)
	base := torch.Live()
	m, err := model.Load(filepath.Join(dir, "qwen3_mha_untied_bias"), model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := model.SetRequiresGrad(m, true); err != nil {
		t.Fatal(err)
	}
	ref, err := model.FrozenCopy(m)
	if err != nil {
		t.Fatal(err)
	}
	rc := readRefs(t, filepath.Join(dir, "qwen3_mha_untied_bias", "ref.safetensors"))[1]
	if d := maxDiff(rc, forward(t, ref, rc)); d > tol {
		t.Errorf("frozen copy logits differ from HF by %.3g", d)
	}
	for _, p := range ref.Parameters() {
		if torch.RequiresGrad(p.Tensor) {
			t.Errorf("frozen copy's %s requires grad", p.Name)
		}
	}
	for _, p := range m.Parameters() {
		if !torch.RequiresGrad(p.Tensor) {
			t.Errorf("original %s lost requires_grad", p.Name)
		}
	}
	// Zero the original's weights in place; the copy must not change.
	err = torch.NoGrad(func() error {
		for _, p := range m.Parameters() {
			if err := p.Tensor.Zero_(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(rc, forward(t, ref, rc)); d > tol {
		t.Errorf("after zeroing the original, the copy's logits moved by %.3g", d)
	}
	m.Close()
	ref.Close()
	modeltest.CheckLeaks(t, base)
}

// TestNoLeaks: 100 forwards (with and without a cache, with grad on and off)
// leave the live-tensor count where it was.
func TestNoLeaks(t *testing.T) {
	dir, _ := golden.Get(t)
	m, err := model.Load(filepath.Join(dir, "qwen3_gqa_tied"), model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	rc := readRefs(t, filepath.Join(dir, "qwen3_gqa_tied", "ref.safetensors"))[1]
	base := torch.Live()
	for i := 0; i < 100; i++ {
		s := torch.NewScope()
		batch := rc.Batch(s)
		var cache *model.Cache
		if i%2 == 1 {
			if cache, err = model.NewCache(m, int(rc.B), int(rc.T)); err != nil {
				t.Fatal(err)
			}
			batch.Cache = cache
		}
		restore := torch.SetGrad(i%3 == 0)
		if _, err := m.Forward(s, batch); err != nil {
			t.Fatal(err)
		}
		restore()
		if cache != nil {
			cache.Close()
		}
		s.Close()
	}
	if n := torch.Live() - base; n != 0 {
		t.Errorf("live tensors after 100 forwards: %+d from baseline", n)
	}
}

// TestBFloat16Forward runs the mixed-precision path used on GPUs (bf16
// parameters, fp32 norms/softmax/RoPE) on the CPU and checks the logits stay
// within bf16 rounding of HF's fp32 logits.
func TestBFloat16Forward(t *testing.T) {
	dir, _ := golden.Get(t)
	for _, name := range []string{"qwen3_gqa_tied", "qwen2_gqa_untied"} {
		m, err := model.Load(filepath.Join(dir, name), model.LoadOptions{DType: torch.BFloat16})
		if err != nil {
			t.Fatal(err)
		}
		if m.DType() != torch.BFloat16 {
			t.Errorf("dtype %s, want bfloat16", torch.DTypeName(m.DType()))
		}
		rc := readRefs(t, filepath.Join(dir, name, "ref.safetensors"))[1]
		got := forward(t, m, rc)
		scale := 0.0
		for _, v := range rc.logits {
			scale = math.Max(scale, math.Abs(float64(v)))
		}
		d := maxDiff(rc, got)
		t.Logf("%s bf16: max |logit - HF fp32| = %.3g (max |logit| %.3g)", name, d, scale)
		if d > 0.05*scale || math.IsNaN(d) {
			t.Errorf("%s bf16 logits off by %.3g (max |logit| %.3g)", name, d, scale)
		}
		m.Close()
	}
}
