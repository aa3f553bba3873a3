package generate

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/evolm/evolm/model/sample"
	"github.com/evolm/evolm/model/torch"
)

// row is one sample being decoded.
type row struct {
	req, idx int // request within the chunk, sample index
	rng      *sample.RNG
	tokens   []int
	lps      []float32
	top      [][]Alt
	pos      int64 // position of the next token
	done     bool
	out      Sample
	cons     Constraint  // Request.Constrain's; nil without
	counts   map[int]int // output token counts, for the penalties
	sent     int         // tokens streamed so far
	sentText int         // bytes of text streamed so far
}

// processed reports whether the request's rows go through logit processors.
func (q *Request) processed() bool {
	return q.Penalties.on() || len(q.LogitBias) > 0 || len(q.AllowedTokens) > 0 || len(q.BadWords) > 0 ||
		q.MinNewTokens > 0 || q.Constrain != nil
}

// adjust builds the logit processors of row rw's next token (nil: none).
func (r *run) adjust(rw *row) (*sample.Adjust, error) {
	return adjustFor(&r.reqs[rw.req], r.promptSet[rw.req], r.allowed[rw.req], int(r.V), rw.tokens, rw.counts, rw.cons)
}

// adjustFor builds the logit processors of the next token of a sample of q
// that has output tokens (counts: how often each occurs) so far; promptSet
// is q's prompt's distinct ids (sorted), allowed q's AllowedTokens as a
// mask (nil: none), vocab the vocabulary size.
func adjustFor(q *Request, promptSet []int, allowed []bool, vocab int, tokens []int, counts map[int]int, cons Constraint) (*sample.Adjust, error) {
	if !q.processed() {
		return nil, nil
	}
	a := &sample.Adjust{Allow: allowed}
	if cons != nil {
		allow := make([]bool, vocab)
		if cons.Allow(allow, q.MaxNewTokens-len(tokens)) {
			for _, id := range q.StopTokens {
				allow[id] = true
			}
		}
		if a.Allow != nil {
			for id, ok := range a.Allow {
				allow[id] = allow[id] && ok
			}
		}
		if !slices.Contains(allow, true) {
			return nil, fmt.Errorf("structured output: no token may come next after %d tokens", len(tokens))
		}
		a.Allow = allow
	}
	for _, w := range q.BadWords {
		if n := len(w) - 1; n <= len(tokens) && slices.Equal(tokens[len(tokens)-n:], w[:n]) {
			a.Ban = append(a.Ban, w[n])
		}
	}
	if len(tokens) < q.MinNewTokens {
		a.Ban = append(a.Ban, q.StopTokens...)
	}
	for id, v := range q.LogitBias {
		a.Bias = append(a.Bias, sample.TokenValue{ID: id, Value: float32(v)})
	}
	p := q.Penalties
	if p.Repetition != 0 && p.Repetition != 1 {
		a.Penalty = p.Repetition
		a.Penalized = promptSet
		if len(counts) > 0 {
			a.Penalized = slices.Clone(a.Penalized)
			for id := range counts {
				if _, in := slices.BinarySearch(promptSet, id); !in {
					a.Penalized = append(a.Penalized, id)
				}
			}
		}
	}
	if p.Frequency != 0 || p.Presence != 0 {
		for id, n := range counts {
			a.Subtract = append(a.Subtract, sample.TokenValue{ID: id, Value: -float32(p.Frequency*float64(n) + p.Presence)})
		}
	}
	return a, nil
}

// distinct returns the distinct ids, sorted.
func distinct(ids []int) []int {
	out := slices.Clone(ids)
	slices.Sort(out)
	return slices.Compact(out)
}

// finish takes row rw's newest token: it advances the row's constraint and
// counts, decides whether the row ended and, if so, fills rw.out; a row
// that goes on streams what it gained.
func (r *run) finish(rw *row) error {
	q := &r.reqs[rw.req]
	last := rw.tokens[len(rw.tokens)-1]
	isStop := slices.Contains(q.StopTokens, last)
	if q.Penalties.on() {
		if rw.counts == nil {
			rw.counts = map[int]int{}
		}
		rw.counts[last]++
	}
	if rw.cons != nil && !isStop {
		if err := rw.cons.Accept(last); err != nil {
			return fmt.Errorf("structured output: token %d: %w", last, err)
		}
	}
	reason, stopTok := FinishReason(""), -1
	switch {
	case isStop && len(rw.tokens) > q.MinNewTokens:
		reason, stopTok = FinishStop, last
	case len(q.StopStrings) > 0 && len(rw.tokens) > q.MinNewTokens:
		stop, text, err := r.stopString(q, rw.tokens)
		if err != nil {
			return err
		}
		if stop != "" {
			rw.end(Sample{Text: text, FinishReason: FinishStop, StopString: stop, StopToken: -1}, r.prompt[rw.req])
			return nil
		}
	}
	if reason == "" && len(rw.tokens) >= q.MaxNewTokens {
		reason = FinishLength
	}
	if reason == "" && q.Done != nil {
		select {
		case <-q.Done:
			reason = FinishAbort
		default:
		}
	}
	if reason == "" {
		return r.stream(rw)
	}
	out := Sample{FinishReason: reason, StopToken: stopTok}
	if r.g.dec != nil {
		toks := rw.tokens
		if stopTok >= 0 && !q.IncludeStop {
			toks = toks[:len(toks)-1]
		}
		text, err := r.g.dec.Decode(toks, !q.KeepSpecial)
		if err != nil {
			return fmt.Errorf("decode: %w", err)
		}
		out.Text = text
	}
	rw.end(out, r.prompt[rw.req])
	return nil
}

// end fills rw.out from out and the row's tokens.
func (rw *row) end(out Sample, prompt []PromptPos) {
	out.Tokens, out.LogProbs, out.Top, out.Prompt = rw.tokens, rw.lps, rw.top, prompt
	rw.out, rw.done = out, true
}

// stopString reports the stop string that the completion tokens now contain
// (the earliest in the text after the first MinNewTokens tokens' text) and
// the text before it (through it with IncludeStop), or "" when none does.
func (r *run) stopString(q *Request, tokens []int) (stop, text string, err error) {
	dec, skip := r.g.dec, !q.KeepSpecial
	longest := 0
	for _, s := range q.StopStrings {
		longest = max(longest, len(s))
	}
	// Every token decodes to at least one byte (save skipped specials), so
	// the last longest+4 tokens cover any stop string the newest token ends.
	tail := tokens[max(q.MinNewTokens, len(tokens)-longest-4):]
	window, err := dec.Decode(tail, skip)
	if err != nil {
		return "", "", fmt.Errorf("decode: %w", err)
	}
	found := false
	for _, s := range q.StopStrings {
		if strings.Contains(window, s) {
			found = true
			break
		}
	}
	if !found {
		return "", "", nil
	}
	full, err := dec.Decode(tokens, skip)
	if err != nil {
		return "", "", fmt.Errorf("decode: %w", err)
	}
	from := 0
	if q.MinNewTokens > 0 {
		head, err := dec.Decode(tokens[:q.MinNewTokens], skip)
		if err != nil {
			return "", "", fmt.Errorf("decode: %w", err)
		}
		from = len(strings.TrimRight(head, "\uFFFD"))
	}
	at := -1
	for _, s := range q.StopStrings {
		if i := strings.Index(full[from:], s); i >= 0 && (at < 0 || from+i < at) {
			at, stop = from+i, s
		}
	}
	if at < 0 {
		return "", "", nil
	}
	if q.IncludeStop {
		return stop, full[:at+len(stop)], nil
	}
	return stop, full[:at], nil
}

// stream hands a streamed request's row what it gained: its new tokens and
// the text no later token can change, which holds back a trailing
// incomplete character (decoded as U+FFFD) and, unless the stop strings
// are kept in the text, the longest end of the text that begins a stop
// string.
func (r *run) stream(rw *row) error {
	q := &r.reqs[rw.req]
	if q.Stream == nil {
		return nil
	}
	text, err := r.g.dec.Decode(rw.tokens, !q.KeepSpecial)
	if err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	safe := strings.TrimRight(text, "\uFFFD")
	if !q.IncludeStop {
		safe = safe[:len(safe)-heldBack(safe, q.StopStrings)]
	}
	d := Delta{Sample: rw.idx, Tokens: rw.tokens[rw.sent:], LogProbs: rw.lps[rw.sent:]}
	if rw.top != nil {
		d.Top = rw.top[rw.sent:]
	}
	if len(safe) > rw.sentText {
		d.Text = safe[rw.sentText:]
		rw.sentText = len(safe)
	}
	rw.sent = len(rw.tokens)
	q.Stream(d)
	return nil
}

// heldBack is the length of the longest end of text that is a proper
// prefix of a stop string, cut back to a character boundary.
func heldBack(text string, stops []string) int {
	n := 0
	for _, s := range stops {
		for k := min(len(s)-1, len(text)); k > n; k-- {
			if strings.HasSuffix(text, s[:k]) {
				n = k
				break
			}
		}
	}
	for n > 0 && n < len(text) && !utf8.RuneStart(text[len(text)-n]) {
		n++
	}
	return n
}

// promptBlock is the most prompt positions whose vocabulary-wide log-probs
// one pass holds per row (promptLogProbs).
const promptBlock = 64

// promptLogProbs fills the prompt log-probs that the hidden states h (P, n,
// C) of prefill columns [off, off+n) give: column c predicts the prompt
// token at column c+1. Positions are taken promptBlock at a time, so the
// pass holds (rows, promptBlock, V) log-probs at most.
func (r *run) promptLogProbs(s *torch.Scope, h *torch.Tensor, off, n int) error {
	var idx []int64
	kmax := 0
	for i := range r.reqs {
		if r.reqs[i].PromptLogProbs {
			idx = append(idx, int64(i))
			kmax = max(kmax, min(r.reqs[i].PromptTop, int(r.V)))
		}
	}
	if len(idx) == 0 {
		return nil
	}
	for b0 := 0; b0 < n; b0 += promptBlock {
		bn := min(promptBlock, n-b0)
		c := s.Child()
		err := r.promptBlock(c, h, idx, off+b0, b0, bn, kmax)
		c.Close()
		if err != nil {
			return fmt.Errorf("prompt log-probs: %w", err)
		}
	}
	return nil
}

// promptBlock is promptLogProbs for the bn columns from col (b0 within h).
func (r *run) promptBlock(c *torch.Scope, h *torch.Tensor, idx []int64, col, b0, bn, kmax int) error {
	G := int64(len(idx))
	tgt := make([]int64, 0, int(G)*bn)
	for _, i := range idx {
		for k := 0; k < bn; k++ {
			t := int64(0)
			if cc := col + k + 1; cc < r.Tp && r.mask[int(i)*r.Tp+cc-1] == 1 {
				t = r.ids[int(i)*r.Tp+cc]
			}
			tgt = append(tgt, t)
		}
	}
	hs := c.Narrow(c.IndexSelect(h, 0, c.To(c.FromInt64(idx, G), r.dev, torch.Int64)), 1, int64(b0), int64(bn)) // (G, bn, C)
	lg, err := r.g.m.Logits(c, hs)
	if err != nil {
		return err
	}
	lsm := c.LogSoftmax(lg, -1, torch.Float32)                                          // (G, bn, V)
	lp := c.Gather(lsm, 2, c.To(c.FromInt64(tgt, G, int64(bn), 1), r.dev, torch.Int64)) // (G, bn, 1)
	rank := c.SumDim(c.Float32(c.Track(lsm.GeTensor(lp, false))), []int64{2}, false)    // (G, bn)
	lpv, err := torch.Float32s(c.To(lp, torch.CPU, torch.Float32))
	if err != nil {
		return err
	}
	rkv, err := torch.Float32s(c.To(rank, torch.CPU, torch.Float32))
	if err != nil {
		return err
	}
	var tv []float32
	var ti []int64
	if kmax > 0 {
		vals, ids := c.Topk(lsm, int64(kmax), -1, true) // (G, bn, k)
		if tv, err = torch.Float32s(c.To(vals, torch.CPU, torch.Float32)); err != nil {
			return err
		}
		if ti, err = torch.Int64s(c.To(ids, torch.CPU, torch.Int64)); err != nil {
			return err
		}
	}
	for g, i := range idx {
		q := &r.reqs[i]
		pad := r.Tp - len(q.Prompt)
		for k := 0; k < bn; k++ {
			j := col + k - pad // prompt index of the column; it predicts token j+1
			if j < 0 || j+1 >= len(q.Prompt) {
				continue
			}
			x := g*bn + k
			pp := PromptPos{LogProb: lpv[x], Rank: int(rkv[x])}
			if math.IsNaN(float64(pp.LogProb)) {
				return fmt.Errorf("request %d prompt token %d: log-prob is NaN", i, j+1)
			}
			if kq := min(q.PromptTop, kmax); kq > 0 {
				pp.Top = make([]Alt, kq)
				for a := range pp.Top {
					pp.Top[a] = Alt{ID: int(ti[x*kmax+a]), LogProb: tv[x*kmax+a]}
				}
			}
			r.prompt[i][j] = pp
		}
	}
	return c.Err()
}
