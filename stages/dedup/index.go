package dedup

import (
	"bufio"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/evolm/evolm/datasets"
)

// Params are the dedup parameters. DefaultParams has datatrove's defaults.
type Params struct {
	Shingle     ShingleOptions
	Bands       int     // LSH bands (datatrove: 14)
	BandRows    int     // hashes per band (datatrove: 8)
	Seed        uint64  // permutation seed
	Verify      bool    // check LSH candidate pairs by exact Jaccard
	Threshold   float64 // minimum Jaccard of a verified pair
	MaxVerify   int     // earlier bucket members a row is checked against (≥ 1)
	Partitions  int     // spill partitions per pass-2 table; 0: auto (see AutoPartitions)
	Workers     int     // signature workers; 0: GOMAXPROCS
	BatchRows   int     // rows per pass-1 batch
	FullRows    bool    // pass 1 also decodes and validates chosen/rejected
	KeepWorkDir bool    // leave spill files in place (debugging)
	Progress    func(n int64)
}

// DefaultParams returns datatrove's MinHash defaults (5-gram word shingles,
// 14 bands × 8 hashes) with Jaccard verification at 0.7.
func DefaultParams() Params {
	return Params{
		Shingle:   ShingleOptions{NGram: 5, StripPunct: true, StripDiacritics: true},
		Bands:     14,
		BandRows:  8,
		Seed:      1,
		Verify:    true,
		Threshold: 0.7,
		MaxVerify: 8,
		BatchRows: 1024,
	}
}

// Bounds of the size parameters: every one sizes an allocation (per-row
// signatures of bands × band_rows hashes, per-bucket verification, worker
// buffers), so an absurd value must be an error, not an out-of-memory crash.
const (
	MaxNGram     = 64      // words per shingle
	MaxHashes    = 4096    // bands, band_rows and their product (datatrove: 112)
	MaxMaxVerify = 1 << 16 // earlier bucket members verified per row
	MaxWorkers   = 1024    // signature workers
)

// Validate checks the parameters, naming the bad one.
func (p Params) Validate() error {
	switch {
	case p.Shingle.NGram < 1 || p.Shingle.NGram > MaxNGram:
		return fmt.Errorf("ngram: %d, want in [1, %d]", p.Shingle.NGram, MaxNGram)
	case p.Bands < 1 || p.Bands > MaxHashes:
		return fmt.Errorf("bands: %d, want in [1, %d]", p.Bands, MaxHashes)
	case p.BandRows < 1 || p.BandRows > MaxHashes:
		return fmt.Errorf("band_rows: %d, want in [1, %d]", p.BandRows, MaxHashes)
	case p.Bands*p.BandRows > MaxHashes:
		return fmt.Errorf("bands: %d bands × %d band_rows = %d MinHash permutations, want at most %d (datatrove: 14 × 8 = 112)",
			p.Bands, p.BandRows, p.Bands*p.BandRows, MaxHashes)
	case p.Threshold < 0 || p.Threshold > 1:
		return fmt.Errorf("threshold: %g, want in [0, 1]", p.Threshold)
	case p.MaxVerify < 1 || p.MaxVerify > MaxMaxVerify:
		return fmt.Errorf("max_verify: %d, want in [1, %d]", p.MaxVerify, MaxMaxVerify)
	case p.Workers < 0 || p.Workers > MaxWorkers:
		return fmt.Errorf("workers: %d, want in [0, %d]", p.Workers, MaxWorkers)
	case p.Partitions < 0 || p.Partitions > maxPartitions:
		return fmt.Errorf("partitions: %d, want in [0, %d]", p.Partitions, maxPartitions)
	}
	return nil
}

// Stats summarize a dedup.
type Stats struct {
	RowsIn         int64 // input rows
	ExactDups      int64 // rows removed because an earlier row has the same normalized text
	NearDups       int64 // other removed rows: MinHash-LSH near duplicates
	Clusters       int64 // connected components of two or more rows
	RowsOut        int64 // RowsIn − ExactDups − NearDups
	CandidatePairs int64 // LSH bucket pairs examined (before the union-find shortcut)
	RejectedPairs  int64 // candidate pairs whose Jaccard fell below the threshold
}

// Result is what passes 1 and 2 decide: for every row, whether it is kept and,
// if not, which row keeps its cluster. It holds only the rows that belong to a
// cluster (memory O(duplicates), never O(rows)).
//
// Keeper rule: a cluster keeps its earliest row in input order (files in the
// order given, rows in file order). A removed row's similarity is the word
// shingle Jaccard between it and its keeper (1 for exact duplicates).
type Result struct {
	Stats
	FileRows []int64 // rows of each input file, in order

	// During pass 2: the union-find forest (root = smallest row) and, for
	// each row whose normalized text appeared earlier, that earlier row.
	parent  map[uint32]uint32
	exactOf map[uint32]uint32
	// Frozen at the end of pass 2, read-only afterwards (safe for
	// concurrent readers): removed row → keeper, and the keepers.
	keeper  map[uint32]uint32
	keepers map[uint32]struct{}
	removed []uint32 // sorted keys of keeper
	sim     map[uint32]float64
	ids     map[uint32]ContentHash // content hash of every row in a cluster
}

// ContentHash returns the content hash of a row in a cluster (ok false for
// rows in no cluster: their hash is not kept).
func (r *Result) ContentHash(row uint32) (ContentHash, bool) {
	h, ok := r.ids[row]
	return h, ok
}

// Keeper returns the row that keeps row's cluster; row itself when it is kept.
func (r *Result) Keeper(row uint32) uint32 {
	if k, ok := r.keeper[row]; ok {
		return k
	}
	return row
}

// Removed reports whether row is dropped.
func (r *Result) Removed(row uint32) bool { _, ok := r.keeper[row]; return ok }

// RemovedIn counts the removed rows in [lo, hi).
func (r *Result) RemovedIn(lo, hi uint32) int64 {
	i, _ := slices.BinarySearch(r.removed, lo)
	j, _ := slices.BinarySearch(r.removed, hi)
	return int64(j - i)
}

// InCluster reports whether row belongs to a cluster of two or more rows.
func (r *Result) InCluster(row uint32) bool {
	_, k := r.keepers[row]
	return k || r.Removed(row)
}

// Member is one removed row of a cluster.
type Member struct {
	Row        uint32
	Exact      bool    // same normalized text as the keeper
	Similarity float64 // shingle Jaccard to the keeper
}

// Cluster is a connected component of duplicates.
type Cluster struct {
	ID      int64  // 0, 1, … in order of Keeper
	Keeper  uint32 // row kept
	Removed []Member
}

// ClusterList returns every cluster ordered by keeper row, members by row.
func (r *Result) ClusterList() []Cluster {
	keepers := make([]uint32, 0, len(r.keepers))
	for k := range r.keepers {
		keepers = append(keepers, k)
	}
	slices.Sort(keepers)
	out := make([]Cluster, len(keepers))
	idx := make(map[uint32]int, len(keepers))
	for i, k := range keepers {
		out[i] = Cluster{ID: int64(i), Keeper: k}
		idx[k] = i
	}
	removed := make([]uint32, 0, len(r.keeper))
	for x := range r.keeper {
		removed = append(removed, x)
	}
	slices.Sort(removed)
	for _, x := range removed {
		k := r.keeper[x]
		first, isDup := r.exactOf[x]
		c := &out[idx[k]]
		c.Removed = append(c.Removed, Member{Row: x, Exact: isDup && first == k, Similarity: r.sim[x]})
	}
	return out
}

// union joins the components of a and b; the root is the smaller row.
func union(parent map[uint32]uint32, a, b uint32) bool {
	ra, rb := find(parent, a), find(parent, b)
	if ra == rb {
		return false
	}
	if rb < ra {
		ra, rb = rb, ra
	}
	parent[ra] = ra
	parent[rb] = ra
	return true
}

func find(parent map[uint32]uint32, x uint32) uint32 {
	p, ok := parent[x]
	if !ok {
		return x
	}
	root := x
	for p != root {
		root = p
		p = parent[root]
	}
	for x != root { // path compression
		next := parent[x]
		parent[x] = root
		x = next
	}
	return root
}

const (
	maxPartitions = 4096
	// partitionBudget is the spill bytes auto partitioning aims to load at
	// once in pass 2.
	partitionBudget = 16 << 20
)

// AutoPartitions picks the number of spill partitions for an input of about
// rows rows so that one band partition (14 × 12 bytes a row by default)
// holds about 16 MB: 16 for small inputs, up to 4096 (about 400M rows).
func AutoPartitions(rows int64, bands int) int {
	need := rows * int64(bands) * bandRecSize / partitionBudget
	p := 16
	for int64(p) < need && p < maxPartitions {
		p *= 2
	}
	return p
}

// estimateRows guesses the input's rows: Parquet footers' row counts, and
// a JSONL file's size / 256.
func estimateRows(files []string) int64 {
	var n int64
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			continue
		}
		if rows, err := datasets.CountParquetRows(f); err == nil {
			n += rows
		} else {
			n += st.Size() / 256
		}
	}
	return n
}

// ErrBlankPrompt is wrapped by the pass-1 error for a prompt that is empty
// or only whitespace: such a row has nothing to deduplicate or train on, and
// dropping it silently would hide a broken input. The error names the file,
// row and id.
var ErrBlankPrompt = errors.New("prompt is empty or only whitespace: remove the row from the input")

// Spill record sizes.
const (
	exactRecSize = 8 + 8 + 4 // hash hi, hash lo, row
	bandRecSize  = 8 + 4     // band key, row
)

// Analyze runs passes 1 and 2 over files (Tulu-layout Parquet or JSONL, read
// in order; each must hold rows and pass the loader's checks) using workDir
// for spill files, which it removes when done.
//
// Pass 1 streams the prompts once. Workers normalize each prompt, hash it,
// cut it into word shingles and compute its MinHash signature; a single
// writer appends, in row order, the (content hash, row) and (band key, row)
// records to Partitions hash-partitioned spill files each, and the row's
// sorted shingle hashes (truncated to 32 bits) to a shingle file indexed by
// row. No prompt text outlives its batch.
//
// Pass 2 loads one partition at a time: exact partitions first (rows with
// equal content hashes are unioned, and all but the first marked exact
// duplicates), then band partitions (rows sharing a band key are candidate
// pairs; exact duplicates are skipped since their first row stands for them;
// pairs already in one component are skipped; with Verify, a pair is unioned
// only if the Jaccard of the two shingle sets read back from disk reaches
// Threshold, each row being tried against at most MaxVerify earlier members
// of its bucket). Finally every removed row's similarity to its keeper is
// computed from the shingle file.
func Analyze(ctx context.Context, files []string, workDir string, p Params) (*Result, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if p.Workers <= 0 {
		p.Workers = runtime.GOMAXPROCS(0)
	}
	if p.BatchRows <= 0 {
		p.BatchRows = 1024
	}
	if p.Partitions == 0 {
		p.Partitions = AutoPartitions(estimateRows(files), p.Bands)
	}
	if err := os.MkdirAll(workDir, 0o755); err != nil {
		return nil, fmt.Errorf("dedup work dir: %w", err)
	}
	sp, err := newSpill(workDir, p.Partitions)
	if err != nil {
		return nil, err
	}
	defer func() {
		sp.close()
		if !p.KeepWorkDir {
			sp.remove()
		}
	}()
	res := &Result{
		parent: map[uint32]uint32{}, exactOf: map[uint32]uint32{},
		keeper: map[uint32]uint32{}, keepers: map[uint32]struct{}{}, sim: map[uint32]float64{},
		ids: map[uint32]ContentHash{},
	}
	if err := pass1(ctx, files, sp, p, res); err != nil {
		return nil, err
	}
	if err := sp.finishWrites(); err != nil {
		return nil, err
	}
	if err := pass2(ctx, sp, p, res); err != nil {
		return nil, err
	}
	return res, nil
}

// --- spill files -------------------------------------------------------------

type spill struct {
	dir             string
	parts           int
	exact, band     []*os.File
	exactW, bandW   []*bufio.Writer
	shData, shIdx   *os.File
	shDataW, shIdxW *bufio.Writer
	shOff           uint64
}

func newSpill(dir string, parts int) (*spill, error) {
	sp := &spill{dir: dir, parts: parts}
	create := func(name string) (*os.File, error) {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_TRUNC|os.O_RDWR, 0o644)
		if err != nil {
			return nil, fmt.Errorf("dedup spill: %w", err)
		}
		return f, nil
	}
	bufSize := 32 << 10
	for i := range parts {
		f, err := create(fmt.Sprintf("exact-%04d.bin", i))
		if err != nil {
			sp.close()
			return nil, err
		}
		sp.exact = append(sp.exact, f)
		sp.exactW = append(sp.exactW, bufio.NewWriterSize(f, bufSize))
		f, err = create(fmt.Sprintf("band-%04d.bin", i))
		if err != nil {
			sp.close()
			return nil, err
		}
		sp.band = append(sp.band, f)
		sp.bandW = append(sp.bandW, bufio.NewWriterSize(f, bufSize))
	}
	var err error
	if sp.shData, err = create("shingles.bin"); err != nil {
		sp.close()
		return nil, err
	}
	if sp.shIdx, err = create("shingles.idx"); err != nil {
		sp.close()
		return nil, err
	}
	sp.shDataW = bufio.NewWriterSize(sp.shData, 1<<20)
	sp.shIdxW = bufio.NewWriterSize(sp.shIdx, 64<<10)
	return sp, nil
}

func (sp *spill) part(key uint64) int {
	return int((key >> 32) * uint64(sp.parts) >> 32)
}

func (sp *spill) finishWrites() error {
	var errs []error
	for _, w := range append(slices.Clone(sp.exactW), sp.bandW...) {
		errs = append(errs, w.Flush())
	}
	errs = append(errs, sp.shDataW.Flush(), sp.shIdxW.Flush())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("dedup spill: %w", err)
	}
	return nil
}

func (sp *spill) close() {
	for _, f := range append(slices.Clone(sp.exact), sp.band...) {
		f.Close()
	}
	if sp.shData != nil {
		sp.shData.Close()
	}
	if sp.shIdx != nil {
		sp.shIdx.Close()
	}
}

func (sp *spill) remove() {
	for i := range sp.parts {
		os.Remove(filepath.Join(sp.dir, fmt.Sprintf("exact-%04d.bin", i)))
		os.Remove(filepath.Join(sp.dir, fmt.Sprintf("band-%04d.bin", i)))
	}
	os.Remove(filepath.Join(sp.dir, "shingles.bin"))
	os.Remove(filepath.Join(sp.dir, "shingles.idx"))
	os.Remove(sp.dir) // only if empty
}

// shingles reads row's shingle set back into buf.
func (sp *spill) shingles(row uint32, buf []uint32) ([]uint32, error) {
	var ib [16]byte
	if _, err := sp.shIdx.ReadAt(ib[:], int64(row)*8); err != nil {
		// The last row's end offset is the data file size.
		if _, err2 := sp.shIdx.ReadAt(ib[:8], int64(row)*8); err2 != nil {
			return nil, fmt.Errorf("dedup spill: shingle index row %d: %w", row, err2)
		}
		st, err3 := sp.shData.Stat()
		if err3 != nil {
			return nil, fmt.Errorf("dedup spill: %w", err3)
		}
		binary.LittleEndian.PutUint64(ib[8:], uint64(st.Size()))
	}
	start, end := binary.LittleEndian.Uint64(ib[:8]), binary.LittleEndian.Uint64(ib[8:])
	n := int(end-start) / 4
	raw := make([]byte, end-start)
	if _, err := sp.shData.ReadAt(raw, int64(start)); err != nil {
		return nil, fmt.Errorf("dedup spill: shingles of row %d: %w", row, err)
	}
	buf = slices.Grow(buf[:0], n)
	for i := range n {
		buf = append(buf, binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return buf, nil
}

// --- pass 1 ------------------------------------------------------------------

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

// --- pass 2 ------------------------------------------------------------------

type exactRec struct {
	hi, lo uint64
	row    uint32
}

type bandRec struct {
	key uint64
	row uint32
}

func readAll(f *os.File) ([]byte, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	buf := make([]byte, st.Size())
	if _, err := f.ReadAt(buf, 0); err != nil && err != io.EOF {
		return nil, err
	}
	return buf, nil
}

func pass2(ctx context.Context, sp *spill, p Params, res *Result) error {
	var recs []exactRec
	for i, f := range sp.exact {
		if err := ctx.Err(); err != nil {
			return err
		}
		raw, err := readAll(f)
		if err != nil {
			return fmt.Errorf("dedup spill exact-%04d: %w", i, err)
		}
		recs = recs[:0]
		for o := 0; o+exactRecSize <= len(raw); o += exactRecSize {
			recs = append(recs, exactRec{binary.LittleEndian.Uint64(raw[o:]), binary.LittleEndian.Uint64(raw[o+8:]), binary.LittleEndian.Uint32(raw[o+16:])})
		}
		slices.SortFunc(recs, func(a, b exactRec) int {
			return cmp.Or(cmp.Compare(a.hi, b.hi), cmp.Compare(a.lo, b.lo), cmp.Compare(a.row, b.row))
		})
		for j := 1; j < len(recs); j++ {
			if recs[j].hi == recs[j-1].hi && recs[j].lo == recs[j-1].lo {
				first := recs[j-1].row
				if f, ok := res.exactOf[first]; ok {
					first = f
				}
				res.exactOf[recs[j].row] = first
				union(res.parent, first, recs[j].row)
			}
		}
	}
	recs = nil

	var brs []bandRec
	var group []uint32
	var bufA, bufB []uint32
	cache := map[uint32][]uint32{}
	load := func(row uint32) ([]uint32, error) {
		if s, ok := cache[row]; ok {
			return s, nil
		}
		s, err := sp.shingles(row, nil)
		if err != nil {
			return nil, err
		}
		cache[row] = s
		return s, nil
	}
	for i, f := range sp.band {
		if err := ctx.Err(); err != nil {
			return err
		}
		raw, err := readAll(f)
		if err != nil {
			return fmt.Errorf("dedup spill band-%04d: %w", i, err)
		}
		brs = brs[:0]
		for o := 0; o+bandRecSize <= len(raw); o += bandRecSize {
			row := binary.LittleEndian.Uint32(raw[o+8:])
			if _, dup := res.exactOf[row]; dup {
				continue // its first exact copy stands for it
			}
			brs = append(brs, bandRec{binary.LittleEndian.Uint64(raw[o:]), row})
		}
		raw = nil
		slices.SortFunc(brs, func(a, b bandRec) int {
			return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(a.row, b.row))
		})
		for j := 0; j < len(brs); {
			k := j
			for k < len(brs) && brs[k].key == brs[j].key {
				k++
			}
			if k-j > 1 {
				group = group[:0]
				for _, br := range brs[j:k] {
					group = append(group, br.row)
				}
				if err := resolveBucket(p, res, group, load); err != nil {
					return err
				}
			}
			j = k
		}
		clear(cache)
	}

	// Similarity of every removed row to its keeper.
	for row := range res.parent {
		k := find(res.parent, row)
		if k == row {
			continue
		}
		if first, ok := res.exactOf[row]; ok && first == k {
			res.sim[row] = 1
			res.ExactDups++
			continue
		}
		if _, ok := res.exactOf[row]; ok {
			res.ExactDups++
		} else {
			res.NearDups++
		}
		a, err := sp.shingles(row, bufA[:0])
		if err != nil {
			return err
		}
		bufA = a
		b, err := sp.shingles(k, bufB[:0])
		if err != nil {
			return err
		}
		bufB = b
		res.sim[row] = Jaccard(a, b)
	}
	for row := range res.parent {
		if k := find(res.parent, row); k == row {
			res.keepers[row] = struct{}{}
		} else {
			res.keeper[row] = k
		}
	}
	res.Clusters = int64(len(res.keepers))
	res.parent = nil
	for row := range res.keeper {
		res.removed = append(res.removed, row)
	}
	slices.Sort(res.removed)
	// Content hashes of the rows in clusters, for the report.
	for i, f := range sp.exact {
		raw, err := readAll(f)
		if err != nil {
			return fmt.Errorf("dedup spill exact-%04d: %w", i, err)
		}
		for o := 0; o+exactRecSize <= len(raw); o += exactRecSize {
			row := binary.LittleEndian.Uint32(raw[o+16:])
			if res.InCluster(row) {
				var h ContentHash
				binary.BigEndian.PutUint64(h[:8], binary.LittleEndian.Uint64(raw[o:]))
				binary.BigEndian.PutUint64(h[8:], binary.LittleEndian.Uint64(raw[o+8:]))
				res.ids[row] = h
			}
		}
	}
	res.RowsOut = res.RowsIn - res.ExactDups - res.NearDups
	return nil
}

// resolveBucket unions the rows of one LSH bucket (sorted, distinct texts).
func resolveBucket(p Params, res *Result, group []uint32, load func(uint32) ([]uint32, error)) error {
	for j := 1; j < len(group); j++ {
		b := group[j]
		for i := 0; i < j && i < p.MaxVerify; i++ {
			a := group[i]
			res.CandidatePairs++
			if find(res.parent, a) == find(res.parent, b) {
				break
			}
			if !p.Verify {
				union(res.parent, a, b)
				break
			}
			sa, err := load(a)
			if err != nil {
				return err
			}
			sb, err := load(b)
			if err != nil {
				return err
			}
			if Jaccard(sa, sb) >= p.Threshold {
				union(res.parent, a, b)
				break
			}
			res.RejectedPairs++
		}
	}
	return nil
}
