package generate

import (
	"fmt"

	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/torch"
)

// PrefillScoreElems bounds the attention scores (B × heads × chunk × keys
// elements, 16 MiB in float32) one prefill chunk materializes.
const PrefillScoreElems = 1 << 22

// minPrefillChunk keeps chunks long enough to use the hardware well; tests
// lower it with prefillElems to force many chunks.
var (
	minPrefillChunk int64 = 64
	prefillElems    int64 = PrefillScoreElems
)

// PrefillChunk is the number of query positions Prefill runs at once for B
// rows of T tokens on a model with the given attention heads.
func PrefillChunk(B, T, heads int64) int64 {
	return max(1, min(T, max(minPrefillChunk, prefillElems/max(1, B*heads*T))))
}

// Prefill runs b (IDs, Positions and Mask over the new tokens (B, T); Mask
// may be nil; Cache required, empty or not) through m in query chunks of
// PrefillChunk positions, appending every chunk's keys and values to the
// cache, and returns the final hidden states at the last position (B, 1, C),
// owned by s. Chunk k attends to the cache, so the result and the cache
// equal one pass over all T positions, while the attention scores and MLP
// activations alive at once are those of one chunk, not (T × T).
func Prefill(s *torch.Scope, m model.CausalLM, b model.Batch) (*torch.Tensor, error) {
	if b.Cache == nil {
		return nil, fmt.Errorf("prefill: no cache")
	}
	if b.Branches != nil {
		return nil, fmt.Errorf("prefill: branches need one pass, not chunks") // a later chunk would see them as trunk
	}
	sh, err := torch.Shape(b.IDs)
	if err != nil {
		return nil, fmt.Errorf("prefill: ids: %w", err)
	}
	if len(sh) != 2 {
		return nil, fmt.Errorf("prefill: ids shape %v, want (B, T)", sh)
	}
	B, T := sh[0], sh[1]
	past := int64(b.Cache.Len())
	n := PrefillChunk(B, past+T, int64(m.Config().NumAttentionHeads))
	var last *torch.Tensor
	for t0 := int64(0); t0 < T; t0 += n {
		k := min(n, T-t0)
		c := s.Child()
		part := model.Batch{IDs: c.Narrow(b.IDs, 1, t0, k), Cache: b.Cache}
		if b.Positions != nil {
			part.Positions = c.Narrow(b.Positions, 1, t0, k)
		}
		if b.Mask != nil {
			part.Mask = c.Narrow(b.Mask, 1, 0, past+t0+k) // (B, Tpast + keys so far)
		}
		h, err := m.Hidden(c, part) // (B, k, C)
		if err == nil && t0+k == T {
			last = c.MoveTo(s, c.Contiguous(c.Narrow(h, 1, k-1, 1))) // (B, 1, C)
			err = c.Err()
		}
		c.Close()
		if err != nil {
			return nil, fmt.Errorf("prefill positions %d..%d: %w", t0, t0+k-1, err)
		}
	}
	return last, nil
}
