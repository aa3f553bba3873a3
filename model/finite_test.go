package model_test

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/evolm/evolm/internal/testutil/sttest"
	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/modeltest"
	"github.com/evolm/evolm/model/safetensors"
	"github.com/evolm/evolm/model/torch"
)

func TestLoadRefusesNonFiniteWeights(t *testing.T) {
	for _, v := range []float32{float32(math.NaN()), float32(math.Inf(-1))} {
		base := torch.Live()
		dir := tinyCheckpoint(t)
		sttest.SetF32(t, filepath.Join(dir, safetensors.SingleFile), "model.layers.1.mlp.up_proj.weight", v, 1)
		m, err := model.Load(dir, model.LoadOptions{})
		if err == nil {
			m.Close()
			t.Fatalf("Load of a checkpoint with a %v weight succeeded", v)
		}
		if !strings.Contains(err.Error(), "model.layers.1.mlp.up_proj.weight: 1 of 384 elements are NaN or Inf") {
			t.Errorf("error %q does not name the tensor", err)
		}
		modeltest.CheckLeaks(t, base)
	}
}

func TestSaveRefusesNonFiniteWeights(t *testing.T) {
	m, err := model.Load(tinyCheckpoint(t), model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	err = torch.NoGrad(func() error {
		s := torch.NewScope()
		defer s.Close()
		p := m.Parameters()[0]
		s.Copy_(p.Tensor, s.MulScalar(p.Tensor, math.NaN()))
		return s.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	err = model.Save(m, dir, model.SaveOptions{})
	if err == nil || !strings.Contains(err.Error(), m.Parameters()[0].Name+": ") || !strings.Contains(err.Error(), "refusing to write") {
		t.Fatalf("Save of a NaN model: %v", err)
	}
	if _, err := safetensors.OpenDir(dir); err == nil {
		t.Error("Save wrote weights despite NaN parameters")
	}
}

// TestNonFiniteAcrossChunks: NonFinite checks a large tensor in pieces and
// counts the NaN and Inf elements on both sides of each piece's edge.
func TestNonFiniteAcrossChunks(t *testing.T) {
	const n = 1<<24 + 5 // just over one chunk
	data := make([]float32, n)
	for _, i := range []int{0, 1<<24 - 1, 1 << 24, n - 1} {
		data[i] = float32(math.NaN())
	}
	data[12345] = float32(math.Inf(1))
	s := torch.NewScope()
	defer s.Close()
	x := s.Reshape(s.FromFloat32(data, n), 3, n/3) // n = 3 × 5592407
	got, err := model.NonFinite(x)
	if err != nil {
		t.Fatal(err)
	}
	if got != 5 {
		t.Errorf("NonFinite = %d, want 5", got)
	}
}
