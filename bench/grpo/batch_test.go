package main

import (
	"context"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/modeltest"
	"github.com/google/go-cmp/cmp"
)

// TestBatchFile: a batch is a pure function of (checkpoint, spec), survives
// the JSON file both sides read bit for bit, has group advantages that sum to
// 0 per prompt, and old/reference log-probs that are valid log-probs near the
// model's own.
func TestBatchFile(t *testing.T) {
	dir := t.TempDir()
	ckpt := filepath.Join(dir, "ckpt")
	modeltest.InitTiny(t, ckpt, 1)
	m, err := model.Load(ckpt, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	spec := Spec{Prompts: 2, Group: 3, PromptLen: 5, CompletionLen: 4, Noise: 0.1, Seed: 7}
	ctx := context.Background()
	a, err := MakeBatch(ctx, m, spec)
	if err != nil {
		t.Fatal(err)
	}
	again, err := MakeBatch(ctx, m, spec)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(a, again); diff != "" {
		t.Errorf("same seed, different batch (-first +second):\n%s", diff)
	}
	path := filepath.Join(dir, "batch.json")
	if err := a.Write(path); err != nil {
		t.Fatal(err)
	}
	read, err := ReadBatch(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(a, read); diff != "" {
		t.Errorf("batch changed through the file (-written +read):\n%s", diff)
	}
	if got, want := len(a.Rows), spec.Prompts*spec.Group; got != want {
		t.Fatalf("%d rows, want %d", got, want)
	}
	for p := 0; p < spec.Prompts; p++ {
		sum := 0.0
		for g := 0; g < spec.Group; g++ {
			r := a.Rows[p*spec.Group+g]
			sum += r.Advantage
			if diff := cmp.Diff(a.Rows[p*spec.Group].Prompt, r.Prompt); diff != "" {
				t.Errorf("prompt %d completion %d: prompt differs within the group (-first +this):\n%s", p, g, diff)
			}
			for j := range r.Completion {
				for _, lp := range []float64{r.OldLogP[j], r.RefLogP[j]} {
					// A random tiny model is near uniform over 151936 ids: ln ≈ −11.9.
					if math.IsNaN(lp) || lp > -10 || lp < -14 {
						t.Errorf("prompt %d completion %d token %d: log-prob %v, want ≈ −ln(vocab) ± noise", p, g, j, lp)
					}
				}
			}
		}
		if math.Abs(sum) > 1e-9 {
			t.Errorf("prompt %d: advantages sum to %v, want 0", p, sum)
		}
	}
	other := spec
	other.Seed++
	b, err := MakeBatch(ctx, m, other)
	if err != nil {
		t.Fatal(err)
	}
	if cmp.Equal(a.Rows[0].Completion, b.Rows[0].Completion) {
		t.Errorf("seeds %d and %d drew the same first completion", spec.Seed, other.Seed)
	}

	// A file whose log-probs do not cover the completion is rejected.
	bad := filepath.Join(dir, "bad.json")
	a.Rows[1].RefLogP = a.Rows[1].RefLogP[:1]
	if err := a.Write(bad); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadBatch(bad); err == nil || !strings.Contains(err.Error(), "row 1") {
		t.Errorf("ReadBatch(short ref log-probs) = %v, want an error naming row 1", err)
	}
}
