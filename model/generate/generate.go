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
//   - Stopping. A row stops at the first of: a stop token (kept as the last
//     token, excluded from Text; FinishStop), a stop string appearing in the
//     decoded completion (Text is cut before it, Tokens and LogProbs keep
//     every token up to the one that completed it; FinishStop), or
//     MaxNewTokens tokens (FinishLength). Stop strings are looked for in the
//     decoding of the row's last few tokens (enough for the longest stop
//     string's bytes), then located in the full decoding.
//   - Text is Decoder.Decode(tokens without a final stop token, skip
//     special tokens), as vLLM's skip_special_tokens=True.
//   - Log-probs are the raw model's log-softmax at each sampled token
//     (before temperature and filters), as vLLM and TRL report by default.
//   - Memory. Everything a call allocates is freed before it returns; caches
//     are sized to the chunk's longest prompt plus its largest MaxNewTokens.
//     Prompts are prefilled Options.PrefillChunk positions at a time (fewer
//     for long prompts, so that a chunk's scores stay within
//     PrefillScoreElems), so attention scores never take (prompt × prompt)
//     memory. A decode step allocates no vocabulary-sized tensor: it writes
//     its logits into, and samples in, two (rows, V) buffers the chunk keeps
//     from step to step (sample.Workspace; docs/engine-speed.md has the
//     profile that called for them).
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
	"slices"
	"strings"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/sample"
	"github.com/evolm/evolm/model/torch"
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
)

// Request asks for N samples continuing one prompt.
type Request struct {
	Prompt       []int         // prompt token ids, unpadded; at least one
	N            int           // samples; 0 means 1
	Sampling     sample.Params // temperature, top-k, top-p
	MaxNewTokens int           // most tokens per sample; > 0
	StopTokens   []int         // ids that end a sample (EOS, <|im_end|> …)
	StopStrings  []string      // strings that end a sample
	Seed         uint64        // sample j draws from sample.NewRNG(Seed + j)
}

func (r *Request) samples() int {
	if r.N <= 0 {
		return 1
	}
	return r.N
}

// Sample is one completion.
type Sample struct {
	Tokens       []int     // generated ids (a final stop token included)
	LogProbs     []float32 // raw-model log-prob of each of Tokens
	Text         string    // decoded completion, cut before a stop string
	FinishReason FinishReason
	StopString   string // the stop string that ended it, if any
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
// only when no request has stop strings and Text is not wanted: Text is
// then empty).
func New(m model.CausalLM, dec Decoder, opt Options) *Generator {
	if opt.MaxBatch <= 0 {
		opt.MaxBatch = 64
	}
	return &Generator{m: m, dec: dec, opt: opt}
}

func (g *Generator) validate(reqs []Request) error {
	vocab := g.m.Config().VocabSize
	for i := range reqs {
		r := &reqs[i]
		switch {
		case len(r.Prompt) == 0:
			return fmt.Errorf("generate: request %d: empty prompt", i)
		case r.N < 0:
			return fmt.Errorf("generate: request %d: n = %d < 0", i, r.N)
		case r.MaxNewTokens <= 0:
			return fmt.Errorf("generate: request %d: max new tokens = %d, want > 0", i, r.MaxNewTokens)
		case len(r.StopStrings) > 0 && g.dec == nil:
			return fmt.Errorf("generate: request %d: stop strings need a decoder", i)
		}
		if err := r.Sampling.Validate(); err != nil {
			return fmt.Errorf("generate: request %d: %w", i, err)
		}
		for _, id := range r.Prompt {
			if id < 0 || id >= vocab {
				return fmt.Errorf("generate: request %d: prompt token %d outside the vocabulary [0, %d)", i, id, vocab)
			}
		}
		for _, s := range r.StopStrings {
			if s == "" {
				return fmt.Errorf("generate: request %d: empty stop string", i)
			}
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

// row is one sample being decoded.
type row struct {
	req, idx int // request within the chunk, sample index
	rng      *sample.RNG
	tokens   []int
	lps      []float32
	pos      int64 // position of the next token
	done     bool
	out      Sample
}

func (g *Generator) chunk(ctx context.Context, reqs []Request, deliver func(int, []Sample)) error {
	// Engine work happens in turns (Options.Scheduler): take() ends the
	// current turn, if any, and waits for the next.
	var endTurn func()
	defer func() {
		if endTurn != nil {
			endTurn()
		}
	}()
	take := func() error {
		if endTurn != nil {
			endTurn()
			endTurn = nil
		}
		done, err := g.opt.Scheduler.Turn(ctx)
		if err != nil {
			return err
		}
		endTurn = done
		return nil
	}
	defer torch.SetGrad(false)()
	s := torch.NewScope()
	defer s.Close()
	dev := g.m.Device()

	P := int64(len(reqs))
	Tp, maxNew := 0, 0
	for i := range reqs {
		Tp = max(Tp, len(reqs[i].Prompt))
		maxNew = max(maxNew, reqs[i].MaxNewTokens)
	}
	ids := make([]int64, 0, P*int64(Tp))
	mask := make([]int64, 0, P*int64(Tp))
	pos := make([]int64, 0, P*int64(Tp))
	for i := range reqs {
		p := reqs[i].Prompt
		for j := 0; j < Tp-len(p); j++ {
			ids, mask, pos = append(ids, int64(g.opt.PadID)), append(mask, 0), append(pos, 0)
		}
		for j, id := range p {
			ids, mask, pos = append(ids, int64(id)), append(mask, 1), append(pos, int64(j))
		}
	}

	if err := take(); err != nil {
		return err
	}
	cache, err := model.NewCache(g.m, int(P), Tp+maxNew)
	if err != nil {
		return err
	}
	defer func() { cache.Close() }()

	// Prefill every prompt once, PrefillChunk positions per pass (one turn
	// each); logits only at the last position.
	var logits *torch.Tensor
	for off, C := 0, int(g.prefillChunkFor(P, int64(Tp))); off < Tp; off += C {
		if off > 0 {
			if err := take(); err != nil {
				return err
			}
		}
		n := min(C, Tp-off)
		cols := func(x []int64, upto int) []int64 { // columns [off, off+n) (or [0, upto)) of each prompt row
			out := make([]int64, 0, int(P)*n)
			for r := 0; r < int(P); r++ {
				if upto > 0 {
					out = append(out, x[r*Tp:r*Tp+upto]...)
				} else {
					out = append(out, x[r*Tp+off:r*Tp+off+n]...)
				}
			}
			return out
		}
		ps := s.Child()
		h, err := g.m.Hidden(ps, model.Batch{
			IDs:       ps.To(ps.FromInt64(cols(ids, 0), P, int64(n)), dev, torch.Int64),
			Positions: ps.To(ps.FromInt64(cols(pos, 0), P, int64(n)), dev, torch.Int64),
			Mask:      ps.To(ps.FromInt64(cols(mask, off+n), P, int64(off+n)), dev, torch.Int64),
			Cache:     cache,
		})
		if err == nil && off+n == Tp {
			logits, err = g.m.Logits(ps, ps.Narrow(h, 1, int64(n)-1, 1)) // (P, 1, V)
			logits = ps.MoveTo(s, logits)
		}
		ps.Close()
		if err != nil {
			return fmt.Errorf("prefill: %w", err)
		}
	}

	// Expand to one row per sample.
	var rows []*row
	var expand []int64
	for i := range reqs {
		for j := 0; j < reqs[i].samples(); j++ {
			rows = append(rows, &row{req: i, idx: j, rng: sample.NewRNG(reqs[i].Seed + uint64(j)), pos: int64(len(reqs[i].Prompt))})
			expand = append(expand, int64(i))
		}
	}
	// Each request is delivered once its last row is done (deliverDone,
	// between turns).
	left := make([]int, len(reqs))
	out := make([][]Sample, len(reqs))
	for i := range reqs {
		left[i] = reqs[i].samples()
		out[i] = make([]Sample, left[i])
	}
	var ready []int
	deliverDone := func() {
		if len(ready) == 0 {
			return
		}
		if endTurn != nil {
			endTurn()
			endTurn = nil
		}
		for _, i := range ready {
			deliver(i, out[i])
		}
		ready = ready[:0]
	}

	expanded, err := cache.Select(expand)
	if err != nil {
		return err
	}
	cache.Close()
	cache = expanded
	lsh, err := torch.Shape(logits)
	if err != nil {
		return err
	}
	V := lsh[2]
	prev := s.Child()
	next := prev.IndexSelect(prev.Reshape(logits, P, V), 0, prev.To(prev.FromInt64(expand, int64(len(expand))), dev, torch.Int64)) // (S, V)
	if err := prev.Err(); err != nil {
		prev.Close()
		return err
	}

	ws := &sample.Workspace{}
	defer ws.Close()
	active := rows
	for step := 0; ; step++ {
		if err := ctx.Err(); err != nil {
			prev.Close()
			return err
		}
		if step > 0 {
			if err := take(); err != nil {
				prev.Close()
				return err
			}
		}
		srows := make([]sample.Row, len(active))
		for i, r := range active {
			srows[i] = sample.Row{Params: reqs[r.req].Sampling, RNG: r.rng}
		}
		res, err := sample.SampleWith(prev, ws, next, srows)
		if err != nil {
			prev.Close()
			return fmt.Errorf("step %d: %w", step, err)
		}
		var keep []int64
		var still []*row
		for i, r := range active {
			r.tokens = append(r.tokens, int(res.Tokens[i]))
			r.lps = append(r.lps, res.LogProbs[i])
			r.pos++
			if err := g.finish(&reqs[r.req], r); err != nil {
				prev.Close()
				return err
			}
			if !r.done {
				keep = append(keep, int64(i))
				still = append(still, r)
				continue
			}
			out[r.req][r.idx] = r.out
			if left[r.req]--; left[r.req] == 0 {
				ready = append(ready, r.req)
			}
		}
		if len(still) == 0 {
			prev.Close()
			deliverDone()
			break
		}
		if len(still) < len(active) {
			compact, err := cache.Select(keep)
			if err != nil {
				prev.Close()
				return err
			}
			cache.Close()
			cache = compact
		}
		active = still
		if len(ready) > 0 { // answer the finished requests, then take the engine back
			deliverDone()
			if err := take(); err != nil {
				prev.Close()
				return err
			}
		}

		// Decode one token for every active row.
		cur := s.Child()
		A := int64(len(active))
		Tk := int64(cache.Len()) + 1
		stepIDs := make([]int64, A)
		stepPos := make([]int64, A)
		stepMask := make([]int64, 0, A*Tk)
		for i, r := range active {
			stepIDs[i] = int64(r.tokens[len(r.tokens)-1])
			stepPos[i] = r.pos - 1
			stepMask = append(stepMask, mask[r.req*Tp:(r.req+1)*Tp]...)
			for j := int64(Tp); j < Tk; j++ {
				stepMask = append(stepMask, 1)
			}
		}
		h, err := g.m.Hidden(cur, model.Batch{
			IDs:       cur.To(cur.FromInt64(stepIDs, A, 1), dev, torch.Int64),
			Positions: cur.To(cur.FromInt64(stepPos, A, 1), dev, torch.Int64),
			Mask:      cur.To(cur.FromInt64(stepMask, A, Tk), dev, torch.Int64),
			Cache:     cache,
		})
		if err == nil {
			next, err = g.logits(cur, ws, h, A, V, dev) // (A, V)
		}
		prev.Close()
		prev = cur
		if err != nil {
			prev.Close()
			return fmt.Errorf("step %d: %w", step, err)
		}
	}

	return nil
}

// logits projects a decode step's hidden states h (A, 1, C) onto the
// vocabulary: (A, V) float32, written into ws's logits buffer when the model
// can (model.LogitsWriter), which saves a fresh (A, V) tensor per step.
func (g *Generator) logits(s *torch.Scope, ws *sample.Workspace, h *torch.Tensor, A, V int64, dev torch.Device) (*torch.Tensor, error) {
	if w, ok := g.m.(model.LogitsWriter); ok {
		out, err := ws.Logits(s, A, V, dev)
		if err != nil {
			return nil, err
		}
		ok, err := w.WriteLogits(s, h, s.View(out, A, 1, V))
		if err != nil {
			return nil, err
		}
		if ok {
			return out, nil
		}
	}
	lg, err := g.m.Logits(s, h)
	if err != nil {
		return nil, err
	}
	next := s.Reshape(lg, A, V)
	return next, s.Err()
}

// finish decides whether r ended with its newest token and, if so, fills
// r.out.
func (g *Generator) finish(req *Request, r *row) error {
	last := r.tokens[len(r.tokens)-1]
	reason := FinishReason("")
	switch {
	case slices.Contains(req.StopTokens, last):
		reason = FinishStop
	case len(req.StopStrings) > 0:
		stop, text, err := g.stopString(req.StopStrings, r.tokens)
		if err != nil {
			return err
		}
		if stop != "" {
			r.done = true
			r.out = Sample{Tokens: r.tokens, LogProbs: r.lps, Text: text, FinishReason: FinishStop, StopString: stop}
			return nil
		}
	}
	if reason == "" && len(r.tokens) >= req.MaxNewTokens {
		reason = FinishLength
	}
	if reason == "" {
		return nil
	}
	r.done = true
	r.out = Sample{Tokens: r.tokens, LogProbs: r.lps, FinishReason: reason}
	if g.dec != nil {
		toks := r.tokens
		if reason == FinishStop {
			toks = toks[:len(toks)-1]
		}
		text, err := g.dec.Decode(toks, true)
		if err != nil {
			return fmt.Errorf("decode: %w", err)
		}
		r.out.Text = text
	}
	return nil
}

// stopString reports the stop string that the completion tokens now contain
// (the earliest in the text) and the text before it, or "" when none does.
func (g *Generator) stopString(stops []string, tokens []int) (stop, text string, err error) {
	longest := 0
	for _, s := range stops {
		longest = max(longest, len(s))
	}
	// Every token decodes to at least one byte (save skipped specials), so
	// the last longest+4 tokens cover any stop string the newest token ends.
	tail := tokens[max(0, len(tokens)-longest-4):]
	window, err := g.dec.Decode(tail, true)
	if err != nil {
		return "", "", fmt.Errorf("decode: %w", err)
	}
	found := false
	for _, s := range stops {
		if strings.Contains(window, s) {
			found = true
			break
		}
	}
	if !found {
		return "", "", nil
	}
	full, err := g.dec.Decode(tokens, true)
	if err != nil {
		return "", "", fmt.Errorf("decode: %w", err)
	}
	at := -1
	for _, s := range stops {
		if i := strings.Index(full, s); i >= 0 && (at < 0 || i < at) {
			at, stop = i, s
		}
	}
	if at < 0 {
		return "", "", nil
	}
	return stop, full[:at], nil
}
