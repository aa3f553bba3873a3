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
//     request with Prompt is tokenized as is, and PromptTokenIDs are taken
//     as they are (each checked against the vocabulary);
//     TruncatePromptTokens keeps the last k. RenderChat is the rendering,
//     so `evolm serve` and in-process callers send the engine the same text.
//     A response carries the prompt's ids and text (decoded when they were
//     not given as text).
//   - Seeds. Completion j of a request with Seed s draws from
//     sample.NewRNG(s + j) (model/generate), so one request of N samples
//     equals N requests of one sample seeded s … s+N−1, and a row's tokens do
//     not depend on the rest of the batch. An unseeded request gets a random
//     seed.
//   - Stop. Generation stops at the checkpoint's end tokens (config.json and
//     generation_config.json eos_token_id; not with IgnoreEOS), at
//     StopTokenIDs, at a stop string or at MaxTokens, never before
//     MinTokens. Text excludes the end token and is cut before a stop
//     string (IncludeStopStr keeps them); special tokens are skipped unless
//     KeepSpecialTokens.
//   - Sampling controls. Penalties, LogitBias (clamped to ±100),
//     AllowedTokenIDs, BadWords (each as vLLM encodes it: the word and,
//     when it starts another token, the word after a space) and MinP are
//     model/generate's logit processors.
//   - Output formats. A request with Format is decoded under a
//     model/constrain grammar over the checkpoint's vocabulary (special
//     tokens left out), compiled once per format and kept; a completion
//     that ends on an end token is checked by an independent JSON-schema
//     validator, and one that fails it fails the call (an engine bug). A
//     format whose shortest value needs more than MaxTokens, or with
//     MinTokens, is rejected.
//   - Streams and abort. Stream gets each completion's StreamDeltas from
//     the decode loop (model/generate), Done ends a request's rows.
//   - LoRA views. WithAdapter makes a view of a loaded model with a PEFT
//     adapter that shares its weights and holds only the adapter's
//     factors; a view's engine turns switch its adapter in (lora.Switch).
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
//   - Log-probs. Top log-probs (TopLogProbs > 0) and prompt log-probs
//     (PromptLogProbs) are the raw model's, computed in the decode loop and
//     in the prefill.
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
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/generate"
	_ "github.com/evolm/evolm/model/llama" // registers Qwen3, Qwen2 and Llama
	"github.com/evolm/evolm/model/lora"
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

// Model is a loaded checkpoint serving the backend interfaces: the base
// model, or a view of it with a LoRA adapter (WithAdapter). Close it.
type Model struct {
	*core
	// adapter is the view's adapter, switched into the model's slots at
	// each of its engine turns (activate); nil for the base model.
	adapter *lora.Adapter
	gen     *generate.Generator
	id      string
	// kept is the prefix cache Score keeps between calls (KeptPrefix),
	// and keptStamp the weights' stamp when it was kept; only a call
	// holding the engine touches them.
	kept      sharedPrefix
	keptStamp uint64
	closed    atomic.Bool
}

// core is what a checkpoint's views share: the weights, the tokenizer, the
// scheduler and engine thread that give them turns, and the switch that
// puts a view's adapter in the weights' slots.
type core struct {
	lm      model.CausalLM
	fixed   *lora.Adapter // attached for good (Options.Adapter); nil without one
	tok     *tokenizer.Tokenizer
	opt     Options
	stop    []int // end-of-generation token ids
	maxLen  int   // most tokens per sequence: MaxModelLen or the context length
	vocab   int   // the model's vocabulary size
	sched   *generate.Scheduler
	engine  *engineThread // Options.OneThread; nil without
	mu      sync.RWMutex  // read-held by calls, write-held by Close
	decoded sync.Map      // token id → decoded text, for log-prob tokens
	formats formats       // compiled response formats (format.go)
	sw      lora.Switch
	refs    atomic.Int32 // open views, the base model included
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
	c := &core{lm: lm, fixed: ad, tok: tok, opt: opt, stop: stop, maxLen: maxLen, vocab: cfg.VocabSize, sched: generate.NewScheduler(opt.MemoryBudget)}
	c.refs.Store(1)
	if opt.OneThread {
		c.engine = newEngineThread()
		c.sched.SetYield(c.engine.yield)
	}
	m := &Model{core: c, id: opt.ModelID}
	m.gen = m.generator()
	return m, nil
}

// gone reports whether the view or its weights are closed.
func (m *Model) gone() bool { return m.lm == nil || m.closed.Load() }

// generator is the view's generator: the core's scheduler, with the view's
// adapter switched in at each turn.
func (m *Model) generator() *generate.Generator {
	return generate.New(m.lm, m.tok, generate.Options{MaxBatch: m.opt.MaxBatch, PadID: max(m.tok.Specials().Pad, 0),
		PrefillChunk: m.opt.PrefillChunk, Scheduler: m.sched, OnTurn: m.activate})
}

// activate puts the view's adapter (none for the base model) in the
// weights' slots; every engine turn of the view begins with it.
func (m *Model) activate() error {
	if m.fixed != nil {
		return nil
	}
	return m.sw.Use(m.adapter)
}

// WithAdapter returns a view of m with the LoRA adapter of dir, reported
// as id: it shares m's weights, scheduler and engine thread and holds only
// the adapter's factors (vLLM's runtime LoRA), so that many adapters cost
// their factors alone. Its calls take turns with m's and the other views';
// each turn switches its adapter in. The view must be closed; m's weights
// are freed when m and every view of it are.
func (m *Model) WithAdapter(dir, id string) (*Model, error) {
	if m.fixed != nil {
		return nil, fmt.Errorf("torch backend: %s carries an adapter of its own (Options.Adapter): no other can share it", m.id)
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.lm == nil {
		return nil, fmt.Errorf("torch backend: %s is closed", m.id)
	}
	var ad *lora.Adapter
	// On a thread of its own, as model.Load: see torch.OnOwnThread.
	if err := torch.OnOwnThread(func() (err error) { ad, err = lora.LoadDetached(m.lm, dir); return err }); err != nil {
		return nil, fmt.Errorf("torch backend: %w", err)
	}
	v := &Model{core: m.core, adapter: ad, id: id}
	v.gen = v.generator()
	m.refs.Add(1)
	return v, nil
}

// Close frees the view (a view's adapter), and the weights once every view
// of them is closed: then a generation still running fails at its next
// turn. Closing twice is a no-op.
func (m *Model) Close() {
	if !m.closed.CompareAndSwap(false, true) {
		return
	}
	last := m.refs.Add(-1) == 0
	if last && m.engine != nil {
		m.engine.stop()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.kept.close()
	if m.adapter != nil {
		m.sw.Drop(m.adapter)
		m.adapter.Close()
		m.adapter = nil
	}
	if last && m.lm != nil {
		closeLM(m.lm, m.fixed)
		m.lm, m.fixed = nil, nil
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

var (
	_ backend.EachGenerator = (*Model)(nil)
	_ backend.Scorer        = (*Model)(nil)
	_ backend.LogProber     = (*Model)(nil)
)
