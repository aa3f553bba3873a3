package torchbe

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync/atomic"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/fused"
	"github.com/evolm/evolm/model/torch"
	"github.com/evolm/evolm/serving/backend"
)

// scoreRows answers the requests in order while it holds the engine, with
// autograd off: row fills a response, a Failure or the final hidden states
// of its criteria queued on q, and its error ends the call. The queued rows
// get their heads before scoreRows returns.
func (m *Model) scoreRows(ctx context.Context, reqs []backend.ScoreRequest, row func(*backend.ScoreRequest, *backend.ScoreResponse, *heads) error, end func(*heads) error) ([]backend.ScoreResponse, error) {
	out := make([]backend.ScoreResponse, len(reqs))
	release, err := m.hold(ctx, "torch score")
	if err != nil {
		return nil, err
	}
	defer release()
	defer torch.SetGrad(false)()
	// The call's passes reuse each other's large host blocks (activations,
	// the head's logits) instead of mapping them afresh, within the call's
	// peak; they go back to the OS when it returns.
	err = fused.KeepBlocks(func() error {
		q := &heads{m: m}
		defer q.close()
		for i := range reqs {
			if err := ctx.Err(); err != nil {
				return err
			}
			out[i] = backend.ScoreResponse{ID: reqs[i].ID, Model: m.id}
			if err := row(&reqs[i], &out[i], q); err != nil {
				return err
			}
		}
		if err := end(q); err != nil {
			return err
		}
		if err := q.flush(); err != nil {
			return fmt.Errorf("torch score: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// heads runs the vocabulary head over the criteria's final hidden states of
// several forward passes at once, up to MaxBatch rows per call, in the
// order they were queued. A head over a few rows is bound by reading its
// weight (V × C, most of a small model), so one call for the criteria of
// several requests costs about what one for a single request did.
type heads struct {
	m    *Model
	rows []*torch.Tensor // owned (K, C) final hidden states, in queue order
	dst  []headDst
	n    int // rows queued
}

// headDst is where the log-probs of k queued rows go: appended, one per row,
// to res.LogProbs.
type headDst struct {
	res   *backend.ScoreResponse
	k     int
	cands []int
	among bool // log-probs among the candidates (ScoreRequest.AmongCandidates)
}

// add queues h (k rows, owned by q from here) for res, after flushing the
// queue first if h would take it past MaxBatch rows.
func (q *heads) add(h *torch.Tensor, k int, cands []int, among bool, res *backend.ScoreResponse) error {
	if q.n > 0 && q.n+k > q.m.opt.MaxBatch {
		if err := q.flush(); err != nil {
			torch.Drop(h)
			return err
		}
	}
	q.rows = append(q.rows, h)
	q.dst = append(q.dst, headDst{res: res, k: k, cands: cands, among: among})
	q.n += k
	return nil
}

// flush runs the head over the queued rows and appends each row's
// candidates' log-probs to its response. When every queued request asks
// for them among its candidates, the head runs over the candidates' rows
// of its weight alone (N × K × C instead of N × V × C, and no log-softmax
// over V); otherwise over the vocabulary, and the rows that asked are
// renormalized after.
func (q *heads) flush() error {
	if len(q.rows) == 0 {
		return nil
	}
	rows, dst := q.rows, q.dst
	q.rows, q.dst, q.n = nil, nil, 0
	headCalls.Add(1)
	s := torch.NewScope()
	defer s.Close()
	for _, r := range rows {
		s.Adopt(r)
	}
	h := rows[0]
	if len(rows) > 1 {
		h = s.Cat(rows, 0) // (N, C)
	}
	dev := q.m.lm.Device()
	// lg is (N, W): log-probs over the vocabulary (W = V) or the
	// candidates' logits (W of them); cols[i][j] is the column of dst[i]'s
	// candidate j.
	var lg *torch.Tensor
	var W int64
	cols := make([][]int64, len(dst))
	tl, ok := q.m.lm.(model.TokenLogitser)
	if ok && !slices.ContainsFunc(dst, func(d headDst) bool { return !d.among }) {
		// Every row wants log-probs among its candidates: the head's rows
		// for the candidates of the call alone, normalized below.
		var ids []int64
		at := map[int]int64{}
		for i, d := range dst {
			for _, c := range d.cands {
				if _, ok := at[c]; !ok {
					at[c] = int64(len(ids))
					ids = append(ids, int64(c))
				}
				cols[i] = append(cols[i], at[c])
			}
		}
		W = int64(len(ids))
		candidateHeads.Add(1)
		var err error
		if lg, err = tl.TokenLogits(s, h, s.To(s.FromInt64(ids, W), dev, torch.Int64)); err != nil { // (N, W)
			return err
		}
	} else {
		l, err := q.m.lm.Logits(s, h) // (N, V)
		if err != nil {
			return err
		}
		lg, W = s.LogSoftmax(l, -1, torch.Float32), int64(q.m.lm.Config().VocabSize)
		for i, d := range dst {
			for _, c := range d.cands {
				cols[i] = append(cols[i], int64(c))
			}
		}
	}
	var idx []int64 // flat index of each row's candidates in the (N, W) result
	row := int64(0)
	for i, d := range dst {
		for range d.k {
			for _, c := range cols[i] {
				idx = append(idx, row*W+c)
			}
			row++
		}
	}
	sel := s.IndexSelect(s.Reshape(lg, -1), 0, s.To(s.FromInt64(idx, int64(len(idx))), dev, torch.Int64))
	sel = s.To(sel, torch.CPU, torch.Float32)
	if err := s.Err(); err != nil {
		return err
	}
	flat, err := torch.Float32s(sel)
	if err != nil {
		return err
	}
	for _, d := range dst {
		for range d.k {
			lp := make([]float64, len(d.cands))
			for j := range lp {
				if lp[j] = float64(flat[j]); math.IsNaN(lp[j]) {
					lp[j] = math.Inf(-1)
				}
			}
			flat = flat[len(lp):]
			if d.among {
				backend.AmongCandidates(d.cands, lp)
			}
			d.res.LogProbs = append(d.res.LogProbs, lp)
		}
	}
	return nil
}

// headCalls counts the heads flush ran, and candidateHeads those of them
// over the candidates' rows alone (for tests).
var headCalls, candidateHeads atomic.Int64

// close drops rows still queued (after an error).
func (q *heads) close() {
	torch.Drop(q.rows...)
	q.rows, q.dst, q.n = nil, nil, 0
}
