package model

import (
	"fmt"
	"strings"

	"github.com/evolm/evolm/model/torch"
)

// finiteChunk is how many elements NonFinite checks at a time: isfinite
// makes temporaries several times the input's size, which for a 151936 ×
// 4096 embedding would add gigabytes to a checkpoint load's peak.
const finiteChunk = 1 << 24

// NonFinite returns how many elements of x are NaN or ±Inf. It checks a
// flat view of x finiteChunk elements at a time, so its temporaries stay
// within about a hundred megabytes whatever x's size.
func NonFinite(x *torch.Tensor) (int64, error) {
	shape, err := torch.Shape(x)
	if err != nil {
		return 0, err
	}
	numel := torch.Numel(shape)
	var n float64
	err = torch.NoGrad(func() error {
		s := torch.NewScope()
		defer s.Close()
		flat := s.Reshape(s.Detach(x), numel)
		for off := int64(0); off < numel; off += finiteChunk {
			cs := s.Child()
			bad := cs.Sum(cs.LogicalNot(cs.Isfinite(cs.Narrow(flat, 0, off, min(finiteChunk, numel-off)))))
			if err := cs.Err(); err != nil {
				cs.Close()
				return err
			}
			v, err := torch.Item(bad)
			cs.Close()
			if err != nil {
				return err
			}
			n += v
		}
		return s.Err()
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
