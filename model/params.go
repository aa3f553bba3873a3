package model

import (
	"fmt"

	"github.com/evolm/evolm/model/torch"
)

// SetRequiresGrad turns gradient tracking of every parameter on or off
// (a tied lm_head follows embed_tokens).
func SetRequiresGrad(m CausalLM, on bool) error {
	for _, p := range m.Parameters() {
		if err := torch.SetRequiresGrad(p.Tensor, on); err != nil {
			return fmt.Errorf("%s: %w", p.Name, err)
		}
	}
	return nil
}

// FrozenCopy returns a deep copy of m that shares no storage with it and does
// not require grad: the GRPO reference model. The copy lives on m's device in
// m's dtype and must be closed separately.
func FrozenCopy(m CausalLM) (CausalLM, error) {
	cp, err := Build(m.Config(), LoadOptions{Device: m.Device(), DType: m.DType(), Attention: m.Config().AttnImplementation})
	if err != nil {
		return nil, fmt.Errorf("frozen copy: %w", err)
	}
	src := m.Parameters()
	dst := cp.Parameters()
	if len(src) != len(dst) {
		cp.Close()
		return nil, fmt.Errorf("frozen copy: %d parameters, copy has %d", len(src), len(dst))
	}
	err = torch.NoGrad(func() error {
		for i := range src {
			if src[i].Name != dst[i].Name {
				return fmt.Errorf("parameter %d is %s, copy has %s", i, src[i].Name, dst[i].Name)
			}
			if err := torch.CopyInto(dst[i].Tensor, src[i].Tensor); err != nil {
				return fmt.Errorf("%s: %w", src[i].Name, err)
			}
		}
		return nil
	})
	if err != nil {
		cp.Close()
		return nil, fmt.Errorf("frozen copy: %w", err)
	}
	return cp, nil
}
