// Package sample turns next-token logits into tokens: the logit processors
// (Adjust: logit bias, repetition, frequency and presence penalties, banned
// and allowed tokens; then temperature, min-p, top-k, top-p) and a seeded
// sampler.
//
// Contract:
//
//   - Order. A row's Adjust first (see Adjust, vLLM's order), then
//     temperature (logits / T, as HF), then min-p (vLLM's MinPLogitsProcessor:
//     tokens below MinP × the top probability are dropped), then top-k,
//     then top-p on the distribution the others left (renormalised), as
//     vLLM does (HF applies min-p after top-p; the two agree unless both
//     are on). Top-p
//     keeps the smallest most-likely set whose mass is ≥ p: token j of the
//     descending order is kept iff the mass before it is < p, so the most
//     likely token is always kept. Temperature 0 is greedy: the argmax of the
//     raw logits (the first index on ties, as torch.argmax).
//   - Precision. All math is float32 whatever the logits' dtype.
//   - Randomness. Each row brings its own RNG (ChaCha8 keyed by the request
//     seed, see NewRNG). A sampled token costs exactly one uniform u from it,
//     and the token is found by inverse CDF: the first token in the row's
//     order whose cumulative (filtered) mass reaches u·total. A row's order
//     depends only on its own params — descending probability when top-k or
//     top-p is on, vocabulary order otherwise — so a row's tokens depend on
//     its seed, params and logits only, never on the rest of the batch. (Its
//     logits themselves may differ in the last float bits between batch
//     shapes; that flips a sample only when u lands within that much of a
//     boundary.) Tokens of exactly equal probability are ordered as
//     torch.sort/topk order them.
//   - Cost. Greedy and temperature-only rows (the common case) take a few
//     passes over one (B, V) buffer that a decode loop reuses every step
//     (Workspace, sampleSimple): logsumexp as libtorch computes it, then
//     the unnormalised temperature distribution's running sum in place.
//     They take that path in every batch, so a row's token never depends
//     on its neighbours. Top-k rows use torch.topk. Top-p-only rows first
//     try the top 1024 tokens and fall back to a full sort only when their
//     nucleus is larger (plan); both paths yield identical kept sets and
//     probabilities.
//   - Log-probs. Result.LogProbs are the log-softmax of the raw model logits
//     (before temperature and filters), as vLLM and TRL report by default.
//     Probs gives the processed distribution when it is wanted.
//   - Devices. Everything runs on the logits' device; the workspace follows
//     the device and dtype it is given (tested with bf16 logits and a
//     workspace moved between devices on CPU tensors). The sampling ops on
//     a CUDA device are unproven here: no GPU has run them
//     (scripts/gpu-check.sh's generation check does).
package sample

import (
	"fmt"
	"math"

	"github.com/evolm/evolm/model/torch"
	// Only for gts.None, the undefined tensor searchsorted's optional sorter
	// needs; model/torch has no wrapper for it.
	gts "github.com/sugarme/gotch/ts"
)

// Row is one row of a batch: its params, its Adjust (nil: none) and, unless
// it is greedy, its RNG.
type Row struct {
	Params
	RNG    *RNG
	Adjust *Adjust
}

// Result holds one sampled token per row.
type Result struct {
	Tokens   []int64   // (B) chosen token ids
	LogProbs []float32 // (B) raw-model log-prob of each chosen token
}

type kind int

const (
	kindGreedy  kind = iota
	kindPlain        // temperature only: vocabulary order
	kindNucleus      // top-p without top-k whose nucleus lies in the top nucleusK: that sorted prefix
	kindSorted       // top-p without top-k, nucleus beyond the top nucleusK: full descending sort
	kindTopK         // top-k (maybe with top-p): sorted top-k prefix
	kindMinP         // min-p without top-k or top-p: vocabulary order, through dist
)

func rowKind(p Params, vocab int64) kind {
	switch {
	case p.Greedy():
		return kindGreedy
	case p.topK(vocab):
		return kindTopK
	case p.topP() && p.minP():
		// min-p's survivors need not lie in the top nucleusK.
		return kindSorted
	case p.topP():
		return kindNucleus
	case p.minP():
		return kindMinP
	}
	return kindPlain
}

// nucleusK is the prefix top-p rows try first: a full sort of a 152k
// vocabulary costs ~100× a top-1024 on the CPU, and an LM's nucleus almost
// always lies in its top 1024 tokens.
const nucleusK = 1024

// plan groups rows by kind; top-p-only rows whose top-nucleusK mass (after
// temperature) reaches top_p by a margin take the prefix path, the others a
// full sort. Both paths give the same kept set and the same probabilities
// exp(z − logsumexp z), so the choice (which depends on the row's own logits
// only) changes nothing but the cost.
func plan(s *torch.Scope, x *torch.Tensor, ps []Params, vocab int64) (map[kind][]int64, error) {
	g := map[kind][]int64{}
	for i, p := range ps {
		k := rowKind(p, vocab)
		g[k] = append(g[k], int64(i))
	}
	idx := g[kindNucleus]
	if len(idx) == 0 || vocab <= nucleusK {
		return g, nil
	}
	dev, err := torch.DeviceOf(x)
	if err != nil {
		return nil, err
	}
	sub := make([]Params, len(idx))
	for i, r := range idx {
		sub[i] = ps[r]
	}
	z := scaled(s, s.IndexSelect(x, 0, s.To(s.FromInt64(idx, int64(len(idx))), dev, torch.Int64)), sub)
	vals, _ := s.Topk(z, nucleusK, -1, true)                                                                       // (G, nucleusK)
	mass, err := torch.Float32s(s.SumDim(s.Exp(s.Sub(vals, s.Logsumexp(z, []int64{1}, true))), []int64{1}, false)) // (G)
	if err != nil {
		return nil, err
	}
	g[kindNucleus] = nil
	for i, r := range idx {
		if float64(mass[i]) >= sub[i].TopP+1e-4 {
			g[kindNucleus] = append(g[kindNucleus], r)
		} else {
			g[kindSorted] = append(g[kindSorted], r)
		}
	}
	return g, nil
}

// scaled is x (G, V) divided row-wise by the rows' temperatures.
func scaled(s *torch.Scope, x *torch.Tensor, ps []Params) *torch.Tensor {
	temps := make([]float32, len(ps))
	unit := true
	for i, p := range ps {
		temps[i] = float32(p.Temperature)
		unit = unit && p.Temperature == 1
	}
	if unit {
		return x
	}
	dev, err := torch.DeviceOf(x)
	if err != nil {
		s.Fail(err)
		return nil
	}
	return s.Div(x, s.To(s.FromFloat32(temps, int64(len(ps)), 1), dev, torch.Float32)) // (G, V)
}

// minP sets to −Inf the logits z (G, V) (after temperature) of every token
// whose probability is below MinP times its row's most likely one's.
func minP(s *torch.Scope, z *torch.Tensor, ps []Params, dev torch.Device) *torch.Tensor {
	any := false
	mins := make([]float32, len(ps))
	for i, p := range ps {
		if p.minP() {
			mins[i], any = float32(p.MinP), true
		}
	}
	if !any {
		return z
	}
	probs := s.Softmax(z, -1, torch.NoDType)                                                                        // (G, V)
	thr := s.Mul(s.Amax(probs, []int64{1}, true), s.To(s.FromFloat32(mins, int64(len(ps)), 1), dev, torch.Float32)) // (G, 1)
	return s.MaskedFill(z, s.Track(probs.LtTensor(thr, false)), math.Inf(-1))
}

func check(logits *torch.Tensor, rows []Row) (b, v int64, err error) {
	sh, err := torch.Shape(logits)
	if err != nil {
		return 0, 0, fmt.Errorf("sample: %w", err)
	}
	if len(sh) != 2 || sh[1] < 1 {
		return 0, 0, fmt.Errorf("sample: logits shape %v, want (B, V)", sh)
	}
	if int64(len(rows)) != sh[0] {
		return 0, 0, fmt.Errorf("sample: %d rows for logits of batch %d", len(rows), sh[0])
	}
	for i, r := range rows {
		if err := r.Validate(); err != nil {
			return 0, 0, fmt.Errorf("row %d: %w", i, err)
		}
		if !r.Greedy() && r.RNG == nil {
			return 0, 0, fmt.Errorf("sample: row %d samples (temperature %v) but has no RNG", i, r.Temperature)
		}
	}
	return sh[0], sh[1], nil
}

// dist returns the filtered, unnormalised distribution of the rows x (G, V)
// (float32 logits) with params ps, all of kind k ≠ kindGreedy: probs (G, K)
// with removed tokens at 0, and order (G, K), the token id of each column, or
// nil when the columns are the vocabulary itself (K = V).
func dist(s *torch.Scope, x *torch.Tensor, ps []Params, k kind, vocab int64) (probs, order *torch.Tensor) {
	g := int64(len(ps))
	dev, err := torch.DeviceOf(x)
	if err != nil {
		s.Fail(err)
		return nil, nil
	}
	z := minP(s, scaled(s, x, ps), ps, dev) // (G, V)
	switch k {
	case kindPlain, kindMinP:
		return s.Softmax(z, -1, torch.NoDType), nil
	case kindNucleus, kindSorted:
		// Probabilities of the full distribution, in descending order.
		lse := s.Logsumexp(z, []int64{1}, true) // (G, 1)
		if k == kindNucleus && vocab > nucleusK {
			z, order = s.Topk(z, nucleusK, -1, true) // (G, nucleusK)
		} else {
			z, order = s.Sort(z, -1, true) // (G, V)
		}
		probs = s.Exp(s.Sub(z, lse))
	case kindTopK:
		kmax := 0
		for _, p := range ps {
			kmax = max(kmax, min(p.TopK, int(vocab)))
		}
		z, order = s.Topk(z, int64(kmax), -1, true) // (G, kmax) descending
		drop := make([]bool, int(g)*kmax)
		for i, p := range ps {
			for j := p.TopK; j < kmax; j++ {
				drop[i*kmax+j] = true
			}
		}
		z = s.MaskedFill(z, s.To(s.FromBool(drop, g, int64(kmax)), dev, torch.Bool), math.Inf(-1))
		probs = s.Softmax(z, -1, torch.NoDType) // (G, K) renormalised over the top k
	}
	anyP := false
	tops := make([]float32, g)
	for i, p := range ps {
		tops[i] = 2 // keeps everything: the mass before any token is ≤ 1
		if p.topP() {
			tops[i], anyP = float32(p.TopP), true
		}
	}
	if anyP {
		before := s.Sub(s.Cumsum(probs, -1), probs) // (G, K) mass strictly before each token
		keep := s.Track(before.LtTensor(s.To(s.FromFloat32(tops, g, 1), dev, torch.Float32), false))
		probs = s.MaskedFill(probs, s.LogicalNot(keep), 0)
	}
	return probs, order
}

// Sample draws one token per row of logits (B, V) (any float dtype, any
// device). rows has B entries; each non-greedy row's RNG advances by one
// uniform. The returned Result lives in Go memory; s only hosts temporaries
// (they are freed before Sample returns).
func Sample(s *torch.Scope, logits *torch.Tensor, rows []Row) (Result, error) {
	return SampleWith(s, nil, logits, rows)
}

// SampleWith is Sample working in ws's reused buffers (nil: temporary
// ones), as a decode loop calls it every step. Batches of greedy and
// temperature-only rows take sampleSimple's few passes over one buffer;
// batches with top-k or top-p rows the general path.
func SampleWith(s *torch.Scope, ws *Workspace, logits *torch.Tensor, rows []Row) (Result, error) {
	b, vocab, err := check(logits, rows)
	if err != nil {
		return Result{}, err
	}
	c := s.Child()
	defer c.Close()
	x := logits // (B, V)
	if x.DType() != torch.Float32 {
		x = c.Float32(logits)
	}
	dev, err := torch.DeviceOf(logits)
	if err != nil {
		return Result{}, fmt.Errorf("sample: %w", err)
	}
	if ws == nil {
		ws = &Workspace{}
		defer ws.Close()
	}
	// Log-probs are the raw logits' (x − lse); rows sample from the
	// adjusted ones.
	raw, rawLSE := x, (*torch.Tensor)(nil)
	if adjusting(rows) {
		rawLSE = c.Logsumexp(raw, []int64{1}, true) // (B, 1)
		adj := make([]*Adjust, len(rows))
		for i, r := range rows {
			adj[i] = r.Adjust
		}
		x = Adjusted(c, raw, adj)
		if err := c.Err(); err != nil {
			return Result{}, fmt.Errorf("sample: %w", err)
		}
	}
	if simple(rows, vocab) {
		tokens, lse := sampleSimple(c, ws, x, rows, b, vocab, dev)
		if rawLSE != nil {
			lse = rawLSE
		}
		return result(c, raw, tokens, lse, b)
	}
	lse := rawLSE
	if lse == nil {
		lse = c.Logsumexp(x, []int64{1}, true) // (B, 1): raw log-prob = x − lse (the value sampleSimple computes)
	}
	params := make([]Params, len(rows))
	for i, r := range rows {
		params[i] = r.Params
	}
	gs, err := plan(c, x, params, vocab)
	if err != nil {
		return Result{}, fmt.Errorf("sample: %w", err)
	}
	tokens := c.Zeros([]int64{b}, torch.Int64, dev) // (B)
	// Greedy and temperature-only rows take sampleSimple's arithmetic in
	// every batch, so that their tokens never depend on the batch's other
	// rows.
	if idx := append(gs[kindGreedy], gs[kindPlain]...); len(idx) > 0 {
		g := int64(len(idx))
		sub := make([]Row, g)
		for i, r := range idx {
			sub[i] = rows[r]
		}
		ix := c.To(c.FromInt64(idx, g), dev, torch.Int64)
		tok, _ := sampleSimple(c, ws, c.IndexSelect(x, 0, ix), sub, g, vocab, dev)
		tokens = c.Track(tokens.IndexCopy(0, ix, tok, false))
	}
	for _, k := range []kind{kindNucleus, kindSorted, kindTopK, kindMinP} {
		idx := gs[k]
		if len(idx) == 0 {
			continue
		}
		g := int64(len(idx))
		ps := make([]Params, g)
		us := make([]float32, g)
		for i, r := range idx {
			ps[i] = rows[r].Params
			// (0, 1]: the threshold u·total is then > 0 and ≤ total, so the
			// chosen token always has positive mass.
			us[i] = float32(1 - rows[r].RNG.Float64())
		}
		whole := g == b // every row is of this kind (idx is 0…B−1 in order)
		var ix, sub *torch.Tensor
		if whole {
			sub = x
		} else {
			ix = c.To(c.FromInt64(idx, g), dev, torch.Int64)
			sub = c.IndexSelect(x, 0, ix)
		}
		probs, order := dist(c, sub, ps, k, vocab) // (G, K)
		cum := c.Cumsum(probs, -1)                 // (G, K)
		kk, err := torch.Shape(probs)
		if err != nil {
			return Result{}, fmt.Errorf("sample: %w", err)
		}
		total := c.Narrow(cum, 1, kk[1]-1, 1)                                  // (G, 1)
		thr := c.Mul(total, c.To(c.FromFloat32(us, g, 1), dev, torch.Float32)) // (G, 1)
		// The first column whose cumulative mass reaches thr: a binary search
		// per row (counting cum < thr instead costs a pass over (G, K)).
		pos := c.Track(thr.Searchsorted(cum, false, false, "left", gts.None, false)) // (G, 1)
		pos = c.ToDType(c.ClampMax(pos, float64(kk[1]-1)), torch.Int64)              // (G, 1)
		tok := pos
		if order != nil {
			tok = c.Gather(order, 1, pos) // (G, 1)
		}
		if whole {
			tokens = c.Reshape(tok, g)
		} else {
			tokens = c.Track(tokens.IndexCopy(0, ix, c.Reshape(tok, g), false))
		}
	}
	return result(c, raw, tokens, lse, b)
}

// result copies the tokens (B) and their raw log-probs x[token] − lse to
// Go memory, in one device-to-host copy: ids below 2^24 are exact in
// float32, so both travel as one (B, 2) float32 tensor.
func result(c *torch.Scope, x, tokens, lse *torch.Tensor, b int64) (Result, error) {
	lp := c.Sub(c.Gather(x, 1, c.Unsqueeze(tokens, 1)), lse) // (B, 1)
	if err := c.Err(); err != nil {
		return Result{}, fmt.Errorf("sample: %w", err)
	}
	var res Result
	sh, err := torch.Shape(x)
	if err != nil {
		return Result{}, fmt.Errorf("sample: %w", err)
	}
	if sh[1] <= 1<<24 {
		both, err := torch.Float32s(c.Cat([]*torch.Tensor{c.Float32(c.Unsqueeze(tokens, 1)), lp}, 1)) // (B, 2)
		if err != nil {
			return Result{}, fmt.Errorf("sample: %w", err)
		}
		res.Tokens, res.LogProbs = make([]int64, len(both)/2), make([]float32, len(both)/2)
		for i := range res.Tokens {
			res.Tokens[i], res.LogProbs[i] = int64(both[2*i]), both[2*i+1]
		}
	} else {
		if res.Tokens, err = torch.Int64s(tokens); err != nil {
			return Result{}, fmt.Errorf("sample: %w", err)
		}
		if res.LogProbs, err = torch.Float32s(lp); err != nil {
			return Result{}, fmt.Errorf("sample: %w", err)
		}
	}
	if int64(len(res.Tokens)) != b {
		return Result{}, fmt.Errorf("sample: got %d tokens for %d rows", len(res.Tokens), b)
	}
	return res, nil
}

// Probs returns the processed distribution that Sample draws from, in
// vocabulary order: (B, V) float32 on the logits' device, rows summing to 1,
// removed tokens exactly 0, greedy rows one-hot at the argmax. The tensor is
// owned by s.
func Probs(s *torch.Scope, logits *torch.Tensor, rows []Params) (*torch.Tensor, error) {
	rs := make([]Row, len(rows))
	for i, p := range rows {
		rs[i] = Row{Params: p, RNG: NewRNG(0)}
	}
	b, vocab, err := check(logits, rs)
	if err != nil {
		return nil, err
	}
	dev, err := torch.DeviceOf(logits)
	if err != nil {
		return nil, fmt.Errorf("sample: %w", err)
	}
	c := s.Child()
	defer c.Close()
	x := c.Float32(logits) // (B, V)
	zeros := c.Zeros([]int64{b, vocab}, torch.Float32, dev)
	ones := c.Ones([]int64{b, 1}, torch.Float32, dev)
	out := c.Track(zeros.Scatter(1, c.Argmax(x, -1, true), ones, false)) // (B, V) one-hot
	gs, err := plan(c, x, rows, vocab)
	if err != nil {
		return nil, fmt.Errorf("sample: %w", err)
	}
	for k, idx := range gs {
		if k == kindGreedy || len(idx) == 0 {
			continue
		}
		g := int64(len(idx))
		ps := make([]Params, g)
		for i, r := range idx {
			ps[i] = rows[r]
		}
		ix := c.To(c.FromInt64(idx, g), dev, torch.Int64)
		probs, order := dist(c, c.IndexSelect(x, 0, ix), ps, k, vocab)
		probs = c.Div(probs, c.SumDim(probs, []int64{1}, true))
		if order != nil {
			z := c.Zeros([]int64{g, vocab}, torch.Float32, dev)
			probs = c.Track(z.Scatter(1, order, probs, false)) // (G, V)
		}
		out = c.Track(out.IndexCopy(0, ix, probs, false))
	}
	if err := c.Err(); err != nil {
		return nil, fmt.Errorf("sample: %w", err)
	}
	return c.MoveTo(s, out), nil
}
