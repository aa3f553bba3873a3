package model

import (
	"fmt"
	"strings"

	"github.com/evolm/evolm/model/torch"
)

// NonFinite returns how many elements of x are NaN or ±Inf.
func NonFinite(x *torch.Tensor) (int64, error) {
	var n float64
	err := torch.NoGrad(func() error {
		s := torch.NewScope()
		defer s.Close()
		bad := s.Sum(s.LogicalNot(s.Isfinite(s.Detach(x))))
		if err := s.Err(); err != nil {
			return err
		}
		v, err := torch.Item(bad)
		n = v
		return err
	})
	return int64(n), err
}

// CheckFinite returns an error naming every parameter of m that holds NaN
// or ±Inf, with how many of its elements do; nil when all are finite. The
// loader refuses such weights and Save refuses to write them: a run must
// never resume from, train on or publish a diverged model.
func CheckFinite(m CausalLM) error {
	var bad []string
	for _, p := range m.Parameters() {
		n, err := NonFinite(p.Tensor)
		if err != nil {
			return fmt.Errorf("%s: %w", p.Name, err)
		}
		if n > 0 {
			numel := int64(1)
			if shape, err := torch.Shape(p.Tensor); err == nil {
				for _, d := range shape {
					numel *= d
				}
			}
			bad = append(bad, fmt.Sprintf("%s: %d of %d elements are NaN or Inf", p.Name, n, numel))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%d tensor(s) with non-finite weights:\n  %s", len(bad), strings.Join(bad, "\n  "))
	}
	return nil
}
