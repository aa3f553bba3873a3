// Package generate runs a model.CausalLM: batched sampling with a KV cache,
// and per-token log-probs of given continuations (logprob.go).
//
// Generation contract:
//
//   - Batching. Requests are packed into chunks of at most Options.MaxBatch
//     sample rows (a request with more samples than that gets a chunk of its
//     own). A chunk left-pads its prompts (attention mask 0, positions
//     cumsum(mask)−1 as HF generate does), prefills each prompt ONCE, then
//     expands the KV cache so every sample of a prompt continues from that
//     one prefill (model.Cache.Select). Rows that finish are dropped from the
//     batch (the cache is compacted) so the rest decode without them.
//   - Seeds. Sample j of a request draws from sample.NewRNG(Seed + j), so a
//     request with N samples gives the same completions as N requests of one
//     sample with seeds Seed … Seed+N−1, and a row never depends on the rest
//     of the batch (package sample explains the one float-level caveat).
//   - Logit processors (rows.go), vLLM's, in its order, before temperature
//     and the filters of sample.Params: allowed tokens and a Constraint's
//     tokens, bad words, MinNewTokens' ban of the stop tokens, logit bias,
//     then the repetition penalty over the prompt's and the output's tokens
//     and the frequency and presence penalties over the output's (package
//     sample's Adjust).
//   - Stopping. A row stops at the first of: a stop token (kept as the last
//     token, excluded from Text unless IncludeStop; FinishStop), a stop
//     string appearing in the decoded completion (Text is cut before it, or
//     after it with IncludeStop; Tokens and LogProbs keep every token up to
//     the one that completed it; FinishStop), MaxNewTokens tokens
//     (FinishLength), or its request's Done channel closing (FinishAbort).
//     Before MinNewTokens tokens the stop tokens are banned and stop strings
//     are not looked for, and the text of the first MinNewTokens tokens is
//     never searched, as vLLM does. Stop strings are looked for in the
//     decoding of the row's last few tokens (enough for the longest stop
//     string's bytes), then located in the full decoding.
//   - Text is Decoder.Decode(tokens without a final stop token, skip
//     special tokens unless KeepSpecial), as vLLM's skip_special_tokens.
//   - Log-probs are the raw model's log-softmax at each sampled token
//     (before processors, temperature and filters), as vLLM and TRL report
//     by default; so are the TopLogProbs alternatives at each position and
//     the prompt's log-probs (PromptLogProbs), computed in the prefill.
//   - Streaming. A request with Stream gets a Delta after every decode step
//     that gave one of its samples new tokens: the tokens, and the text
//     that can no longer change (an incomplete UTF-8 character or the start
//     of a possible stop string is held back). The deltas' text, joined,
//     is a prefix of the sample's final Text; the rest comes with the
//     delivered Sample.
//   - Memory. Everything a call allocates is freed before it returns; caches
//     are sized to the chunk's longest prompt plus its largest MaxNewTokens.
//     Prompts are prefilled Options.PrefillChunk positions at a time (fewer
//     for long prompts, so that a chunk's scores stay within
//     PrefillScoreElems), so attention scores never take (prompt × prompt)
//     memory. A decode step allocates no vocabulary-sized tensor unless a
//     row asks for processors or alternatives: it writes its logits into,
//     and samples in, two (rows, V) buffers the chunk keeps from step to
//     step (sample.Workspace: fresh ones cost a third of a batched step in
//     page faults; docs/engine.md, "Sampling").
//   - Sharing. With Options.Scheduler, concurrent calls take turns per
//     prefill chunk and per decode step and stay within a memory budget
//     (see Scheduler); a row's tokens do not depend on the interleaving.
//   - Delivery. GenerateEach hands each request's samples over as soon as
//     its last row finishes, outside any scheduler turn, so a short request
//     decoded beside a long one is answered when it is done, not when the
//     whole chunk is (`evolm serve` answers its HTTP request then).
package generate

import (
	"context"
	"fmt"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/sample"
)

// Decoder turns token ids into text; *tokenizer.Tokenizer implements it.
type Decoder interface {
	Decode(ids []int, skipSpecial bool) (string, error)
}

// FinishReason says why a sample ended.
type FinishReason string

const (
	FinishStop   FinishReason = "stop"   // a stop token or stop string
	FinishLength FinishReason = "length" // MaxNewTokens reached
	FinishAbort  FinishReason = "abort"  // the request's Done channel closed
)

// Request asks for N samples continuing one prompt.
type Request struct {
	Prompt   []int         // prompt token ids, unpadded; at least one
	N        int           // samples; 0 means 1
	Sampling sample.Params // temperature, min-p, top-k, top-p
	// MaxNewTokens is the most tokens per sample: > 0, or 0 with
	// PromptLogProbs to score the prompt alone (the samples are then empty,
	// FinishLength).
	MaxNewTokens int
	// MinNewTokens: before this many tokens the stop tokens are banned and
	// stop strings do not end a sample (vLLM's min_tokens).
	MinNewTokens int
	StopTokens   []int    // ids that end a sample (EOS, <|im_end|>, stop_token_ids)
	StopStrings  []string // strings that end a sample
	// IncludeStop keeps in Text the stop string, or the stop token's text,
	// that ended a sample (vLLM's include_stop_str_in_output).
	IncludeStop bool
	// KeepSpecial keeps special tokens in Text (skip_special_tokens=false).
	KeepSpecial bool
	Seed        uint64 // sample j draws from sample.NewRNG(Seed + j)
	// Penalties, logit bias, allowed tokens and bad words: the logit
	// processors (rows.go; zero values are off).
	Penalties     Penalties
	LogitBias     map[int]float64 // added to the logits of these ids
	AllowedTokens []int           // when non-empty, every other id is banned
	// BadWords are token sequences: the last token of one is banned when
	// the output ends with the rest of it (a one-token word always is).
	BadWords [][]int
	// Constrain, when set, makes each sample's Constraint (structured
	// output); StopTokens must then be non-empty and MinNewTokens 0.
	Constrain func() Constraint
	// TopLogProbs asks, at every sampled position, for this many most
	// likely alternatives (Sample.Top).
	TopLogProbs int
	// PromptLogProbs asks for the log-prob of every prompt token after the
	// first, with its rank and the PromptTop most likely alternatives
	// (Sample.Prompt).
	PromptLogProbs bool
	PromptTop      int
	// Stream, when set, receives the request's Deltas (see the package
	// contract). It runs on the engine's goroutine, inside a scheduler turn:
	// it must not block.
	Stream func(Delta)
	// Done, when non-nil, ends the request's samples (FinishAbort) at the
	// next decode step once closed: a client that went away.
	Done <-chan struct{}
}

// Penalties are vLLM's sampling penalties.
type Penalties struct {
	// Repetition divides positive logits and multiplies negative ones of
	// every token in the prompt or the output so far; 0 or 1: off.
	Repetition float64
	// Frequency is subtracted from a token's logit once per time it occurs
	// in the output so far, Presence once if it occurs at all.
	Frequency, Presence float64
}

func (p Penalties) on() bool {
	return p.Repetition != 0 && p.Repetition != 1 || p.Frequency != 0 || p.Presence != 0
}

func (r *Request) samples() int {
	if r.N <= 0 {
		return 1
	}
	return r.N
}

// Alt is one alternative at a position: a token id and its raw log-prob.
type Alt struct {
	ID      int
	LogProb float32
}

// PromptPos is the log-prob of one prompt token given the tokens before it:
// its rank among the vocabulary (1: the most likely; ties count as better,
// as vLLM counts), and the most likely alternatives (Request.PromptTop).
type PromptPos struct {
	LogProb float32
	Rank    int
	Top     []Alt
}

// Sample is one completion.
type Sample struct {
	Tokens       []int     // generated ids (a final stop token included)
	LogProbs     []float32 // raw-model log-prob of each of Tokens
	Top          [][]Alt   // per token, the TopLogProbs most likely alternatives; nil unless asked
	Text         string    // decoded completion, cut before a stop string
	FinishReason FinishReason
	StopString   string // the stop string that ended it, if any
	StopToken    int    // the stop token that ended it; -1 if none
	// Prompt holds, for prompt tokens 1 … P−1, their log-probs
	// (Request.PromptLogProbs); nil unless asked. Every sample of a request
	// shares one slice.
	Prompt []PromptPos
}

// Delta is what a streamed request's sample gained in one decode step
// (Request.Stream).
type Delta struct {
	Sample   int       // the sample's index within its request
	Tokens   []int     // new tokens
	LogProbs []float32 // their raw log-probs
	Top      [][]Alt   // their alternatives (Request.TopLogProbs)
	Text     string    // new text that no later token can change; may lag Tokens
}

// Constraint restricts one sample's tokens (structured output).
type Constraint interface {
	// Allow sets allow[id] (all false on entry; one entry per vocabulary
	// id) for every token that may come next, when at most remaining
	// tokens, this one included, may follow. It reports whether the output
	// is complete already: the stop tokens may then come next as well.
	Allow(allow []bool, remaining int) (complete bool)
	// Accept advances the constraint past token id (never a stop token).
	Accept(id int) error
}

// Options tune a Generator.
type Options struct {
	// MaxBatch is the most sample rows decoded together (default 64).
	MaxBatch int
	// PadID fills left padding (default 0; masked, so any valid id works).
	PadID int
	// PrefillChunk is the most prompt positions per prefill forward pass
	// (default 512): a long prompt is prefilled in pieces against the KV
	// cache, so attention scores take (chunk × prompt), not (prompt ×
	// prompt), memory.
	PrefillChunk int
	// Scheduler, when set, interleaves concurrent calls step by step and
	// keeps chunks within its memory budget (see Scheduler). Nil runs each
	// call straight through.
	Scheduler *Scheduler
	// OnTurn, when set, runs at the start of each of the Generator's
	// engine turns, before any engine work: generators that share a model
	// (LoRA views of one base) put their adapter in place there.
	OnTurn func() error
}

func (g *Generator) prefillChunk() int {
	if g.opt.PrefillChunk <= 0 {
		return 512
	}
	return g.opt.PrefillChunk
}

// prefillChunkFor is the prefill chunk of P prompts of Tp tokens:
// Options.PrefillChunk, lowered as Prefill chunks (PrefillChunk) so that one
// chunk's attention scores against the whole prompt stay within
// PrefillScoreElems, but never below minPrefillChunk positions. A long
// prompt then costs its KV cache, not (chunk × prompt) scores.
func (g *Generator) prefillChunkFor(P, Tp int64) int64 {
	return min(int64(g.prefillChunk()), PrefillChunk(P, Tp, int64(g.m.Config().NumAttentionHeads)))
}

// Generator samples from a model. Concurrent calls are safe only with a
// Scheduler (Options.Scheduler), which gives them the engine in turns.
type Generator struct {
	m   model.CausalLM
	dec Decoder
	opt Options
}

// New returns a generator over m; dec decodes completions (it may be nil
// only when no request has stop strings or streams and Text is not wanted:
// Text is then empty).
func New(m model.CausalLM, dec Decoder, opt Options) *Generator {
	if opt.MaxBatch <= 0 {
		opt.MaxBatch = 64
	}
	return &Generator{m: m, dec: dec, opt: opt}
}

func (g *Generator) validate(reqs []Request) error {
	for i := range reqs {
		if err := g.validateOne(&reqs[i]); err != nil {
			return fmt.Errorf("generate: request %d: %w", i, err)
		}
	}
	return nil
}

func (g *Generator) validateOne(r *Request) error {
	vocab := g.m.Config().VocabSize
	switch {
	case len(r.Prompt) == 0:
		return fmt.Errorf("empty prompt")
	case r.N < 0:
		return fmt.Errorf("n = %d < 0", r.N)
	case r.MaxNewTokens < 0 || r.MaxNewTokens == 0 && !r.PromptLogProbs:
		return fmt.Errorf("max new tokens = %d, want > 0 (or 0 with prompt log-probs)", r.MaxNewTokens)
	case r.MinNewTokens < 0 || r.MinNewTokens > r.MaxNewTokens:
		return fmt.Errorf("min new tokens = %d, want in [0, %d]", r.MinNewTokens, r.MaxNewTokens)
	case (len(r.StopStrings) > 0 || r.Stream != nil) && g.dec == nil:
		return fmt.Errorf("stop strings and streams need a decoder")
	case r.TopLogProbs < 0 || r.PromptTop < 0:
		return fmt.Errorf("top log-probs %d and prompt top %d must not be negative", r.TopLogProbs, r.PromptTop)
	case r.Constrain != nil && (len(r.StopTokens) == 0 || r.MinNewTokens > 0):
		return fmt.Errorf("a constraint needs stop tokens and no min new tokens")
	}
	if err := r.Sampling.Validate(); err != nil {
		return err
	}
	inVocab := func(what string, ids []int) error {
		for _, id := range ids {
			if id < 0 || id >= vocab {
				return fmt.Errorf("%s token %d outside the vocabulary [0, %d)", what, id, vocab)
			}
		}
		return nil
	}
	if err := inVocab("prompt", r.Prompt); err != nil {
		return err
	}
	if err := inVocab("stop", r.StopTokens); err != nil {
		return err
	}
	if err := inVocab("allowed", r.AllowedTokens); err != nil {
		return err
	}
	for id := range r.LogitBias {
		if err := inVocab("logit bias", []int{id}); err != nil {
			return err
		}
	}
	for _, w := range r.BadWords {
		if len(w) == 0 {
			return fmt.Errorf("empty bad word")
		}
		if err := inVocab("bad word", w); err != nil {
			return err
		}
	}
	if p := r.Penalties; p.Repetition < 0 || p.Repetition != p.Repetition || p.Frequency != p.Frequency || p.Presence != p.Presence {
		return fmt.Errorf("penalties %+v: repetition must be ≥ 0 and none NaN", p)
	}
	for _, s := range r.StopStrings {
		if s == "" {
			return fmt.Errorf("empty stop string")
		}
	}
	return nil
}

// Generate answers every request: out[i] holds request i's samples in
// sample order. A returned error fails the whole call.
func (g *Generator) Generate(ctx context.Context, reqs []Request) ([][]Sample, error) {
	out := make([][]Sample, len(reqs))
	if err := g.GenerateEach(ctx, reqs, func(i int, s []Sample) { out[i] = s }); err != nil {
		return nil, err
	}
	return out, nil
}

// GenerateEach answers every request through deliver(i, samples), called
// once per request, in the order requests finish, as soon as the last of
// its samples ends and outside any scheduler turn (deliver may itself use
// the engine). deliver runs on the calling goroutine. A returned error ends
// the call: requests not yet delivered get no answer.
func (g *Generator) GenerateEach(ctx context.Context, reqs []Request, deliver func(i int, samples []Sample)) error {
	if err := g.validate(reqs); err != nil {
		return err
	}
	if err := g.Admit(reqs); err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	budget := g.opt.Scheduler.Budget()
	for start := 0; start < len(reqs); {
		end, rows := start, 0
		for end < len(reqs) && (end == start || rows+reqs[end].samples() <= g.opt.MaxBatch &&
			(budget == 0 || g.EstimateBytes(reqs[start:end+1]) <= budget)) {
			rows += reqs[end].samples()
			end++
		}
		off := start
		if err := g.reserveChunk(ctx, reqs[start:end], func(i int, s []Sample) { deliver(off+i, s) }); err != nil {
			return fmt.Errorf("generate: requests %d..%d: %w", start, end-1, err)
		}
		start = end
	}
	return nil
}

// reserveChunk runs a chunk within the scheduler's memory budget.
func (g *Generator) reserveChunk(ctx context.Context, reqs []Request, deliver func(int, []Sample)) error {
	release, err := g.opt.Scheduler.reserve(ctx, g.EstimateBytes(reqs))
	if err != nil {
		return fmt.Errorf("waiting for memory: %w", err)
	}
	defer release() // also when the engine panics
	return g.chunk(ctx, reqs, deliver)
}
