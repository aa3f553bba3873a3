package dedup

import (
	"math/bits"
	"slices"
)

// mersenne61 is the prime 2^61 − 1 the permutations reduce modulo, as in
// datatrove.
const mersenne61 = (1 << 61) - 1

// MinHasher computes MinHash signatures of shingle sets and the LSH band keys
// of those signatures. Permutation i maps a 64-bit shingle hash x to
// ((a_i·x + b_i) mod 2^64) mod (2^61 − 1) — datatrove's formula (its numpy
// uint64 product wraps the same way) — with a_i, b_i drawn from a SplitMix64
// stream seeded with Seed. It is safe for concurrent use.
type MinHasher struct {
	Bands, Rows int // bands × rows-per-band = number of permutations
	a, b        []uint64
}

// NewMinHasher draws bands·rows permutations from seed.
func NewMinHasher(bands, rows int, seed uint64) *MinHasher {
	n := bands * rows
	m := &MinHasher{Bands: bands, Rows: rows, a: make([]uint64, n), b: make([]uint64, n)}
	s := seed
	for i := range n {
		m.a[i] = 1 + splitmix(&s)%(mersenne61-1) // in [1, p)
		m.b[i] = splitmix(&s) % mersenne61       // in [0, p)
	}
	return m
}

func splitmix(s *uint64) uint64 {
	*s += 0x9e3779b97f4a7c15
	z := *s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func mod61(v uint64) uint64 {
	v = (v & mersenne61) + (v >> 61)
	if v >= mersenne61 {
		v -= mersenne61
	}
	return v
}

// Signature writes the signature of shingles (64-bit shingle hashes) into sig,
// which must have Bands·Rows entries. shingles must not be empty.
func (m *MinHasher) Signature(shingles []uint64, sig []uint64) {
	for i := range sig {
		sig[i] = mersenne61
	}
	a, b := m.a[:len(sig)], m.b[:len(sig)]
	for _, x := range shingles {
		for i := range sig {
			v := mod61(a[i]*x + b[i])
			if v < sig[i] {
				sig[i] = v
			}
		}
	}
}

// BandKeys writes one 64-bit key per band into keys (Bands entries): a hash
// of the band's index and its Rows signature values. Two documents share a
// bucket in band j exactly when (up to 64-bit collisions) their signatures
// agree on all of band j's values.
func (m *MinHasher) BandKeys(sig []uint64, keys []uint64) {
	for j := range m.Bands {
		h := mix64(uint64(j) + 0x51ed27a5c0ffee)
		for _, v := range sig[j*m.Rows : (j+1)*m.Rows] {
			h = mix64(h ^ v + 0x9e3779b97f4a7c15)
		}
		keys[j] = h
	}
}

// Shingles returns the sorted, distinct 64-bit hashes of the n-word shingles
// of words, appended to dst[:0]. A text of fewer than n words has no
// shingles (as in datatrove): it can only be an exact duplicate.
func Shingles(words []string, n int, wordHashes []uint64, dst []uint64) ([]uint64, []uint64) {
	dst = dst[:0]
	if len(words) < n || n <= 0 {
		return dst, wordHashes
	}
	wordHashes = wordHashes[:0]
	for _, w := range words {
		wordHashes = append(wordHashes, fnv64a(w))
	}
	for i := 0; i+n <= len(wordHashes); i++ {
		h := uint64(n)
		for _, w := range wordHashes[i : i+n] {
			h = mix64(bits.RotateLeft64(h, 23) ^ w)
		}
		dst = append(dst, h)
	}
	slices.Sort(dst)
	return slices.Compact(dst), wordHashes
}

// Jaccard returns |a ∩ b| / |a ∪ b| of two sorted, distinct sets; 1 when both
// are empty.
func Jaccard[T uint32 | uint64](a, b []T) float64 {
	if len(a) == 0 && len(b) == 0 {
		return 1
	}
	i, j, inter := 0, 0, 0
	for i < len(a) && j < len(b) {
		switch {
		case a[i] == b[j]:
			inter++
			i++
			j++
		case a[i] < b[j]:
			i++
		default:
			j++
		}
	}
	return float64(inter) / float64(len(a)+len(b)-inter)
}

// fnv64a is FNV-1a over the bytes of s (hash/fnv without the allocation).
func fnv64a(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}
