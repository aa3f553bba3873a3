package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/serving/openai"
	"github.com/evolm/evolm/serving/server"
)

// taggedGenerator is a test double: every completion's text is its tag, so
// a test sees which engine answered. gate, when set, holds each call until
// it is closed.
type taggedGenerator struct {
	tag     string
	gate    chan struct{}
	entered chan struct{} // gets a value when a call waits at gate
}

func (g *taggedGenerator) Generate(ctx context.Context, reqs []backend.GenerateRequest) ([]backend.GenerateResponse, error) {
	if g.gate != nil {
		g.entered <- struct{}{}
		<-g.gate
	}
	out := make([]backend.GenerateResponse, len(reqs))
	for i, r := range reqs {
		out[i] = backend.GenerateResponse{ID: r.ID, PromptTokens: 1}
		for s := range r.Samples() {
			out[i].Completions = append(out[i].Completions, backend.Completion{Index: s, Text: g.tag, Tokens: 1,
				FinishReason: backend.FinishStop, TokenIDs: []int{7},
				LogProbs: []backend.TokenLogProb{{Token: g.tag, TokenID: 7, LogProb: -0.25}}})
		}
	}
	return out, nil
}

// fakeLoader is the Loader test double: an engine per load, tagged with the
// path (relative to the load root), and a record of which engines were
// closed. hold, when set, keeps a load waiting until it is closed.
type fakeLoader struct {
	mu      sync.Mutex
	root    string
	closed  []string
	fail    map[string]error // tags whose load fails
	gate    chan struct{}    // handed to the engines it makes
	entered chan struct{}
	hold    chan struct{}
	loading chan struct{} // gets a value when a load waits at hold
}

func (l *fakeLoader) engine(ctx context.Context, tag string) (*server.Engine, error) {
	if l.hold != nil {
		l.loading <- struct{}{}
		<-l.hold
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.fail[tag]; err != nil {
		return nil, err
	}
	return &server.Engine{Generator: &taggedGenerator{tag: tag, gate: l.gate, entered: l.entered}, Close: func() {
		l.mu.Lock()
		l.closed = append(l.closed, tag)
		l.mu.Unlock()
	}}, nil
}

func (l *fakeLoader) rel(path string) string { return strings.TrimPrefix(path, l.root+"/") }

func (l *fakeLoader) LoadAdapter(ctx context.Context, path string) (*server.Engine, error) {
	return l.engine(ctx, "adapter:"+l.rel(path))
}
func (l *fakeLoader) LoadWeights(ctx context.Context, path, _ string) (*server.Engine, error) {
	return l.engine(ctx, "weights:"+l.rel(path))
}

func (l *fakeLoader) closedList() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.closed, ",")
}

type reply struct {
	status int
	body   string
}

func postJSON(t *testing.T, url string, body any) reply {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, string(data)}
}

// startUpdatable serves a handler whose runtime loads read from a fresh
// load root holding the directories dirs; it returns the server's root URL
// and sets l.root.
func startUpdatable(t *testing.T, l *fakeLoader, lora bool, dirs ...string) string {
	t.Helper()
	return startUpdatableWith(t, l, server.Config{RuntimeLoRA: lora}, dirs...)
}

func startUpdatableWith(t *testing.T, l *fakeLoader, cfg server.Config, dirs ...string) string {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	l.root = root
	cfg.Generator, cfg.Model, cfg.Root, cfg.Loader = &taggedGenerator{tag: "base"}, "base", "/models/base", l
	cfg.WeightUpdates, cfg.LoadRoot, cfg.MaxBatch, cfg.Logger = true, root, 1, slog.New(slog.DiscardHandler)
	h, err := server.NewHandler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSuffix(startHandler(t, h), "/v1")
}

func complete(t *testing.T, root, model string) (openai.CompletionResponse, reply) {
	t.Helper()
	one := 0
	r := postJSON(t, root+"/v1/completions", openai.CompletionRequest{Model: model, Prompt: openai.Prompt{Texts: []string{"p"}}, Logprobs: &one, SamplingParams: openai.SamplingParams{ReturnTokensAsTokenIDs: true}})
	var cr openai.CompletionResponse
	if r.status == http.StatusOK {
		if err := json.Unmarshal([]byte(r.body), &cr); err != nil {
			t.Fatal(err)
		}
	}
	return cr, r
}

func TestRuntimeLoRAAdapters(t *testing.T) {
	l := &fakeLoader{}
	root := startUpdatable(t, l, true, "sync/v1", "sync/v1b", "missing")
	load := func(name, path string, inplace bool) reply {
		return postJSON(t, root+"/v1/load_lora_adapter", openai.LoadLoRAAdapterRequest{LoraName: name, LoraPath: path, LoadInplace: inplace})
	}
	if r := load("v1", "sync/v1", false); r.status != 200 || r.body != "Success: LoRA adapter 'v1' added successfully." {
		t.Fatalf("load: %+v", r)
	}
	cr, r := complete(t, root, "v1")
	if r.status != 200 || cr.Model != "v1" || cr.Choices[0].Text != "adapter:sync/v1" {
		t.Fatalf("request to the adapter: %+v %+v", r, cr)
	}
	if got := cr.Choices[0].Logprobs.Tokens; len(got) != 1 || got[0] != "token_id:7" {
		t.Errorf("return_tokens_as_token_ids: tokens %q, want [token_id:7]", got)
	}
	if cr, _ := complete(t, root, "base"); cr.Choices[0].Text != "base" {
		t.Errorf("the base model answers %q", cr.Choices[0].Text)
	}
	var list openai.ModelList
	resp, err := http.Get(root + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	_ = json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if len(list.Data) != 2 || list.Data[1].ID != "v1" || list.Data[1].Root != l.root+"/sync/v1" || list.Data[1].Parent == nil || *list.Data[1].Parent != "base" || list.Data[0].Root != "/models/base" {
		t.Errorf("models: %+v", list.Data)
	}
	if r := load("v1", "sync/v1b", false); r.status != 400 || !strings.Contains(r.body, "has already been loaded") {
		t.Errorf("second load of a name: %+v", r)
	}
	if r := load("v1", l.root+"/sync/v1b", true); r.status != 200 {
		t.Errorf("load_inplace: %+v", r)
	}
	if cr, _ := complete(t, root, "v1"); cr.Choices[0].Text != "adapter:sync/v1b" {
		t.Errorf("after load_inplace the adapter answers %q", cr.Choices[0].Text)
	}
	if got := l.closedList(); got != "adapter:sync/v1" {
		t.Errorf("replaced adapter freed: %q", got)
	}
	l.fail = map[string]error{"adapter:missing": errors.New("no such checkpoint")}
	if r := load("v2", "missing", false); r.status != 400 || !strings.Contains(r.body, "no such checkpoint") {
		t.Errorf("a load that fails: %+v", r)
	}
	if _, r := complete(t, root, "v2"); r.status != 404 {
		t.Errorf("a failed adapter is served: %+v", r)
	}
	if r := postJSON(t, root+"/v1/unload_lora_adapter", openai.UnloadLoRAAdapterRequest{LoraName: "v1"}); r.status != 200 || r.body != "Success: LoRA adapter 'v1' removed successfully." {
		t.Errorf("unload: %+v", r)
	}
	if r := postJSON(t, root+"/v1/unload_lora_adapter", openai.UnloadLoRAAdapterRequest{LoraName: "v1"}); r.status != 404 || !strings.Contains(r.body, "cannot be found") {
		t.Errorf("second unload: %+v", r)
	}
	if _, r := complete(t, root, "v1"); r.status != 404 || !strings.Contains(r.body, "does not exist") {
		t.Errorf("request to an unloaded adapter: %+v", r)
	}
}

func TestUpdateWeightsFromDisk(t *testing.T) {
	l := &fakeLoader{fail: map[string]error{"weights:bad": errors.New("no such checkpoint")}}
	root := startUpdatable(t, l, false, "ckpt/1", "ckpt/2", "bad")
	if r := postJSON(t, root+"/v1/load_lora_adapter", openai.LoadLoRAAdapterRequest{LoraName: "x", LoraPath: "/x"}); r.status != 404 {
		t.Errorf("LoRA routes without RuntimeLoRA: %+v", r)
	}
	if cr, _ := complete(t, root, "base"); cr.Metadata == nil || cr.Metadata.WeightVersion != "default" {
		t.Errorf("weight_version before any update: %+v", cr.Metadata)
	}
	v := "run-a/step-1"
	r := postJSON(t, root+"/update_weights_from_disk", openai.UpdateWeightsFromDiskRequest{ModelPath: "ckpt/1", WeightVersion: &v})
	var ans openai.UpdateWeightsFromDiskResponse
	_ = json.Unmarshal([]byte(r.body), &ans)
	if r.status != 200 || !ans.Success || ans.Message != "Succeeded to update model weights. Weight version updated to run-a/step-1." {
		t.Fatalf("update: %+v", r)
	}
	cr, r := complete(t, root, "ckpt/1")
	if r.status != 200 || cr.Model != "ckpt/1" || cr.Choices[0].Text != "weights:ckpt/1" || cr.Metadata.WeightVersion != v {
		t.Fatalf("after the update: %+v %+v", r, cr)
	}
	if _, r := complete(t, root, "base"); r.status != 404 {
		t.Errorf("the replaced model's name still answers: %+v", r)
	}
	if got := l.closedList(); got != "" {
		t.Errorf("freed: %q (the initial model has no Close)", got)
	}
	r = postJSON(t, root+"/update_weights_from_disk", openai.UpdateWeightsFromDiskRequest{ModelPath: "bad"})
	_ = json.Unmarshal([]byte(r.body), &ans)
	if r.status != 400 || ans.Success || !strings.Contains(ans.Message, "no such checkpoint") {
		t.Errorf("failed update: %+v", r)
	}
	if cr, _ := complete(t, root, ""); cr.Choices[0].Text != "weights:ckpt/1" {
		t.Errorf("a failed update changed the weights: %+v", cr)
	}
	if r := postJSON(t, root+"/update_weights_from_disk", openai.UpdateWeightsFromDiskRequest{ModelPath: "ckpt/2"}); r.status != 200 {
		t.Fatal(r)
	}
	if got := l.closedList(); got != "weights:ckpt/1" {
		t.Errorf("freed: %q", got)
	}
}

// TestReplacedModelFinishesItsRequests: a request in flight on a model that
// an update replaces finishes on it, and the model is freed after it.
func TestReplacedModelFinishesItsRequests(t *testing.T) {
	l := &fakeLoader{gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	root := startUpdatable(t, l, true, "a")
	if r := postJSON(t, root+"/v1/load_lora_adapter", openai.LoadLoRAAdapterRequest{LoraName: "v1", LoraPath: "a"}); r.status != 200 {
		t.Fatal(r)
	}
	var done atomic.Value
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		cr, r := complete(t, root, "v1")
		done.Store(r.status == 200 && cr.Choices[0].Text == "adapter:a")
	}()
	<-l.entered
	// The unload cannot free the adapter while the request holds it.
	if r := postJSON(t, root+"/v1/unload_lora_adapter", openai.UnloadLoRAAdapterRequest{LoraName: "v1"}); r.status != 200 {
		t.Fatal(r)
	}
	if got := l.closedList(); got != "" {
		t.Errorf("freed while in use: %q", got)
	}
	close(l.gate)
	<-finished
	if ok, _ := done.Load().(bool); !ok {
		t.Error("the request in flight did not finish on its adapter")
	}
	if got := l.closedList(); got != "adapter:a" {
		t.Errorf("freed after its request: %q", got)
	}
}
