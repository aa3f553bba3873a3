package train

import (
	"bytes"
	"encoding/binary"
	"encoding/gob"
	"fmt"
	"math"

	"github.com/evolm/evolm/model/dist"
	"github.com/evolm/evolm/model/optim"
	"github.com/evolm/evolm/model/torch"
)

// microStat is one micro-batch's scalars, gathered across ranks.
type microStat struct {
	Loss, Count float64
	Metrics     map[string]float64
}

// gatherStats returns every rank's micro-batch scalars in rank order: the
// order in which one process would have summed them.
func gatherStats(dp *DataParallel, local []microStat) ([]microStat, error) {
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(local); err != nil {
		return nil, fmt.Errorf("train: encode step scalars: %w", err)
	}
	parts, err := dp.Group.AllGatherBytes(buf.Bytes(), dp.Device)
	if err != nil {
		return nil, fmt.Errorf("train: data-parallel step: %w", err)
	}
	var all []microStat
	for k, p := range parts {
		var ms []microStat
		if err := gob.NewDecoder(bytes.NewReader(p)).Decode(&ms); err != nil {
			return nil, fmt.Errorf("train: step scalars of rank %d: %w", k, err)
		}
		all = append(all, ms...)
	}
	return all, nil
}

// zeroGrads zeroes the gradient of every trained parameter (the
// optimizer's own list is a shard at ZeRO ≥ 1); at ZeRO-2 it frees them.
func (t *Trainer[M]) zeroGrads() error {
	if t.z2 != nil {
		t.z2.Reset()
		return nil
	}
	for _, p := range t.param {
		if err := torch.ZeroGrad(p.Tensor); err != nil {
			return fmt.Errorf("zero grad %s: %w", p.Name, err)
		}
	}
	return nil
}

// ensureGrads gives every trained parameter a gradient (zeros where it has
// none: a rank without micro-batches, a parameter its micro-batches did not
// reach), so that every rank all-reduces the same tensors.
func (t *Trainer[M]) ensureGrads() error {
	defer torch.SetGrad(true)()
	s := torch.NewScope()
	defer s.Close()
	var zero *torch.Tensor
	for _, p := range t.param {
		if g := s.Grad(p.Tensor); g != nil {
			continue
		}
		z := s.MulScalar(s.Sum(p.Tensor), 0)
		if zero == nil {
			zero = z
		} else {
			zero = s.Add(zero, z)
		}
	}
	if err := s.Err(); err != nil {
		return err
	}
	if zero == nil {
		return nil
	}
	return torch.Backward(zero)
}

// maxOverRanks is the largest n of any rank.
func maxOverRanks(dp *DataParallel, n int) (int, error) {
	s := torch.NewScope()
	defer s.Close()
	v := s.To(s.FromBytes(f64bytes([]float64{float64(n)}), []int64{1}, torch.Float64), dp.Device, torch.Float64)
	if err := s.Err(); err != nil {
		return 0, err
	}
	if err := dp.Group.AllReduce(v, dist.Max); err != nil {
		return 0, fmt.Errorf("train: data-parallel step: micro-batch count: %w", err)
	}
	xs, err := torch.Float64s(v)
	if err != nil {
		return 0, err
	}
	return int(xs[0]), nil
}

// allReduceGrads sums every gradient over the ranks (ZeRO 0 and 1).
func (t *Trainer[M]) allReduceGrads(dp *DataParallel) error {
	if err := t.ensureGrads(); err != nil {
		return fmt.Errorf("train: data-parallel step: %w", err)
	}
	s := torch.NewScope()
	defer s.Close()
	defer torch.SetGrad(false)()
	for _, p := range t.param {
		c := s.Child()
		g := c.Grad(p.Tensor)
		if err := c.Err(); err != nil || g == nil {
			c.Close()
			return fmt.Errorf("train: data-parallel step: gradient of %s: %v", p.Name, err)
		}
		err := dp.Group.AllReduce(g, dist.Sum)
		c.Close()
		if err != nil {
			return fmt.Errorf("train: data-parallel step: all-reduce of %s's gradient: %w", p.Name, err)
		}
	}
	return nil
}

// clip computes the global gradient norm and clips to it.
func (t *Trainer[M]) clip() (float64, error) {
	dp := t.cfg.DP
	if dp == nil || dp.ZeRO < 2 {
		// Every rank holds the whole (reduced) gradient.
		return optim.ClipGradNorm(t.param, t.cfg.MaxGradNorm)
	}
	var mine []optim.Param
	var idx []int
	for i, p := range t.param {
		if t.owner[i] == dp.Group.Rank() {
			mine = append(mine, p)
			idx = append(idx, i)
		}
	}
	sq, err := optim.GradNormSquares(mine)
	if err != nil {
		return 0, err
	}
	// One slot per parameter, filled by its owner alone: the all-reduce
	// adds zeros, so the sum below is GradNorm's, term by term.
	all := make([]float64, len(t.param))
	for k, i := range idx {
		all[i] = sq[k]
	}
	s := torch.NewScope()
	defer s.Close()
	v := s.To(s.FromBytes(f64bytes(all), []int64{int64(len(all))}, torch.Float64), dp.Device, torch.Float64)
	if err := s.Err(); err != nil {
		return 0, err
	}
	if err := dp.Group.AllReduce(v, dist.Sum); err != nil {
		return 0, fmt.Errorf("train: data-parallel step: gradient norm: %w", err)
	}
	if all, err = torch.Float64s(v); err != nil {
		return 0, err
	}
	norm := optim.NormFromSquares(all)
	if !finite(norm) {
		return norm, nil
	}
	return norm, optim.ClipGradsTo(mine, t.cfg.MaxGradNorm, norm)
}

// broadcastParams sends every parameter from its owner (ZeRO ≥ 1), in the
// model's order.
func (t *Trainer[M]) broadcastParams(dp *DataParallel) error {
	defer torch.SetGrad(false)()
	for i, p := range t.param {
		if err := dp.Group.Broadcast(p.Tensor, t.owner[i]); err != nil {
			return fmt.Errorf("train: data-parallel step: broadcast of %s from rank %d: %w", p.Name, t.owner[i], err)
		}
	}
	return nil
}

func f64bytes(xs []float64) []byte {
	b := make([]byte, 8*len(xs))
	for i, x := range xs {
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(x))
	}
	return b
}
