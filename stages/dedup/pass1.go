package dedup

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"slices"
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

// pass1Run is one run of pass 1: a reader streams the prompts in order,
// workers normalize, hash, shingle and sign them, and a writer appends the
// spill records in row order. tokens bounds the batches in flight.
type pass1Run struct {
	files  []string
	sp     *spill
	p      Params
	res    *Result
	mh     *MinHasher
	jobs   chan *p1batch
	done   chan *p1batch
	tokens chan struct{}
}

func pass1(ctx context.Context, files []string, sp *spill, p Params, res *Result) error {
	r := &pass1Run{files: files, sp: sp, p: p, res: res, mh: NewMinHasher(p.Bands, p.BandRows, p.Seed),
		jobs: make(chan *p1batch, p.Workers), done: make(chan *p1batch, p.Workers), tokens: make(chan struct{}, 2*p.Workers+2)}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		defer close(r.jobs)
		return r.read(gctx)
	})
	var wg sync.WaitGroup
	for range p.Workers {
		wg.Add(1)
		g.Go(func() error {
			defer wg.Done()
			return r.work(gctx)
		})
	}
	go func() { wg.Wait(); close(r.done) }()
	g.Go(r.write)
	return g.Wait()
}

// read streams the prompts, file by file, in order, as batches.
func (r *pass1Run) read(ctx context.Context) error {
	var row uint64
	var seq int64
	buf := make([]datasets.TuluRow, r.p.BatchRows)
	for _, file := range r.files {
		n, err := r.readFile(ctx, file, buf, &row, &seq)
		if err != nil {
			return err
		}
		r.res.FileRows = append(r.res.FileRows, n)
	}
	if row == 0 {
		return fmt.Errorf("input %v: %w", r.files, datasets.ErrEmptyInput)
	}
	return nil
}

// readFile sends the batches of one file, numbering rows from *row and
// batches from *seq; it returns the file's row count. A prompt with no
// visible character is an error naming the file, row and id.
func (r *pass1Run) readFile(ctx context.Context, file string, buf []datasets.TuluRow, row *uint64, seq *int64) (int64, error) {
	rd, err := datasets.Open([]string{file}, datasets.Options{PromptsOnly: !r.p.FullRows, BatchSize: r.p.BatchRows})
	if err != nil {
		return 0, err
	}
	defer func() {
		if rd != nil {
			rd.Close() // an error path; the error returned says why
		}
	}()
	var n64 int64
	for {
		n, err := rd.Read(buf)
		if n > 0 {
			if *row+uint64(n) > math.MaxUint32 {
				return 0, fmt.Errorf("input %s: more than %d rows in all", file, uint64(math.MaxUint32))
			}
			b := &p1batch{seq: *seq, first: uint32(*row), prompts: make([]string, n)}
			for i := range n {
				if !Visible(buf[i].Prompt) {
					return 0, fmt.Errorf("input %s row %d (id %q) column \"prompt\": %w", file, n64+int64(i), buf[i].ID, ErrBlankPrompt)
				}
				b.prompts[i] = buf[i].Prompt
				buf[i] = datasets.TuluRow{}
			}
			*seq++
			*row += uint64(n)
			n64 += int64(n)
			if !trySend(ctx, r.tokens, struct{}{}) || !trySend(ctx, r.jobs, b) {
				return 0, ctx.Err()
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, err
		}
	}
	err = rd.Close()
	rd = nil
	return n64, err
}

// trySend sends v on ch unless ctx is done first; it reports whether it sent.
func trySend[T any](ctx context.Context, ch chan<- T, v T) bool {
	select {
	case ch <- v:
		return true
	case <-ctx.Done():
		return false
	}
}

// work normalizes, hashes, shingles and signs the prompts of each batch.
func (r *pass1Run) work(ctx context.Context) error {
	p := r.p
	sig := make([]uint64, p.Bands*p.BandRows)
	var words []string
	var wh, sh []uint64
	for b := range r.jobs {
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
			r.mh.Signature(sh, sig)
			r.mh.BandKeys(sig, b.keys[i*p.Bands:(i+1)*p.Bands])
			b.hasSig[i] = true
			s32 := make([]uint32, len(sh))
			for k, x := range sh {
				s32[k] = uint32(x)
			}
			slices.Sort(s32)
			b.sh[i] = slices.Compact(s32)
		}
		b.prompts = nil
		if !trySend(ctx, r.done, b) {
			return ctx.Err()
		}
	}
	return nil
}

// write appends the spill records of the batches in row order.
func (r *pass1Run) write() error {
	pending := map[int64]*p1batch{}
	var next int64
	var rec [exactRecSize]byte
	for b := range r.done {
		pending[b.seq] = b
		for {
			b, ok := pending[next]
			if !ok {
				break
			}
			delete(pending, next)
			next++
			if err := writeBatch(r.sp, r.p, b, rec[:]); err != nil {
				return err
			}
			r.res.RowsIn += int64(len(b.hashes))
			if r.p.Progress != nil {
				r.p.Progress(int64(len(b.hashes)))
			}
			<-r.tokens
		}
	}
	return nil
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
