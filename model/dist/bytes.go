package dist

import (
	"encoding/binary"
	"fmt"

	"github.com/evolm/evolm/model/torch"
)

// AllGatherBytes gathers a byte string from every rank: out[k] is rank k's
// data. It is two c10d all-gathers (the lengths as int64, then the strings
// padded to the longest as uint8), on dev (the CPU for Gloo, the rank's GPU
// for NCCL). The data plane uses it to gather rows, not for tensors.
func (g *Group) AllGatherBytes(data []byte, dev torch.Device) ([][]byte, error) {
	w := g.WorldSize()
	s := torch.NewScope()
	defer s.Close()
	n := s.To(s.FromInt64([]int64{int64(len(data))}, 1), dev, torch.Int64)
	ns := s.To(s.Zeros([]int64{int64(w)}, torch.Int64, torch.CPU), dev, torch.Int64)
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("dist: all-gather bytes: %w", err)
	}
	if err := g.AllGather(ns, n); err != nil {
		return nil, fmt.Errorf("dist: all-gather bytes (lengths): %w", err)
	}
	lens, err := torch.Int64s(ns)
	if err != nil {
		return nil, fmt.Errorf("dist: all-gather bytes: %w", err)
	}
	longest := int64(0)
	for _, l := range lens {
		longest = max(longest, l)
	}
	out := make([][]byte, w)
	if longest == 0 {
		for k := range out {
			out[k] = []byte{}
		}
		return out, nil
	}
	buf := make([]byte, longest)
	copy(buf, data)
	in := s.To(s.FromBytes(buf, []int64{longest}, torch.Uint8), dev, torch.Uint8)
	all := s.To(s.Zeros([]int64{int64(w) * longest}, torch.Uint8, torch.CPU), dev, torch.Uint8)
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("dist: all-gather bytes: %w", err)
	}
	if err := g.AllGather(all, in); err != nil {
		return nil, fmt.Errorf("dist: all-gather bytes: %w", err)
	}
	raw, err := torch.Bytes(all)
	if err != nil {
		return nil, fmt.Errorf("dist: all-gather bytes: %w", err)
	}
	for k := range out {
		out[k] = raw[int64(k)*longest : int64(k)*longest+lens[k]]
	}
	return out, nil
}

// AllGatherInt64 gathers one int64 from every rank (a step number, a count).
func (g *Group) AllGatherInt64(v int64, dev torch.Device) ([]int64, error) {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(v))
	all, err := g.AllGatherBytes(b[:], dev)
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(all))
	for k, x := range all {
		if len(x) != 8 {
			return nil, fmt.Errorf("dist: all-gather int64: rank %d sent %d bytes", k, len(x))
		}
		out[k] = int64(binary.LittleEndian.Uint64(x))
	}
	return out, nil
}
