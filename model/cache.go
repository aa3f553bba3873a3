package model

import (
	"fmt"
	"slices"

	"github.com/evolm/evolm/model/fused"
	"github.com/evolm/evolm/model/torch"
)

// Cache is a key/value cache for incremental decoding. Each layer has key and
// value buffers (B, nkv, MaxLen, hs) allocated once; a forward pass writes its
// T new positions in place at [Len, Len+T) and attends over [0, Len+T), so
// decoding never reallocates. The cache owns its buffers until Close. Use it
// with grad mode off.
type Cache struct {
	k, v          []*torch.Tensor // per layer (B, nkv, MaxLen, hs)
	len           int
	batch, maxLen int
	cfg           *Config
}

// NewCache allocates a cache for m: batch rows of up to maxLen positions
// (prompt plus generated tokens), on m's device in m's dtype.
func NewCache(m CausalLM, batch, maxLen int) (*Cache, error) {
	cfg := m.Config()
	if batch <= 0 || maxLen <= 0 {
		return nil, fmt.Errorf("kv cache: batch %d and maxLen %d must be positive", batch, maxLen)
	}
	c := &Cache{batch: batch, maxLen: maxLen, cfg: cfg}
	s := torch.NewScope()
	defer s.Close()
	shape := []int64{int64(batch), int64(cfg.NumKeyValueHeads), int64(maxLen), int64(cfg.HeadDim)}
	for l := 0; l < cfg.NumHiddenLayers; l++ {
		c.k = append(c.k, s.Keep(s.Zeros(shape, m.DType(), m.Device())))
		c.v = append(c.v, s.Keep(s.Zeros(shape, m.DType(), m.Device())))
	}
	if err := s.Err(); err != nil {
		c.Close()
		return nil, fmt.Errorf("kv cache %v: %w", shape, err)
	}
	return c, nil
}

// Len is the number of positions filled.
func (c *Cache) Len() int { return c.len }

// MaxLen is the capacity in positions.
func (c *Cache) MaxLen() int { return c.maxLen }

// Batch is the number of rows.
func (c *Cache) Batch() int { return c.batch }

// Update writes layer's new keys and values k, v (B, nkv, T, hs) at positions
// [Len, Len+T) and returns views of [0, Len+T) owned by s. Architectures call
// it once per layer, then Advance(T) once.
func (c *Cache) Update(s *torch.Scope, layer int, k, v *torch.Tensor) (kAll, vAll *torch.Tensor) {
	sh, err := torch.Shape(k)
	if err != nil {
		s.Fail(err)
		return nil, nil
	}
	if len(sh) != 4 || sh[0] != int64(c.batch) {
		s.Failf("kv cache: keys of shape %v for a cache of batch %d", sh, c.batch)
		return nil, nil
	}
	T := sh[2]
	if int64(c.len)+T > int64(c.maxLen) {
		s.Failf("kv cache full: %d cached + %d new positions > capacity %d", c.len, T, c.maxLen)
		return nil, nil
	}
	s.Copy_(s.Narrow(c.k[layer], 2, int64(c.len), T), k)
	s.Copy_(s.Narrow(c.v[layer], 2, int64(c.len), T), v)
	return s.Narrow(c.k[layer], 2, 0, int64(c.len)+T), s.Narrow(c.v[layer], 2, 0, int64(c.len)+T)
}

// Advance marks t more positions as filled.
func (c *Cache) Advance(t int) { c.len += t }

// Truncate drops positions from n on (n ≤ Len), e.g. to reuse a shared
// prefix.
func (c *Cache) Truncate(n int) error {
	if n < 0 || n > c.len {
		return fmt.Errorf("kv cache: truncate to %d, have %d", n, c.len)
	}
	c.len = n
	return nil
}

// Select returns a new cache whose row i is row rows[i] of c, with the same
// Len and capacity: Select([0,0,1,1]) expands two prompts to two samples each
// after one shared prefill. c is unchanged.
func (c *Cache) Select(rows []int64) (*Cache, error) { return c.SelectTo(rows, c.maxLen) }

// SelectTo is Select into buffers of capacity maxLen (≥ Len): row i of the
// new cache holds row rows[i]'s filled positions [0, Len) of c. A prefix
// prefilled once into a cache of its own length can so be expanded for each
// later use at the capacity that use needs, and what the use computes does
// not depend on which cache the prefix came from. c is unchanged.
func (c *Cache) SelectTo(rows []int64, maxLen int) (*Cache, error) {
	if maxLen < c.len {
		return nil, fmt.Errorf("kv cache: select into capacity %d, have %d positions", maxLen, c.len)
	}
	for _, r := range rows {
		if r < 0 || r >= int64(c.batch) {
			return nil, fmt.Errorf("kv cache: row %d out of range [0, %d)", r, c.batch)
		}
	}
	out := &Cache{len: c.len, batch: len(rows), maxLen: maxLen, cfg: c.cfg}
	if len(c.k) == 0 {
		return out, nil
	}
	s := torch.NewScope()
	defer s.Close()
	bufs := fused.SelectRows(s, slices.Concat(c.k, c.v), rows, int64(c.len), int64(maxLen)) // every layer's keys, then values
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("kv cache select: %w", err)
	}
	for _, b := range bufs {
		s.Keep(b)
	}
	out.k, out.v = slices.Clip(bufs[:len(c.k)]), bufs[len(c.k):]
	return out, nil
}

// Close frees the buffers.
func (c *Cache) Close() {
	torch.Drop(c.k...)
	torch.Drop(c.v...)
	c.k, c.v = nil, nil
}

// Buffers returns the per-layer key and value buffers (B, nkv, MaxLen, hs),
// still owned by c, for a fused forward pass that writes them as Update
// does (model/fused); the caller checks the capacity and calls Advance.
func (c *Cache) Buffers() (k, v []*torch.Tensor) { return c.k, c.v }
