package sample

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
)

// Params are one row's decoding settings. The filters apply in vLLM's order:
// temperature, then min-p, then top-k, then top-p on the distribution the
// others left.
type Params struct {
	Temperature float64 // 0: greedy (argmax of the raw, or Adjusted, logits); otherwise logits are divided by it
	TopK        int     // keep the TopK most likely tokens; 0 (or ≥ vocab size): off
	TopP        float64 // keep the smallest most-likely set with mass ≥ TopP (always ≥ 1 token); 0 or 1: off
	// MinP drops the tokens whose probability (after temperature) is below
	// MinP times the most likely one's; 0: off. Ignored by greedy rows.
	MinP float64
}

// Greedy reports whether the row decodes by argmax.
func (p Params) Greedy() bool { return p.Temperature == 0 }

// Validate checks the ranges.
func (p Params) Validate() error {
	switch {
	case p.Temperature < 0 || math.IsNaN(p.Temperature) || math.IsInf(p.Temperature, 0):
		return fmt.Errorf("sample: temperature = %v, want a finite value >= 0", p.Temperature)
	case p.TopK < 0:
		return fmt.Errorf("sample: top_k = %d, want >= 0", p.TopK)
	case p.TopP < 0 || p.TopP > 1 || math.IsNaN(p.TopP):
		return fmt.Errorf("sample: top_p = %v, want in [0, 1]", p.TopP)
	case p.MinP < 0 || p.MinP > 1 || math.IsNaN(p.MinP):
		return fmt.Errorf("sample: min_p = %v, want in [0, 1]", p.MinP)
	}
	return nil
}

func (p Params) topK(vocab int64) bool { return p.TopK > 0 && int64(p.TopK) < vocab }
func (p Params) topP() bool            { return p.TopP > 0 && p.TopP < 1 }
func (p Params) minP() bool            { return p.MinP > 0 && !p.Greedy() }

// RNG is one request's random stream: ChaCha8 (math/rand/v2) keyed by the
// request seed. Sample draws exactly one uniform from it per sampled (non
// greedy) token, so a row's tokens depend only on its seed, its params and
// its own logits — never on which other rows share the batch.
type RNG struct{ r *rand.Rand }

// NewRNG returns the stream for seed. The 32-byte ChaCha8 key is the seed in
// little-endian followed by a fixed tag, so the mapping is stable across runs
// and Go versions (ChaCha8's output is specified).
func NewRNG(seed uint64) *RNG {
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:8], seed)
	copy(key[8:], "evolm/model/sample/rng/v1")
	return &RNG{r: rand.New(rand.NewChaCha8(key))}
}

// Float64 returns the next uniform in [0, 1).
func (g *RNG) Float64() float64 { return g.r.Float64() }
