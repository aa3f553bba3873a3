package dedup

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"slices"
)

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

// eachSpillFile reads the spill files of kind (exact, band) in order, each
// whole, and passes its bytes to f, whose error ends it; so does ctx's.
func eachSpillFile(ctx context.Context, kind string, files []*os.File, f func(raw []byte) error) error {
	for i, file := range files {
		if err := ctx.Err(); err != nil {
			return err
		}
		raw, err := readAll(file)
		if err != nil {
			return fmt.Errorf("dedup spill %s-%04d: %w", kind, i, err)
		}
		if err := f(raw); err != nil {
			return err
		}
	}
	return nil
}

// pass2 finds the duplicates from the spill files: exact copies by content
// hash, then near copies by LSH bucket (verified by Jaccard when asked),
// then each removed row's similarity to its keeper, the clusters and their
// content hashes.
func pass2(ctx context.Context, sp *spill, p Params, res *Result) error {
	if err := exactDups(ctx, sp, res); err != nil {
		return err
	}
	if err := nearDups(ctx, sp, p, res); err != nil {
		return err
	}
	if err := similarities(sp, res); err != nil {
		return err
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
	if err := clusterHashes(sp, res); err != nil {
		return err
	}
	res.RowsOut = res.RowsIn - res.ExactDups - res.NearDups
	return nil
}

// exactDups unions the rows of equal content hash, each exact partition
// sorted in memory, and records each copy's first row (res.exactOf).
func exactDups(ctx context.Context, sp *spill, res *Result) error {
	var recs []exactRec
	return eachSpillFile(ctx, "exact", sp.exact, func(raw []byte) error {
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
		return nil
	})
}

// nearDups resolves every LSH bucket of two or more distinct texts, band
// partition by band partition, with the partition's shingles cached.
func nearDups(ctx context.Context, sp *spill, p Params, res *Result) error {
	var brs []bandRec
	var group []uint32
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
	return eachSpillFile(ctx, "band", sp.band, func(raw []byte) error {
		brs = brs[:0]
		for o := 0; o+bandRecSize <= len(raw); o += bandRecSize {
			row := binary.LittleEndian.Uint32(raw[o+8:])
			if _, dup := res.exactOf[row]; dup {
				continue // its first exact copy stands for it
			}
			brs = append(brs, bandRec{binary.LittleEndian.Uint64(raw[o:]), row})
		}
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
		return nil
	})
}

// similarities records the Jaccard similarity of every removed row to its
// keeper (1 for an exact copy of it) and counts exact and near duplicates.
func similarities(sp *spill, res *Result) error {
	var bufA, bufB []uint32
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
	return nil
}

// clusterHashes reads back the content hashes of the rows in clusters, for
// the report.
func clusterHashes(sp *spill, res *Result) error {
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
