package torchbe

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/generate"
	"github.com/evolm/evolm/model/modeltest"
	"github.com/evolm/evolm/model/torch"
	"github.com/evolm/evolm/serving/backend"
)

// panickyLM is a test double around a real model: while armed, its n-th
// forward pass panics with a nil-pointer dereference, as gotch does when
// libtorch cannot allocate.
type panickyLM struct {
	model.CausalLM
	armed atomic.Bool
	calls atomic.Int64
	n     int64
}

func (p *panickyLM) Hidden(s *torch.Scope, b model.Batch) (*torch.Tensor, error) {
	if p.armed.Load() && p.calls.Add(1) == p.n {
		var t *torch.Tensor
		_ = *t // nil dereference
	}
	return p.CausalLM.Hidden(s, b)
}

func (p *panickyLM) Forward(s *torch.Scope, b model.Batch) (*torch.Tensor, error) {
	h, err := p.Hidden(s, b)
	if err != nil {
		return nil, err
	}
	return p.Logits(s, h)
}

// TestEnginePanicFailsOnlyThatCall: a panic in the middle of a generation
// (after prefill, mid-decode) or a score fails that call with
// backend.ErrUnavailable; every tensor is freed, the scheduler's turn is
// given back, and the next calls give the same answers as before.
func TestEnginePanicFailsOnlyThatCall(t *testing.T) {
	m := tiny(t)
	req := []backend.GenerateRequest{{ID: "a", Prompt: "Hello there", N: 2, Sampling: backend.Sampling{MaxTokens: 8, Temperature: 1, Seed: seed(3)}}}
	sreq := []backend.ScoreRequest{{ID: "s", Prefix: "Is it?", Suffixes: []string{" A", " B"}, Candidates: []string{" yes", " no"}}}
	ctx := context.Background()
	want, err := m.Generate(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	wantScore, err := m.Score(ctx, sreq)
	if err != nil {
		t.Fatal(err)
	}
	p := &panickyLM{CausalLM: m.lm, n: 3}
	m.lm = p
	m.gen = generate.New(p, m.tok, generate.Options{MaxBatch: m.opt.MaxBatch, Scheduler: m.sched})
	base := torch.Live()
	p.armed.Store(true)
	if _, err := m.Generate(ctx, req); !errors.Is(err, backend.ErrUnavailable) || !strings.Contains(err.Error(), "panic") {
		t.Errorf("generate with a panicking engine: %v, want backend.ErrUnavailable", err)
	}
	p.calls.Store(0)
	p.n = 1
	if _, err := m.Score(ctx, sreq); !errors.Is(err, backend.ErrUnavailable) {
		t.Errorf("score with a panicking engine: %v, want backend.ErrUnavailable", err)
	}
	p.armed.Store(false)
	if got := torch.Live(); got != base {
		t.Errorf("live tensors %d after the panics, want %d", got, base)
	}
	got, err := m.Generate(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("generate after the panic (-before +after):\n%s", diff)
	}
	gotScore, err := m.Score(ctx, sreq)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantScore, gotScore); diff != "" {
		t.Errorf("score after the panic (-before +after):\n%s", diff)
	}
}

// TestAdmission: prompt + max_tokens over MaxModelLen, or a request whose
// memory estimate alone is over MemoryBudget, fails its row as rejected
// (HTTP 400 in serve) before any engine work; the other rows are answered.
func TestAdmission(t *testing.T) {
	m := tiny(t)
	m.maxLen = 64
	ctx := context.Background()
	ok := backend.GenerateRequest{ID: "ok", Prompt: "Hello", Sampling: backend.Sampling{MaxTokens: 4}}
	long := backend.GenerateRequest{ID: "long", Prompt: "Hello", Sampling: backend.Sampling{MaxTokens: 100}}
	res, err := m.Generate(ctx, []backend.GenerateRequest{ok, long})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Failure != nil || res[1].Failure == nil || res[1].Failure.Reason != backend.FailureRejected ||
		!strings.Contains(res[1].Failure.Message, "maximum context length is 64 tokens") {
		t.Errorf("max model len: %+v", res)
	}
	est := m.gen.EstimateBytes([]generate.Request{{Prompt: make([]int, 2), N: 1, MaxNewTokens: 4}})
	m.sched = generate.NewScheduler(est * 4)
	m.gen = generate.New(m.lm, m.tok, generate.Options{MaxBatch: m.opt.MaxBatch, Scheduler: m.sched})
	big := backend.GenerateRequest{ID: "big", Prompt: "Hello", N: 16, Sampling: backend.Sampling{MaxTokens: 40}}
	res, err = m.Generate(ctx, []backend.GenerateRequest{ok, big})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Failure != nil || res[1].Failure == nil || res[1].Failure.Reason != backend.FailureRejected ||
		!strings.Contains(res[1].Failure.Message, "over the budget") {
		t.Errorf("memory budget: %+v", res)
	}
}

func TestLoadRejectsMaxModelLenOverContext(t *testing.T) {
	dir := t.TempDir()
	modeltest.InitTiny(t, dir, 7)
	if _, err := Load(Options{Dir: dir, MaxModelLen: 1 << 30}); err == nil || !strings.Contains(err.Error(), "max_position_embeddings") {
		t.Errorf("Load with max model len over the context: %v", err)
	}
}
