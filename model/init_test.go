package model_test

import (
	"os"
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

// TestInitSmallTokenizer: a tokenizer other than Qwen3's (a few ids, its
// own end tokens) gets an embedding sized to it and its end tokens in
// config.json, and the checkpoint loads.
func TestInitSmallTokenizer(t *testing.T) {
	tokDir, dir := t.TempDir(), t.TempDir()
	tok := `{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2}, "merges": []},
	  "added_tokens": [{"id": 3, "content": "<|endoftext|>", "special": true}, {"id": 4, "content": "<|im_end|>", "special": true}]}`
	if err := os.WriteFile(filepath.Join(tokDir, "tokenizer.json"), []byte(tok), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := model.Init(model.InitOptions{Arch: "qwen3", Preset: "tiny", OutDir: dir, TokenizerDir: tokDir}); err != nil {
		t.Fatal(err)
	}
	cfg, err := model.ReadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.VocabSize != 128 || cfg.BOSTokenID == nil || *cfg.BOSTokenID != 3 || len(cfg.EOSTokenID) != 1 || cfg.EOSTokenID[0] != 4 {
		t.Errorf("vocab %d, bos %v, eos %v; want 128, 3, [4]", cfg.VocabSize, cfg.BOSTokenID, cfg.EOSTokenID)
	}
}
