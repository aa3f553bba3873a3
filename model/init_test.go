package model_test

import (
	"path/filepath"
	"runtime"
	"testing"

	"github.com/evolm/evolm/model"
	_ "github.com/evolm/evolm/model/llama"
	"github.com/evolm/evolm/model/modeltest"
	"github.com/evolm/evolm/model/torch"
)

// TestInitStreamsRandomize: the streamed checkpoint holds exactly the
// weights Randomize draws for the same seed (float32), and their bfloat16
// rounding with --dtype bfloat16.
func TestInitStreamsRandomize(t *testing.T) {
	base := torch.Live()
	want, err := model.PresetConfig("qwen3", "tiny", model.QwenVocabSize)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := model.Build(want, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := model.Randomize(ref, 5); err != nil {
		ref.Close()
		t.Fatal(err)
	}
	for _, dt := range []torch.DType{torch.Float32, torch.BFloat16} {
		dir := filepath.Join(t.TempDir(), torch.DTypeName(dt))
		if _, err := model.Init(model.InitOptions{Arch: "qwen3", Preset: "tiny", Seed: 5, OutDir: dir, DType: dt}); err != nil {
			t.Fatal(err)
		}
		got, err := model.Load(dir, model.LoadOptions{DType: dt})
		if err != nil {
			t.Fatal(err)
		}
		s := torch.NewScope()
		gp := got.Parameters()
		for i, p := range ref.Parameters() {
			w, err := torch.Float32s(s.ToDType(s.ToDType(p.Tensor, dt), torch.Float32))
			if err != nil {
				t.Fatal(err)
			}
			g, err := torch.Float32s(s.ToDType(gp[i].Tensor, torch.Float32))
			if err != nil {
				t.Fatal(err)
			}
			for j := range w {
				if w[j] != g[j] {
					t.Errorf("%s %s[%d] = %v, Randomize drew %v", torch.DTypeName(dt), p.Name, j, g[j], w[j])
					break
				}
			}
		}
		s.Close()
		got.Close()
	}
	ref.Close()
	modeltest.CheckLeaks(t, base)
}

// Init and Load run on a thread of their own (torch.OnOwnThread): the
// caller's thread never enters libtorch, so it starts no libgomp worker
// pool that would live on beside those of the goroutines that then run the
// model (docs/engine.md, "Threads and grad mode").
func TestInitAndLoadLeaveCallerThread(t *testing.T) {
	runtime.LockOSThread() // so that ThreadClaimed asks about this goroutine's thread
	defer runtime.UnlockOSThread()
	dir := t.TempDir()
	if _, err := model.Init(model.InitOptions{Arch: "qwen3", Preset: "tiny", Seed: 1, OutDir: dir}); err != nil {
		t.Fatal(err)
	}
	if torch.ThreadClaimed() {
		t.Fatal("model.Init used libtorch on the caller's thread")
	}
	m, err := model.Load(dir, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	claimed := torch.ThreadClaimed()
	m.Close() // Close frees tensors on the caller's thread, and claims it
	if claimed {
		t.Fatal("model.Load used libtorch on the caller's thread")
	}
}
