package analyze_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/evolm/evolm/stages/analyze"
)

func TestCheckpointStep(t *testing.T) {
	for path, want := range map[string]int64{
		"runs/x/checkpoints/step-000050/policy": 50,
		"runs/x/checkpoints/step_25":            25,
		"ckpt/global_step=7/model":              7,
		"models/Qwen3-8B":                       -1,
		"runs/step-3/checkpoints/step-000100":   100,
		"runs/footstep-9":                       -1,
	} {
		if got := analyze.CheckpointStep(path); got != want {
			t.Errorf("%s: step %d, want %d", path, got, want)
		}
	}
}

func TestLoadTrendPrompts(t *testing.T) {
	f := filepath.Join(t.TempDir(), "p.jsonl")
	data := ""
	for _, q := range []string{"a", "b", "c", "d", "e", "f"} {
		data += `{"question": "` + q + `"}` + "\n"
	}
	if err := os.WriteFile(f, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	load := func(order string, seed int64) string {
		ps, err := analyze.LoadTrendPrompts(context.Background(), memory.NewGoAllocator(), []string{f}, order, seed, 4)
		if err != nil {
			t.Fatal(err)
		}
		s := ""
		for i, p := range ps {
			if p.Index != i {
				t.Errorf("prompt %d has index %d", i, p.Index)
			}
			s += p.Question
		}
		return s
	}
	if got := load(analyze.OrderFile, 0); got != "abcd" {
		t.Errorf("file order: %s", got)
	}
	a, b := load(analyze.OrderSeeded, 0), load(analyze.OrderSeeded, 1)
	if a != load(analyze.OrderSeeded, 0) || len(a) != 4 {
		t.Errorf("seeded order not reproducible: %s", a)
	}
	if a == b {
		t.Errorf("seeds 0 and 1 give the same order %s", a)
	}
}
