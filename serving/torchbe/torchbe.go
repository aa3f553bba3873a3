// Package torchbe is the `torch` backend: the in-process engine (model,
// model/generate) behind the backend interfaces Generator, Scorer and
// LogProber. The stages and `evolm serve` load a model through Load, the one
// helper that reads a checkpoint directory (config.json, safetensors,
// tokenizer.json), chooses device, dtype and libtorch's thread count, and
// renders chats with the Qwen3 template of model/chat.
//
// Contract, on top of package backend's:
//
//   - Prompts. A request with Messages is rendered with chat.Render
//     (AddGenerationPrompt; thinking as Options.DisableThinking says), a
//     request with Prompt is tokenized as is. RenderChat is that rendering,
//     so `evolm serve` and in-process callers send the engine the same text.
//   - Seeds. Completion j of a request with Seed s draws from
//     sample.NewRNG(s + j) (model/generate), so one request of N samples
//     equals N requests of one sample seeded s … s+N−1, and a row's tokens do
//     not depend on the rest of the batch. An unseeded request gets a random
//     seed.
//   - Stop. Generation stops at the checkpoint's end tokens (config.json and
//     generation_config.json eos_token_id), at a stop string or at MaxTokens.
//     Text excludes the end token and is cut before a stop string.
//   - Row failures. A prompt that does not fit the model's context
//     (prompt + MaxTokens > MaxModelLen), a chat that does not
//     render, or a Score candidate that is not exactly one token fails its
//     row with backend.FailureRejected; the rest of the call goes on.
//   - Score computes the longest token prefix that every Prefix+Suffix[k]
//     shares ONCE: one forward pass per request holds that prefix (the
//     trunk) and every suffix's tail after it, each tail a branch that
//     attends to the trunk and to itself only (model.Batch.Branches), at
//     the positions it has in its full prompt; the log-softmax is read at
//     each tail's final position. Tokenizing each full prompt (not prefix
//     and suffix apart) keeps the numbers those of a plain forward pass
//     over Prefix+Suffix[k]. The shared prefix has two parts: the tokens of
//     Prefix alone (when every full prompt starts with them), then the
//     rest the full prompts share (the judge prompt's "Criterion:"). The
//     first part depends on Prefix only, so a call keeps one KV cache of
//     Prefix tokens for its requests (PlanPrefixes): consecutive requests
//     with the same Prefix (one response under several rubrics, as the
//     judge stage orders them) share one prefill of it, and each runs its
//     packed pass after it; requests whose Prefixes begin alike for at
//     least MinPrefixReuse tokens (the judge prompt's preamble, a question
//     that several responses answer) take that beginning from the cache
//     and run the rest in their packed pass; a request that shares less
//     with both neighbours runs both parts in its packed pass. A request with
//     more than MaxBatch suffixes, or whose pass would attend more scores
//     than a chunk of generate.Prefill, has its shared tokens prefilled
//     into a cache first (chunked) and its tails packed after it.
//     Consecutive requests whose packed passes run after the same cached
//     tokens (the preamble, or none) and leave the cache as they found it
//     run as one batch of packed rows, one row each, right-padded, up to
//     PackTokens positions (scorePack): the policy phase's responses, each
//     to its own question, share one pass as a request's criteria do; a
//     request whose Prefix the next one shares beyond what the cache holds
//     has that part prefilled into the cache first, so that it packs with
//     them. ScoreNaive packs consecutive requests' full prompts by the same
//     rule. A call's cache of Prefix tokens outlives it, up to KeptPrefix
//     tokens, while the weights stay the same (fused.WeightsStamp): the next
//     call's requests take the judge prompt's preamble from it, as vLLM's
//     automatic prefix caching does across requests. The head runs once over
//     the final states of up to MaxBatch criteria, across requests: over
//     the whole vocabulary, or, when every request
//     asks for log-probs among its candidates (AmongCandidates, as the
//     judge stage does), over the candidates' rows of the weight alone
//     (model.TokenLogitser), normalized over the distinct candidates. A
//     request's log-probs are the same, up to float rounding, alone or in
//     any call: within 1e-6 when the call's requests ask alike, within
//     1e-5 when a request among the candidates shares its head with one
//     over the vocabulary (the full head, renormalized).
//   - Top log-probs (TopLogProbs > 0) come from one extra forward pass over
//     prompt+completion per sample, after sampling.
//   - Concurrency. Concurrent calls (the handlers of `evolm serve`) share
//     the engine in turns (generate.Scheduler): generations interleave decode
//     step by decode step, so a large request cannot starve a small one;
//     Score and LogProbs calls take one turn each. With Options.OneThread
//     every call runs on one engine goroutine, generations as its
//     coroutines, so that one OS thread keeps libgomp's worker pool
//     (engineThread).
//   - Admission. A request whose prompt + max_tokens exceeds MaxModelLen, or
//     whose estimated memory alone exceeds MemoryBudget, fails its row with
//     backend.FailureRejected before any engine work (HTTP 400 in serve).
//   - Failures of the engine. A libtorch allocation failure or a panic in
//     gotch fails the call with backend.ErrUnavailable (HTTP 503 in serve);
//     everything the call held is released and later calls run normally.
//   - Memory. Every tensor a call creates is freed before it returns
//     (torch.Live returns to its value before the call).
package torchbe

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/chat"
	"github.com/evolm/evolm/model/generate"
	_ "github.com/evolm/evolm/model/llama" // registers Qwen3, Qwen2 and Llama
	"github.com/evolm/evolm/model/lora"
	"github.com/evolm/evolm/model/sample"
	"github.com/evolm/evolm/model/tokenizer"
	"github.com/evolm/evolm/model/torch"
	"github.com/evolm/evolm/serving/backend"
)

// Options say which checkpoint to load and how to run it.
type Options struct {
	Dir     string // checkpoint directory: config.json, *.safetensors, tokenizer.json
	ModelID string // id reported in responses; default: the directory's base name
	Device  string // "cpu" (default), "cuda" or "cuda:N"
	DType   string // parameter dtype; "" picks float32 on CPU, bfloat16 on CUDA
	Threads int    // libtorch intra-op threads; 0 leaves libtorch's default
	// MaxBatch is the most sample rows decoded (or suffixes scored) together;
	// default 64.
	MaxBatch int
	// PackTokens is the most positions (rows × the longest, padding
	// included) of a scoring pass that packs consecutive requests' rows:
	// Score's packed rows, ScoreNaive's full prompts. Default 2048; a
	// negative value runs each request's rows in passes of their own.
	PackTokens int
	// DisableThinking renders chats with enable_thinking=False (an empty
	// <think></think> block in the generation prompt).
	DisableThinking bool
	// MaxModelLen caps prompt + max_tokens per request (vLLM's
	// --max-model-len); 0 means the checkpoint's max_position_embeddings,
	// and more than that is an error.
	MaxModelLen int
	// MemoryBudget is the most bytes that concurrent generations may hold
	// at once, by generate.Generator.EstimateBytes (KV caches, prefill
	// activations, logits); a request that alone needs more is rejected
	// before any work, others wait for room. 0: no budget.
	MemoryBudget int64
	// PrefillChunk is the most prompt positions per prefill pass (default
	// 512; see generate.Options).
	PrefillChunk int
	// Adapter, when set, is a LoRA adapter directory (PEFT's format, as
	// evolm's trainer and PEFT's save_pretrained write it) attached to the
	// loaded model: the model generates as base + adapter.
	Adapter string
	// OneThread runs every engine call, Generate and GenerateEach as well
	// as Score, ScoreNaive and LogProbs, on one goroutine of the model's,
	// whichever goroutines make them: for callers that are several at once,
	// such as a stage's shard workers or a server's connections, so that one
	// OS thread, not one per caller, keeps a libgomp worker pool (see
	// engineThread).
	OneThread bool
}

// Model is a loaded checkpoint serving the backend interfaces. Close it.
type Model struct {
	lm      model.CausalLM
	adapter *lora.Adapter // attached adapter (Options.Adapter); nil without one
	tok     *tokenizer.Tokenizer
	gen     *generate.Generator
	id      string
	opt     Options
	stop    []int // end-of-generation token ids
	maxLen  int   // most tokens per sequence: MaxModelLen or the context length
	sched   *generate.Scheduler
	engine  *engineThread // Options.OneThread; nil without
	mu      sync.RWMutex  // read-held by calls, write-held by Close
	decoded sync.Map      // token id → decoded text, for log-prob tokens
	// kept is the prefix cache Score keeps between calls (KeptPrefix),
	// and keptStamp the weights' stamp when it was kept; only a call
	// holding the engine touches them.
	kept      sharedPrefix
	keptStamp uint64
}

// Load reads a checkpoint directory and its tokenizer.
func Load(opt Options) (*Model, error) {
	if opt.Dir == "" {
		return nil, errors.New("torch backend: no checkpoint directory")
	}
	dev, err := torch.ParseDevice(opt.Device)
	if err != nil {
		return nil, fmt.Errorf("torch backend: %w", err)
	}
	var dt torch.DType
	if opt.DType != "" {
		if dt, err = torch.ParseDType(opt.DType); err != nil {
			return nil, fmt.Errorf("torch backend: %w", err)
		}
	}
	if opt.PackTokens == 0 {
		opt.PackTokens = DefaultPackTokens
	}
	if opt.MaxBatch <= 0 {
		opt.MaxBatch = 64
	}
	if opt.ModelID == "" {
		opt.ModelID = filepath.Base(filepath.Clean(opt.Dir))
	}
	torch.SetNumThreads(opt.Threads)
	tokPath := filepath.Join(opt.Dir, "tokenizer.json")
	if _, err := os.Stat(tokPath); err != nil {
		return nil, fmt.Errorf("torch backend: checkpoint %s: %w", opt.Dir, err)
	}
	tok, err := tokenizer.LoadFile(tokPath)
	if err != nil {
		return nil, fmt.Errorf("torch backend: %w", err)
	}
	lm, err := model.Load(opt.Dir, model.LoadOptions{Device: dev, DType: dt})
	if err != nil {
		return nil, fmt.Errorf("torch backend: %w", err)
	}
	var ad *lora.Adapter
	if opt.Adapter != "" {
		// On a thread of its own, as model.Load: see torch.OnOwnThread.
		if err = torch.OnOwnThread(func() (err error) { ad, err = lora.Load(lm, opt.Adapter); return err }); err != nil {
			lm.Close()
			return nil, fmt.Errorf("torch backend: %w", err)
		}
	}
	cfg := lm.Config()
	stop := append([]int(nil), cfg.EOSTokenID...)
	if gc, err := model.ReadGenerationConfig(opt.Dir); err == nil && gc != nil {
		stop = append(stop, gc.EOSTokenID...)
	}
	if sp := tok.Specials(); sp.IMEnd >= 0 {
		stop = append(stop, sp.IMEnd)
	}
	slices.Sort(stop)
	stop = slices.Compact(stop)
	maxLen := cfg.MaxPositionEmbeddings
	switch {
	case opt.MaxModelLen < 0 || opt.MemoryBudget < 0:
		closeLM(lm, ad)
		return nil, fmt.Errorf("torch backend: max model len %d and memory budget %d must not be negative", opt.MaxModelLen, opt.MemoryBudget)
	case opt.MaxModelLen > 0 && maxLen > 0 && opt.MaxModelLen > maxLen:
		closeLM(lm, ad)
		return nil, fmt.Errorf("torch backend: max model len %d exceeds the checkpoint's max_position_embeddings %d", opt.MaxModelLen, maxLen)
	case opt.MaxModelLen > 0:
		maxLen = opt.MaxModelLen
	}
	sched := generate.NewScheduler(opt.MemoryBudget)
	m := &Model{
		lm: lm, adapter: ad, tok: tok, id: opt.ModelID, opt: opt, stop: stop, maxLen: maxLen, sched: sched,
		gen: generate.New(lm, tok, generate.Options{MaxBatch: opt.MaxBatch, PadID: max(tok.Specials().Pad, 0),
			PrefillChunk: opt.PrefillChunk, Scheduler: sched}),
	}
	if opt.OneThread {
		m.engine = newEngineThread()
		sched.SetYield(m.engine.yield)
	}
	return m, nil
}

// Close frees the model's parameters.
func (m *Model) Close() {
	if m.engine != nil {
		m.engine.stop()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.kept.close()
	if m.lm != nil {
		closeLM(m.lm, m.adapter)
		m.lm, m.adapter = nil, nil
	}
}

// closeLM frees a model and its attached adapter (nil: none).
func closeLM(lm model.CausalLM, ad *lora.Adapter) {
	if ad != nil {
		ad.Close()
	}
	lm.Close()
}

// ID is the model id the backend reports.
func (m *Model) ID() string { return m.id }

// LM is the loaded model (for trainers and benchmarks that share it).
func (m *Model) LM() model.CausalLM { return m.lm }

// Tokenizer is the checkpoint's tokenizer.
func (m *Model) Tokenizer() *tokenizer.Tokenizer { return m.tok }

// RenderChat renders a conversation with the checkpoint's chat template,
// ending with the opening of the assistant turn.
func (m *Model) RenderChat(msgs []backend.Message) (string, error) {
	cm := make([]chat.Message, len(msgs))
	for i, msg := range msgs {
		cm[i] = chat.Message{Role: msg.Role, Content: msg.Content}
	}
	return chat.Render(cm, chat.Options{AddGenerationPrompt: true, DisableThinking: m.opt.DisableThinking})
}

// prompt returns the token ids of a request's prompt.
func (m *Model) prompt(r *backend.GenerateRequest) ([]int, error) {
	text := r.Prompt
	if len(r.Messages) > 0 {
		var err error
		if text, err = m.RenderChat(r.Messages); err != nil {
			return nil, err
		}
	}
	ids := m.tok.Encode(text)
	if len(ids) == 0 {
		return nil, errors.New("prompt encodes to no tokens")
	}
	if m.maxLen > 0 && len(ids)+r.MaxTokens > m.maxLen {
		// vLLM's wording, which clients match on.
		return nil, fmt.Errorf("This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
			m.maxLen, len(ids)+r.MaxTokens, len(ids), r.MaxTokens)
	}
	return ids, nil
}

func randomSeed() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])
}

func rejected(format string, args ...any) *backend.RowFailure {
	return &backend.RowFailure{Reason: backend.FailureRejected, Message: fmt.Sprintf(format, args...)}
}

// tokenText is the decoded text of one token, cached.
func (m *Model) tokenText(id int) string {
	if v, ok := m.decoded.Load(id); ok {
		return v.(string)
	}
	s, err := m.tok.Decode([]int{id}, false)
	if err != nil {
		s = ""
	}
	m.decoded.Store(id, s)
	return s
}

// Generate answers every request when all are done; see GenerateEach.
func (m *Model) Generate(ctx context.Context, reqs []backend.GenerateRequest) ([]backend.GenerateResponse, error) {
	out := make([]backend.GenerateResponse, len(reqs))
	if err := m.GenerateEach(ctx, reqs, func(i int, r backend.GenerateResponse) { out[i] = r }); err != nil {
		return nil, err
	}
	return out, nil
}

// GenerateEach implements backend.EachGenerator: a request is answered as
// soon as its samples are done (a rejected one at once), on the calling
// goroutine.
func (m *Model) GenerateEach(ctx context.Context, reqs []backend.GenerateRequest, deliver func(int, backend.GenerateResponse)) (err error) {
	defer recoverEngine("torch generate", &err)
	if err := backend.CheckRequests(reqs, func(r *backend.GenerateRequest) string { return r.ID }); err != nil {
		return fmt.Errorf("torch generate: %w", err)
	}
	var greqs []generate.Request
	var idx []int // greqs[k] answers reqs[idx[k]]
	var prompts []int
	for i := range reqs {
		r := &reqs[i]
		resp := backend.GenerateResponse{ID: r.ID, Model: m.id, PromptTokens: -1}
		ids, err := m.prompt(r)
		if err != nil {
			resp.Failure = rejected("request %s: %v", r.ID, err)
			deliver(i, resp)
			continue
		}
		resp.PromptTokens = len(ids)
		seed := randomSeed()
		if r.Seed != nil {
			seed = uint64(*r.Seed)
		}
		gr := generate.Request{
			Prompt: ids, N: r.Samples(), MaxNewTokens: r.MaxTokens, Seed: seed,
			Sampling:   sample.Params{Temperature: r.Temperature, TopK: r.TopK, TopP: r.TopP},
			StopTokens: m.stop, StopStrings: r.Stop,
		}
		if err := m.gen.Admit([]generate.Request{gr}); err != nil {
			resp.Failure = rejected("request %s: %v", r.ID, err)
			deliver(i, resp)
			continue
		}
		greqs = append(greqs, gr)
		idx = append(idx, i)
		prompts = append(prompts, len(ids))
	}
	if len(greqs) == 0 {
		return nil
	}
	return generateOnEngine(ctx, m, func(send func(int, backend.GenerateResponse)) error {
		return m.generate(ctx, reqs, greqs, idx, prompts, send)
	}, deliver)
}

// generate runs GenerateEach's admitted requests greqs, which answer
// reqs[idx[k]] (prompts[k] tokens long), on the engine.
func (m *Model) generate(ctx context.Context, reqs []backend.GenerateRequest, greqs []generate.Request, idx, prompts []int, deliver func(int, backend.GenerateResponse)) (err error) {
	defer recoverEngine("torch generate", &err)
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.lm == nil {
		return errors.New("torch generate: model is closed")
	}
	var failed error // the first request whose answer could not be built
	err = m.gen.GenerateEach(ctx, greqs, func(k int, samples []generate.Sample) {
		if failed != nil {
			return
		}
		r := &reqs[idx[k]]
		comps := make([]backend.Completion, len(samples))
		for j, smp := range samples {
			c := backend.Completion{
				Index: j, Text: smp.Text, TokenIDs: smp.Tokens, TokenSource: backend.TokensEngine, Tokens: len(smp.Tokens),
				FinishReason: backend.FinishReason(smp.FinishReason),
			}
			if r.LogProbs || r.TopLogProbs > 0 {
				c.LogProbs = make([]backend.TokenLogProb, len(smp.Tokens))
				for t, id := range smp.Tokens {
					c.LogProbs[t] = backend.TokenLogProb{Token: m.tokenText(id), TokenID: id, LogProb: float64(smp.LogProbs[t])}
				}
			}
			comps[j] = c
		}
		if r.TopLogProbs > 0 {
			if err := m.topLogProbs(ctx, greqs[k].Prompt, comps, r.TopLogProbs); err != nil {
				failed = fmt.Errorf("torch generate: request %s: top log-probs: %w", r.ID, err)
				return
			}
		}
		deliver(idx[k], backend.GenerateResponse{ID: r.ID, Model: m.id, PromptTokens: prompts[k], Completions: comps})
	})
	if err != nil {
		return fmt.Errorf("torch generate: %w", err)
	}
	return failed
}

// topLogProbs fills the k most likely alternatives at every sampled position
// of each completion, from a forward pass over prompt+completion.
func (m *Model) topLogProbs(ctx context.Context, prompt []int, comps []backend.Completion, k int) error {
	defer torch.SetGrad(false)()
	for ci := range comps {
		if err := ctx.Err(); err != nil {
			return err
		}
		c := &comps[ci]
		T := len(c.TokenIDs)
		if T == 0 {
			continue
		}
		done, err := m.sched.Turn(ctx)
		if err != nil {
			return err
		}
		err = m.topOne(prompt, c, k)
		done()
		if err != nil {
			return fmt.Errorf("completion %d: %w", ci, err)
		}
	}
	return nil
}

func (m *Model) topOne(prompt []int, c *backend.Completion, k int) error {
	s := torch.NewScope()
	defer s.Close()
	T := len(c.TokenIDs)
	all := make([]int64, 0, len(prompt)+T)
	for _, id := range prompt {
		all = append(all, int64(id))
	}
	for _, id := range c.TokenIDs {
		all = append(all, int64(id))
	}
	dev := m.lm.Device()
	h, err := m.lm.Hidden(s, model.Batch{IDs: s.To(s.FromInt64(all, 1, int64(len(all))), dev, torch.Int64)})
	if err != nil {
		return err
	}
	// Completion token t is predicted at position P+t−1.
	lg, err := m.lm.Logits(s, s.Narrow(h, 1, int64(len(prompt)-1), int64(T))) // (1, T, V)
	if err != nil {
		return err
	}
	V := int64(m.lm.Config().VocabSize)
	kk := min(int64(k), V)
	vals, ids := s.Topk(s.LogSoftmax(lg, -1, torch.Float32), kk, -1, true) // (1, T, k)
	vals, ids = s.To(vals, torch.CPU, torch.Float32), s.To(ids, torch.CPU, torch.Int64)
	if err := s.Err(); err != nil {
		return err
	}
	fv, err := torch.Float32s(vals)
	if err != nil {
		return err
	}
	iv, err := torch.Int64s(ids)
	if err != nil {
		return err
	}
	for t := 0; t < T; t++ {
		top := make([]backend.TopLogProb, kk)
		for j := range top {
			x := t*int(kk) + j
			top[j] = backend.TopLogProb{Token: m.tokenText(int(iv[x])), LogProb: float64(fv[x])}
		}
		c.LogProbs[t].Top = top
	}
	return nil
}

var (
	_ backend.EachGenerator = (*Model)(nil)
	_ backend.Scorer        = (*Model)(nil)
	_ backend.LogProber     = (*Model)(nil)
)
