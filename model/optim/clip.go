package optim

import (
	"fmt"
	"math"

	"github.com/evolm/evolm/model/torch"
)

// GradNorm is the global L2 norm of the gradients of params, computed in
// float32 whatever the gradients' dtype: √(Σᵢ ‖gᵢ‖²) with ‖gᵢ‖ = √Σ g², as
// torch.nn.utils.clip_grad_norm_ combines per-tensor norms. Parameters
// without a gradient are skipped.
func GradNorm(params []Param) (float64, error) {
	sq, err := GradNormSquares(params)
	if err != nil {
		return 0, err
	}
	return NormFromSquares(sq), nil
}

// ClipGradNorm scales every gradient in place by maxNorm/(norm + 1e-6) when
// that factor is below 1, exactly as torch.nn.utils.clip_grad_norm_, and
// returns the norm before clipping. maxNorm ≤ 0 only measures.
func ClipGradNorm(params []Param, maxNorm float64) (float64, error) {
	norm, err := GradNorm(params)
	if err != nil {
		return 0, err
	}
	return norm, ClipGradsTo(params, maxNorm, norm)
}

// GradNormSquares returns, per parameter of params, the square of its
// gradient's float32 norm as GradNorm sums it (0 without a gradient). A
// data-parallel rank that holds only its shard's gradients (ZeRO-2) sums
// these over ranks to get the global norm GradNorm would compute.
func GradNormSquares(params []Param) ([]float64, error) {
	s := torch.NewScope()
	defer s.Close()
	defer torch.SetGrad(false)()
	out := make([]float64, len(params))
	for i, p := range params {
		c := s.Child()
		if g := c.Grad(p.Tensor); g != nil {
			n := c.Sqrt(c.Sum(c.Square(c.Float32(g))))
			if err := c.Err(); err != nil {
				c.Close()
				return nil, fmt.Errorf("optim: grad norm of %s: %w", p.Name, err)
			}
			v, err := torch.Item(n)
			if err != nil {
				c.Close()
				return nil, fmt.Errorf("optim: grad norm of %s: %w", p.Name, err)
			}
			f := float32(v)
			out[i] = float64(f * f)
		}
		c.Close()
	}
	return out, nil
}

// NormFromSquares is GradNorm's result from GradNormSquares' terms, summed
// in order.
func NormFromSquares(sq []float64) float64 {
	total := 0.0
	for _, x := range sq {
		total += x
	}
	return float64(float32(math.Sqrt(total)))
}

// ClipGradsTo scales every gradient of params in place as ClipGradNorm
// does for a gradient norm of norm (computed elsewhere: the global norm of
// a data-parallel step).
func ClipGradsTo(params []Param, maxNorm, norm float64) error {
	if maxNorm <= 0 {
		return nil
	}
	coef := float64(float32(maxNorm) / (float32(norm) + 1e-6))
	if coef >= 1 {
		return nil
	}
	s := torch.NewScope()
	defer s.Close()
	defer torch.SetGrad(false)()
	for _, p := range params {
		c := s.Child()
		if g := c.Grad(p.Tensor); g != nil {
			c.Copy_(g, c.MulScalar(c.Float32(g), coef))
		}
		err := c.Err()
		c.Close()
		if err != nil {
			return fmt.Errorf("optim: clip grad of %s: %w", p.Name, err)
		}
	}
	return nil
}
