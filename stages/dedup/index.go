package dedup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"

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

// ErrBlankPrompt is wrapped by the pass-1 error for a prompt with no
// visible character (see Visible: empty, or only whitespace, format
// characters and combining marks): such a row has nothing to deduplicate or
// train on, and dropping it silently would hide a broken input. The error
// names the file, row and id.
var ErrBlankPrompt = errors.New("prompt has no visible character (empty, or only whitespace, zero-width or bidi format characters, combining marks): remove the row from the input")

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
