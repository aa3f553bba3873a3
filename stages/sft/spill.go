package sft

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/serving/backend"
)

// The tokenized examples live on disk, not in memory, so that the stage's
// memory does not grow with its data: the input is streamed once, each
// example tokenized and truncated as it comes and appended to a spill file
// under the stage's work directory, and each step reads its examples back
// by offset (pread). What stays in memory per example is the epoch's order,
// 4 bytes.
//
// <name>.tokens holds every example's tokens, each a little-endian uint32:
// the token id, with the top bit set when the token is a target.
// <name>.offsets holds n+1 little-endian uint64s: example i is tokens
// [offsets[i], offsets[i+1]).
type spill struct {
	tokens, offsets *os.File
	n               int
	sum             uint64 // FNV-1a of the tokens file: ranks compare it
}

const (
	targetBit = 1 << 31
	// maxExamples is what a uint32 order can index.
	maxExamples = math.MaxUint32
)

// tokenizeFunc renders and tokenizes one example (backend.SFTTrainer's
// TokenizeSFT).
type tokenizeFunc func(backend.SFTExample) (backend.SFTSample, error)

// writeSpill streams the examples of paths through tokenize into
// dir/name.tokens and dir/name.offsets (replacing earlier ones), each
// truncated to maxLength tokens from the right, and returns them open for
// reading. Errors name the example's file and line or row.
func writeSpill(ctx context.Context, dir, name string, paths []string, opts pipeline.ReadOptions, tokenize tokenizeFunc, maxLength int) (_ *spill, err error) {
	sp := &spill{}
	defer func() {
		if err != nil {
			sp.close()
		}
	}()
	if sp.tokens, err = os.Create(filepath.Join(dir, name+".tokens")); err != nil {
		return nil, err
	}
	if sp.offsets, err = os.Create(filepath.Join(dir, name+".offsets")); err != nil {
		return nil, err
	}
	tw, ow := bufio.NewWriterSize(sp.tokens, 1<<20), bufio.NewWriterSize(sp.offsets, 1<<16)
	h := fnv.New64a()
	var buf []byte
	off := uint64(0)
	if _, err := ow.Write(make([]byte, 8)); err != nil { // offsets[0] = 0
		return nil, fmt.Errorf("spill %s: %w", sp.offsets.Name(), err)
	}
	err = eachExample(ctx, paths, opts, func(where string, ex backend.SFTExample) error {
		if sp.n == maxExamples {
			return fmt.Errorf("%s: more than %d examples", where, maxExamples)
		}
		s, err := tokenize(ex)
		if err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		if len(s.TokenIDs) > maxLength {
			s.TokenIDs, s.Targets = s.TokenIDs[:maxLength], s.Targets[:maxLength]
		}
		if buf, err = encodeSample(buf[:0], s); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		if _, err := tw.Write(buf); err != nil {
			return fmt.Errorf("spill %s: %w", sp.tokens.Name(), err)
		}
		_, _ = h.Write(buf)
		off += uint64(len(s.TokenIDs))
		if _, err := ow.Write(binary.LittleEndian.AppendUint64(buf[:0], off)); err != nil {
			return fmt.Errorf("spill %s: %w", sp.offsets.Name(), err)
		}
		sp.n++
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, w := range []*bufio.Writer{tw, ow} {
		if err := w.Flush(); err != nil {
			return nil, fmt.Errorf("spill in %s: %w", dir, err)
		}
	}
	sp.sum = h.Sum64()
	return sp, nil
}

// encodeSample appends s's tokens to b as the spill stores them.
func encodeSample(b []byte, s backend.SFTSample) ([]byte, error) {
	if len(s.Targets) != len(s.TokenIDs) {
		return nil, fmt.Errorf("%d targets for %d tokens", len(s.Targets), len(s.TokenIDs))
	}
	for i, id := range s.TokenIDs {
		if id < 0 || id >= targetBit {
			return nil, fmt.Errorf("token %d: id %d outside [0, 2^31)", i, id)
		}
		v := uint32(id)
		if s.Targets[i] {
			v |= targetBit
		}
		b = binary.LittleEndian.AppendUint32(b, v)
	}
	return b, nil
}

// sample reads example i back.
func (sp *spill) sample(i int) (backend.SFTSample, error) {
	var ob [16]byte
	if _, err := sp.offsets.ReadAt(ob[:], int64(i)*8); err != nil {
		return backend.SFTSample{}, fmt.Errorf("spill %s: example %d: %w", sp.offsets.Name(), i, err)
	}
	a, b := binary.LittleEndian.Uint64(ob[:8]), binary.LittleEndian.Uint64(ob[8:])
	if b < a {
		return backend.SFTSample{}, fmt.Errorf("spill %s: example %d: offsets %d > %d", sp.offsets.Name(), i, a, b)
	}
	buf := make([]byte, 4*(b-a))
	if _, err := sp.tokens.ReadAt(buf, int64(4*a)); err != nil {
		return backend.SFTSample{}, fmt.Errorf("spill %s: example %d: %w", sp.tokens.Name(), i, err)
	}
	s := backend.SFTSample{TokenIDs: make([]int, b-a), Targets: make([]bool, b-a)}
	for k := range s.TokenIDs {
		v := binary.LittleEndian.Uint32(buf[4*k:])
		s.TokenIDs[k], s.Targets[k] = int(v&^targetBit), v&targetBit != 0
	}
	return s, nil
}

// close closes and removes the spill files.
func (sp *spill) close() {
	for _, f := range []*os.File{sp.tokens, sp.offsets} {
		if f != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}
}

// orders maps a position of the epochs' orders laid end to end to its
// example, holding one epoch's order (4 bytes an example) at a time.
type orders struct {
	c     *Config
	n     int
	epoch int // of idx; -1: none yet
	idx   []uint32
}

func (c *Config) orders(n int) *orders { return &orders{c: c, n: n, epoch: -1} }

// at returns the example at position k: example order(epoch)[k mod n] of
// epoch k / n, where an epoch's order is file order, or a permutation
// seeded by (seed, epoch).
func (o *orders) at(k int) int {
	if e := k / o.n; e != o.epoch {
		if o.idx == nil {
			o.idx = make([]uint32, o.n)
		}
		for i := range o.idx {
			o.idx[i] = uint32(i)
		}
		if o.c.Shuffle {
			r := rand.New(rand.NewPCG(uint64(o.c.Seed), uint64(e)))
			r.Shuffle(o.n, func(i, j int) { o.idx[i], o.idx[j] = o.idx[j], o.idx[i] })
		}
		o.epoch = e
	}
	return int(o.idx[k%o.n])
}

// batch returns the example indices of step s: the next batch_size examples
// of the epochs' orders laid end to end (a step may span two epochs), so
// that a step's data is a function of the step alone.
func (o *orders) batch(s int) []int {
	out := make([]int, 0, o.c.BatchSize)
	for k := s * o.c.BatchSize; k < (s+1)*o.c.BatchSize; k++ {
		out = append(out, o.at(k))
	}
	return out
}
