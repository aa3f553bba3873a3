package openai_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/serving/openai"
	"github.com/evolm/evolm/serving/roles"
	serve "github.com/evolm/evolm/serving/server"
)

// echoGenerator is the test double behind the servers: every completion is
// "<tag>" with token ids [11, 12] (ids -1 when noIDs: a server that cannot
// return them).
type echoGenerator struct {
	tag   string
	noIDs bool
}

func (g echoGenerator) Generate(_ context.Context, reqs []backend.GenerateRequest) ([]backend.GenerateResponse, error) {
	out := make([]backend.GenerateResponse, len(reqs))
	for i, r := range reqs {
		out[i] = backend.GenerateResponse{ID: r.ID, PromptTokens: 1}
		for s := range r.Samples() {
			c := backend.Completion{Index: s, Text: g.tag, Tokens: 2, FinishReason: backend.FinishStop}
			for _, id := range []int{11, 12} {
				if g.noIDs {
					id = -1
				}
				c.LogProbs = append(c.LogProbs, backend.TokenLogProb{Token: "t", TokenID: id, LogProb: -1})
			}
			out[i].Completions = append(out[i].Completions, c)
		}
	}
	return out, nil
}

// loaderDouble loads an echoGenerator tagged with the path, or fails.
type loaderDouble struct {
	fail  bool
	noIDs bool
}

func (l loaderDouble) load(path string) (*serve.Engine, error) {
	if l.fail {
		return nil, errors.New("disk full")
	}
	return &serve.Engine{Generator: echoGenerator{tag: filepath.Base(path), noIDs: l.noIDs}}, nil
}
func (l loaderDouble) LoadAdapter(_ context.Context, path string) (*serve.Engine, error) {
	return l.load(path)
}
func (l loaderDouble) LoadWeights(_ context.Context, path, _ string) (*serve.Engine, error) {
	return l.load(path)
}

func server(t *testing.T, l loaderDouble) string {
	t.Helper()
	// The fleets' directories are test temporaries: the load root is
	// their parent.
	h, err := serve.NewHandler(serve.Config{Generator: echoGenerator{tag: "base", noIDs: l.noIDs}, Model: "base", Loader: l,
		RuntimeLoRA: true, WeightUpdates: true, LoadRoot: os.TempDir(), MaxBatch: 1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL + "/v1"
}

// fleetDirs is each test fleet's weights directory.
var fleetDirs = map[*openai.Fleet]string{}

func newFleet(t *testing.T, mode roles.FleetMode, eps ...string) *openai.Fleet {
	t.Helper()
	dir := t.TempDir()
	f, err := openai.NewFleet(openai.FleetConfig{Endpoints: eps, Mode: mode, Dir: dir, Run: "run", Role: "policy", MaxAttempts: 3,
		Encode: func(s string) []int { return []int{21, 22} }, EndID: 99, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	fleetDirs[f] = dir
	return f
}

// saveDir is the trainer's Save as the fleet calls it: it writes a
// version's files into a new directory.
func saveDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "weights"), []byte("w"), 0o644)
}

func generate(t *testing.T, f *openai.Fleet, n int) []backend.GenerateResponse {
	t.Helper()
	reqs := make([]backend.GenerateRequest, n)
	for i := range reqs {
		reqs[i] = backend.GenerateRequest{ID: string(rune('a' + i)), Prompt: "p", Sampling: backend.Sampling{MaxTokens: 2}}
	}
	out, err := f.Generate(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestLoRASyncAndServerTokenIDs(t *testing.T) {
	f := newFleet(t, roles.FleetLoRA, server(t, loaderDouble{}), server(t, loaderDouble{fail: true}))
	if _, err := f.Generate(context.Background(), nil); err == nil {
		t.Error("Generate before any Sync succeeded")
	}
	ctx := context.Background()
	for step := range 2 {
		if err := f.Sync(ctx, step, saveDir); err != nil {
			t.Fatal(err)
		}
		if f.Model() != openai.VersionName("run", "policy", step) {
			t.Errorf("model %q", f.Model())
		}
		// The failing server is out of rotation: every answer comes from
		// the one that loaded the adapter, step-NNNNNN.
		for _, r := range generate(t, f, 4) {
			c := r.Completions[0]
			if r.Model != f.Model() || c.Text != filepath.Base(openai.VersionDir("", "policy", step)) || c.TokenSource != backend.TokensServer || !slices.Equal(c.TokenIDs, []int{11, 12}) {
				t.Errorf("step %d: %+v", step, r)
			}
		}
	}
	st := f.Stats()
	if st.Syncs != 2 || st.ServerIDs != 8 || st.Mismatches != 8 || st.Retokenized != 0 {
		t.Errorf("stats %+v: want 2 syncs, 8 completions with server ids, all 8 re-tokenizing differently", st)
	}
	// Only the current version's weights stay on disk.
	if _, err := os.Stat(openai.VersionDir(fleetDirs[f], "policy", 0)); !os.IsNotExist(err) {
		t.Errorf("step 0's weights are still on disk: %v", err)
	}
}

func TestRetokenizesWithoutServerIDs(t *testing.T) {
	f := newFleet(t, roles.FleetFull, server(t, loaderDouble{noIDs: true}))
	if err := f.Sync(context.Background(), 3, saveDir); err != nil {
		t.Fatal(err)
	}
	if want := openai.VersionDir(fleetDirs[f], "policy", 3); f.Model() != want {
		t.Errorf("full weights: model %q, want the directory %q", f.Model(), want)
	}
	c := generate(t, f, 1)[0].Completions[0]
	if c.TokenSource != backend.TokensRetokenized || !slices.Equal(c.TokenIDs, []int{21, 22, 99}) {
		t.Errorf("re-tokenized: %+v", c)
	}
}

func TestSyncFailsWhenNoServerLoads(t *testing.T) {
	a, b := server(t, loaderDouble{fail: true}), server(t, loaderDouble{fail: true})
	f := newFleet(t, roles.FleetLoRA, a, b)
	err := f.Sync(context.Background(), 0, saveDir)
	if err == nil || !strings.Contains(err.Error(), "no endpoint loaded version run-policy-step-000000") || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("error %v", err)
	}
	// A save that fails leaves no version directory behind.
	err = f.Sync(context.Background(), 1, func(dir string) error {
		_ = saveDir(dir)
		return errors.New("out of space")
	})
	if err == nil || !strings.Contains(err.Error(), "out of space") {
		t.Fatalf("error %v", err)
	}
	matches, _ := filepath.Glob(filepath.Join(fleetDirs[f], "policy", "step-000001*"))
	if len(matches) != 0 {
		t.Errorf("a failed save left %v", matches)
	}
}
