package dedup

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/evolm/evolm/datasets"
)

type p1batch struct {
	seq     int64
	first   uint32 // row index of prompts[0]
	prompts []string
	hashes  []ContentHash
	keys    []uint64 // Bands per row; rows without shingles have none (hasSig false)
	hasSig  []bool
	sh      [][]uint32
}

func pass1(ctx context.Context, files []string, sp *spill, p Params, res *Result) error {
	mh := NewMinHasher(p.Bands, p.BandRows, p.Seed)
	g, gctx := errgroup.WithContext(ctx)
	jobs := make(chan *p1batch, p.Workers)
	done := make(chan *p1batch, p.Workers)
	tokens := make(chan struct{}, 2*p.Workers+2) // bounds batches in flight

	// Reader: streams prompts, file by file, in order.
	g.Go(func() error {
		defer close(jobs)
		var row uint64
		var seq int64
		buf := make([]datasets.TuluRow, p.BatchRows)
		for _, file := range files {
			r, err := datasets.Open([]string{file}, datasets.Options{PromptsOnly: !p.FullRows, BatchSize: p.BatchRows})
			if err != nil {
				return err
			}
			var n64 int64
			for {
				n, err := r.Read(buf)
				if n > 0 {
					if row+uint64(n) > math.MaxUint32 {
						r.Close()
						return fmt.Errorf("input %s: more than %d rows in all", file, uint64(math.MaxUint32))
					}
					b := &p1batch{seq: seq, first: uint32(row), prompts: make([]string, n)}
					for i := range n {
						if strings.TrimSpace(buf[i].Prompt) == "" {
							r.Close()
							return fmt.Errorf("input %s row %d (id %q) column \"prompt\": %w", file, n64+int64(i), buf[i].ID, ErrBlankPrompt)
						}
						b.prompts[i] = buf[i].Prompt
						buf[i] = datasets.TuluRow{}
					}
					seq++
					row += uint64(n)
					n64 += int64(n)
					select {
					case tokens <- struct{}{}:
					case <-gctx.Done():
						r.Close()
						return gctx.Err()
					}
					select {
					case jobs <- b:
					case <-gctx.Done():
						r.Close()
						return gctx.Err()
					}
				}
				if err == io.EOF {
					break
				}
				if err != nil {
					r.Close()
					return err
				}
			}
			if err := r.Close(); err != nil {
				return err
			}
			res.FileRows = append(res.FileRows, n64)
		}
		if row == 0 {
			return fmt.Errorf("input %v: %w", files, datasets.ErrEmptyInput)
		}
		return nil
	})

	// Workers: normalize, hash, shingle, sign.
	var wg sync.WaitGroup
	for range p.Workers {
		wg.Add(1)
		g.Go(func() error {
			defer wg.Done()
			sig := make([]uint64, p.Bands*p.BandRows)
			var words []string
			var wh, sh []uint64
			for b := range jobs {
				n := len(b.prompts)
				b.hashes = make([]ContentHash, n)
				b.keys = make([]uint64, n*p.Bands)
				b.hasSig = make([]bool, n)
				b.sh = make([][]uint32, n)
				for i, prompt := range b.prompts {
					nt := Normalize(prompt)
					b.hashes[i] = HashNormalized(nt)
					words = p.Shingle.Words(nt, words[:0])
					sh, wh = Shingles(words, p.Shingle.NGram, wh, sh)
					if len(sh) == 0 {
						continue
					}
					mh.Signature(sh, sig)
					mh.BandKeys(sig, b.keys[i*p.Bands:(i+1)*p.Bands])
					b.hasSig[i] = true
					s32 := make([]uint32, len(sh))
					for k, x := range sh {
						s32[k] = uint32(x)
					}
					slices.Sort(s32)
					b.sh[i] = slices.Compact(s32)
				}
				b.prompts = nil
				select {
				case done <- b:
				case <-gctx.Done():
					return gctx.Err()
				}
			}
			return nil
		})
	}
	go func() { wg.Wait(); close(done) }()

	// Writer: appends spill records in row order.
	g.Go(func() error {
		pending := map[int64]*p1batch{}
		var next int64
		var rec [exactRecSize]byte
		for b := range done {
			pending[b.seq] = b
			for {
				b, ok := pending[next]
				if !ok {
					break
				}
				delete(pending, next)
				next++
				if err := writeBatch(sp, p, b, rec[:]); err != nil {
					return err
				}
				res.RowsIn += int64(len(b.hashes))
				if p.Progress != nil {
					p.Progress(int64(len(b.hashes)))
				}
				<-tokens
			}
		}
		return nil
	})
	return g.Wait()
}

func writeBatch(sp *spill, p Params, b *p1batch, rec []byte) error {
	for i, h := range b.hashes {
		row := b.first + uint32(i)
		binary.LittleEndian.PutUint64(rec[0:], h.hi())
		binary.LittleEndian.PutUint64(rec[8:], h.lo())
		binary.LittleEndian.PutUint32(rec[16:], row)
		if _, err := sp.exactW[sp.part(h.hi())].Write(rec[:exactRecSize]); err != nil {
			return fmt.Errorf("dedup spill: %w", err)
		}
		if b.hasSig[i] {
			for _, k := range b.keys[i*p.Bands : (i+1)*p.Bands] {
				binary.LittleEndian.PutUint64(rec[0:], k)
				binary.LittleEndian.PutUint32(rec[8:], row)
				if _, err := sp.bandW[sp.part(k)].Write(rec[:bandRecSize]); err != nil {
					return fmt.Errorf("dedup spill: %w", err)
				}
			}
		}
		binary.LittleEndian.PutUint64(rec[0:], sp.shOff)
		if _, err := sp.shIdxW.Write(rec[:8]); err != nil {
			return fmt.Errorf("dedup spill: %w", err)
		}
		for _, x := range b.sh[i] {
			binary.LittleEndian.PutUint32(rec[0:], x)
			if _, err := sp.shDataW.Write(rec[:4]); err != nil {
				return fmt.Errorf("dedup spill: %w", err)
			}
		}
		sp.shOff += 4 * uint64(len(b.sh[i]))
	}
	return nil
}
