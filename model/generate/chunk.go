package generate

import (
	"context"
	"fmt"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/sample"
	"github.com/evolm/evolm/model/torch"
)

// run is one chunk being generated: its requests, their padded prompts, the
// KV cache and the rows. Every tensor it makes lives in s or in a child of
// s (one per prefill piece and per decode step), so an error anywhere just
// returns: chunk's deferred closes free what is left.
type run struct {
	g       *Generator
	ctx     context.Context
	reqs    []Request
	deliver func(int, []Sample)
	s       *torch.Scope
	dev     torch.Device
	cache   *model.Cache
	ws      *sample.Workspace
	endTurn func() // ends the scheduler turn held, if any

	Tp, maxNew      int
	V               int64
	ids, mask, pos  []int64       // (P, Tp) left-padded prompts
	prompt          [][]PromptPos // per request (Request.PromptLogProbs)
	promptSet       [][]int       // per request: its prompt's distinct ids (repetition penalty)
	allowed         [][]bool      // per request: Request.AllowedTokens as a mask
	out             [][]Sample
	left            []int // per request: samples not yet done
	ready           []int // requests whose samples are all done, to deliver
	anyTop, anyProc bool
}

func (g *Generator) chunk(ctx context.Context, reqs []Request, deliver func(int, []Sample)) error {
	r := &run{g: g, ctx: ctx, reqs: reqs, deliver: deliver, dev: g.m.Device(), V: int64(g.m.Config().VocabSize)}
	defer r.endTurnNow()
	defer torch.SetGrad(false)()
	r.s = torch.NewScope()
	defer r.s.Close()
	defer func() {
		if r.cache != nil {
			r.cache.Close()
		}
	}()
	r.ws = &sample.Workspace{}
	defer r.ws.Close()

	r.pad()
	if err := r.take(); err != nil {
		return err
	}
	var err error
	if r.cache, err = model.NewCache(g.m, len(reqs), r.Tp+r.maxNew); err != nil {
		return err
	}
	logits, err := r.prefill()
	if err != nil {
		return err
	}
	// Requests that score their prompt alone are done.
	for i := range reqs {
		if reqs[i].MaxNewTokens == 0 {
			for j := range r.out[i] {
				r.out[i][j] = Sample{FinishReason: FinishLength, StopToken: -1, Prompt: r.prompt[i], Tokens: []int{}, LogProbs: []float32{}}
			}
			r.left[i] = 0
			r.ready = append(r.ready, i)
		}
	}
	if r.maxNew == 0 {
		r.deliverReady()
		return nil
	}
	rows, next, prev, err := r.expand(logits)
	if err != nil {
		return err
	}
	return r.decode(rows, next, prev)
}

// take ends the current scheduler turn, if any, and waits for the next.
func (r *run) take() error {
	r.endTurnNow()
	done, err := r.g.opt.Scheduler.Turn(r.ctx)
	if err != nil {
		return err
	}
	r.endTurn = done
	if f := r.g.opt.OnTurn; f != nil {
		return f()
	}
	return nil
}

func (r *run) endTurnNow() {
	if r.endTurn != nil {
		r.endTurn()
		r.endTurn = nil
	}
}

// pad lays the prompts out left-padded and sets up the per-request state.
func (r *run) pad() {
	P := len(r.reqs)
	for i := range r.reqs {
		q := &r.reqs[i]
		r.Tp = max(r.Tp, len(q.Prompt))
		r.maxNew = max(r.maxNew, q.MaxNewTokens)
		r.anyTop = r.anyTop || q.TopLogProbs > 0
		r.anyProc = r.anyProc || q.processed()
	}
	r.ids = make([]int64, 0, P*r.Tp)
	r.mask = make([]int64, 0, P*r.Tp)
	r.pos = make([]int64, 0, P*r.Tp)
	r.prompt = make([][]PromptPos, P)
	r.promptSet = make([][]int, P)
	r.allowed = make([][]bool, P)
	r.out = make([][]Sample, P)
	r.left = make([]int, P)
	for i := range r.reqs {
		q := &r.reqs[i]
		p := q.Prompt
		for j := 0; j < r.Tp-len(p); j++ {
			r.ids, r.mask, r.pos = append(r.ids, int64(r.g.opt.PadID)), append(r.mask, 0), append(r.pos, 0)
		}
		for j, id := range p {
			r.ids, r.mask, r.pos = append(r.ids, int64(id)), append(r.mask, 1), append(r.pos, int64(j))
		}
		if q.PromptLogProbs {
			r.prompt[i] = make([]PromptPos, len(p)-1)
		}
		if q.Penalties.Repetition != 0 && q.Penalties.Repetition != 1 {
			r.promptSet[i] = distinct(p)
		}
		if len(q.AllowedTokens) > 0 {
			r.allowed[i] = make([]bool, r.V)
			for _, id := range q.AllowedTokens {
				r.allowed[i][id] = true
			}
		}
		r.left[i] = q.samples()
		r.out[i] = make([]Sample, r.left[i])
	}
}

// prefill runs every prompt once, PrefillChunk positions per pass (one turn
// each), and returns the logits (P, 1, V) at the last position, owned by
// r.s; the prompt log-probs are filled on the way.
func (r *run) prefill() (*torch.Tensor, error) {
	P, Tp := int64(len(r.reqs)), r.Tp
	var logits *torch.Tensor
	for off, C := 0, int(r.g.prefillChunkFor(P, int64(Tp))); off < Tp; off += C {
		if off > 0 {
			if err := r.take(); err != nil {
				return nil, err
			}
		}
		n := min(C, Tp-off)
		cols := func(x []int64, from, to int) []int64 { // columns [from, to) of each prompt row
			out := make([]int64, 0, int(P)*(to-from))
			for i := 0; i < int(P); i++ {
				out = append(out, x[i*Tp+from:i*Tp+to]...)
			}
			return out
		}
		ps := r.s.Child()
		h, err := r.g.m.Hidden(ps, model.Batch{
			IDs:       ps.To(ps.FromInt64(cols(r.ids, off, off+n), P, int64(n)), r.dev, torch.Int64),
			Positions: ps.To(ps.FromInt64(cols(r.pos, off, off+n), P, int64(n)), r.dev, torch.Int64),
			Mask:      ps.To(ps.FromInt64(cols(r.mask, 0, off+n), P, int64(off+n)), r.dev, torch.Int64),
			Cache:     r.cache,
		})
		if err == nil {
			err = r.promptLogProbs(ps, h, off, n)
		}
		if err == nil && off+n == Tp {
			logits, err = r.g.m.Logits(ps, ps.Narrow(h, 1, int64(n)-1, 1)) // (P, 1, V)
			logits = ps.MoveTo(r.s, logits)
		}
		ps.Close()
		if err != nil {
			return nil, fmt.Errorf("prefill: %w", err)
		}
	}
	return logits, nil
}

// expand makes one row per sample, the cache one row per sample, and the
// first step's logits (S, V), owned by the returned child of r.s.
func (r *run) expand(logits *torch.Tensor) ([]*row, *torch.Tensor, *torch.Scope, error) {
	var rows []*row
	var expand []int64
	for i := range r.reqs {
		q := &r.reqs[i]
		if q.MaxNewTokens == 0 {
			continue
		}
		for j := 0; j < q.samples(); j++ {
			rw := &row{req: i, idx: j, rng: sample.NewRNG(q.Seed + uint64(j)), pos: int64(len(q.Prompt))}
			if q.Constrain != nil {
				rw.cons = q.Constrain()
			}
			rows = append(rows, rw)
			expand = append(expand, int64(i))
		}
	}
	expanded, err := r.cache.Select(expand)
	if err != nil {
		return nil, nil, nil, err
	}
	r.cache.Close()
	r.cache = expanded
	P := int64(len(r.reqs))
	prev := r.s.Child()
	next := prev.IndexSelect(prev.Reshape(logits, P, r.V), 0, prev.To(prev.FromInt64(expand, int64(len(expand))), r.dev, torch.Int64)) // (S, V)
	return rows, next, prev, prev.Err()
}

// decode samples a token for every active row, retires the rows that
// finished, and runs the model one position further for the rest, until
// every row is done. next (A, V) are the logits of the active rows, owned
// by prev, a child of r.s.
func (r *run) decode(active []*row, next *torch.Tensor, prev *torch.Scope) error {
	for step := 0; ; step++ {
		if err := r.ctx.Err(); err != nil {
			return err
		}
		if step > 0 {
			if err := r.take(); err != nil {
				return err
			}
		}
		if err := r.sampleStep(prev, active, next); err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
		var keep []int64
		var still []*row
		for i, rw := range active {
			if err := r.finish(rw); err != nil {
				return err
			}
			if !rw.done {
				keep = append(keep, int64(i))
				still = append(still, rw)
				continue
			}
			r.out[rw.req][rw.idx] = rw.out
			if r.left[rw.req]--; r.left[rw.req] == 0 {
				r.ready = append(r.ready, rw.req)
			}
		}
		if len(still) == 0 {
			prev.Close()
			r.deliverReady()
			return nil
		}
		if len(still) < len(active) {
			compact, err := r.cache.Select(keep)
			if err != nil {
				return err
			}
			r.cache.Close()
			r.cache = compact
		}
		active = still
		if len(r.ready) > 0 { // answer the finished requests, then take the engine back
			r.deliverReady()
			if err := r.take(); err != nil {
				return err
			}
		}
		cur := r.s.Child()
		var err error
		next, err = r.forward(cur, active)
		prev.Close()
		prev = cur
		if err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
	}
}

// deliverReady answers the requests whose samples are all done, outside
// the scheduler turn.
func (r *run) deliverReady() {
	if len(r.ready) == 0 {
		return
	}
	r.endTurnNow()
	for _, i := range r.ready {
		r.deliver(i, r.out[i])
	}
	r.ready = r.ready[:0]
}

// sampleStep samples one token for every active row from next (A, V) and
// appends it, its log-prob and, where asked, its alternatives to the row.
func (r *run) sampleStep(s *torch.Scope, active []*row, next *torch.Tensor) error {
	srows := make([]sample.Row, len(active))
	for i, rw := range active {
		q := &r.reqs[rw.req]
		srows[i] = sample.Row{Params: q.Sampling, RNG: rw.rng}
		if r.anyProc {
			adj, err := r.adjust(rw)
			if err != nil {
				return fmt.Errorf("request %d sample %d: %w", rw.req, rw.idx, err)
			}
			srows[i].Adjust = adj
		}
	}
	res, err := sample.SampleWith(s, r.ws, next, srows)
	if err != nil {
		return err
	}
	var tops [][]Alt
	if r.anyTop {
		if tops, err = r.alternatives(s, active, next); err != nil {
			return fmt.Errorf("top log-probs: %w", err)
		}
	}
	for i, rw := range active {
		rw.tokens = append(rw.tokens, int(res.Tokens[i]))
		rw.lps = append(rw.lps, res.LogProbs[i])
		if tops != nil && r.reqs[rw.req].TopLogProbs > 0 {
			rw.top = append(rw.top, tops[i])
		}
		rw.pos++
	}
	return nil
}

// alternatives returns, for each active row whose request asks for them,
// the TopLogProbs most likely tokens of next (A, V) with their raw
// log-probs; nil entries for the other rows.
func (r *run) alternatives(s *torch.Scope, active []*row, next *torch.Tensor) ([][]Alt, error) {
	var idx []int64
	kmax := 0
	for i, rw := range active {
		if k := r.reqs[rw.req].TopLogProbs; k > 0 {
			idx = append(idx, int64(i))
			kmax = max(kmax, min(k, int(r.V)))
		}
	}
	out := make([][]Alt, len(active))
	if len(idx) == 0 {
		return out, nil
	}
	c := s.Child()
	defer c.Close()
	sel := c.IndexSelect(next, 0, c.To(c.FromInt64(idx, int64(len(idx))), r.dev, torch.Int64))
	vals, ids := c.Topk(c.LogSoftmax(sel, -1, torch.Float32), int64(kmax), -1, true) // (G, k)
	vals, ids = c.To(vals, torch.CPU, torch.Float32), c.To(ids, torch.CPU, torch.Int64)
	if err := c.Err(); err != nil {
		return nil, err
	}
	fv, err := torch.Float32s(vals)
	if err != nil {
		return nil, err
	}
	iv, err := torch.Int64s(ids)
	if err != nil {
		return nil, err
	}
	for g, i := range idx {
		k := min(r.reqs[active[i].req].TopLogProbs, kmax)
		alts := make([]Alt, k)
		for j := range alts {
			alts[j] = Alt{ID: int(iv[g*kmax+j]), LogProb: fv[g*kmax+j]}
		}
		out[i] = alts
	}
	return out, nil
}

// forward decodes one token for every active row and returns their next
// logits (A, V), owned by cur.
func (r *run) forward(cur *torch.Scope, active []*row) (*torch.Tensor, error) {
	A := int64(len(active))
	Tk := int64(r.cache.Len()) + 1
	stepIDs := make([]int64, A)
	stepPos := make([]int64, A)
	stepMask := make([]int64, 0, A*Tk)
	for i, rw := range active {
		stepIDs[i] = int64(rw.tokens[len(rw.tokens)-1])
		stepPos[i] = rw.pos - 1
		stepMask = append(stepMask, r.mask[rw.req*r.Tp:(rw.req+1)*r.Tp]...)
		for j := int64(r.Tp); j < Tk; j++ {
			stepMask = append(stepMask, 1)
		}
	}
	h, err := r.g.m.Hidden(cur, model.Batch{
		IDs:       cur.To(cur.FromInt64(stepIDs, A, 1), r.dev, torch.Int64),
		Positions: cur.To(cur.FromInt64(stepPos, A, 1), r.dev, torch.Int64),
		Mask:      cur.To(cur.FromInt64(stepMask, A, Tk), r.dev, torch.Int64),
		Cache:     r.cache,
	})
	if err != nil {
		return nil, err
	}
	return r.g.logits(cur, r.ws, h, A, r.V, r.dev) // (A, V)
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
