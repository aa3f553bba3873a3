package tokenizer

import "sync"

// merge is one entry of the ranked merge table.
type merge struct {
	rank int32 // position in the file: lower merges first
	id   int32 // id of the merged token
}

// bpe holds the byte-level BPE model.
type bpe struct {
	vocab        map[string]int32
	merges       *pairTable
	byteIDs      [256]int32 // id of each single-byte token
	ignoreMerges bool
	cache        *wordCache
}

// pairTable maps a pair of token ids to its merge: an open-addressing hash
// table, about twice as fast as a Go map on the hot path of encoding.
type pairTable struct {
	keys  []uint64 // pairKey, 0 for an empty slot
	vals  []merge
	shift uint
	n     int
}

func pairKey(a, b int32) uint64 { return (uint64(uint32(a))<<32 | uint64(uint32(b))) + 1 }

func newPairTable(n int) *pairTable {
	size, shift := 1, uint(64)
	for size < 2*n+2 {
		size <<= 1
		shift--
	}
	return &pairTable{keys: make([]uint64, size), vals: make([]merge, size), shift: shift}
}

func (t *pairTable) slot(k uint64) uint64 { return (k * 0x9E3779B97F4A7C15) >> t.shift }

// put inserts a merge unless the pair already has one (the first, lowest
// rank, wins as in HF).
func (t *pairTable) put(a, b int32, m merge) {
	k := pairKey(a, b)
	mask := uint64(len(t.keys) - 1)
	for i := t.slot(k); ; i = (i + 1) & mask {
		switch t.keys[i] {
		case 0:
			t.keys[i], t.vals[i] = k, m
			t.n++
			return
		case k:
			return
		}
	}
}

func (t *pairTable) get(a, b int32) (merge, bool) {
	k := pairKey(a, b)
	mask := uint64(len(t.keys) - 1)
	for i := t.slot(k); ; i = (i + 1) & mask {
		switch t.keys[i] {
		case k:
			return t.vals[i], true
		case 0:
			return merge{}, false
		}
	}
}

// noMerge is the rank of a pair without a merge.
const noMerge = int32(1<<31 - 1)

// encodeWord appends the ids of one pre-tokenized piece (raw bytes) to dst.
// Merges apply lowest rank first, leftmost first among equal ranks, exactly
// as HF's BPE::merge_word does.
func (m *bpe) encodeWord(dst []int, word string) []int {
	if ids, ok := m.cache.get(word); ok {
		return append(dst, ids...)
	}
	ids := m.mergeWord(word)
	m.cache.put(word, ids)
	return append(dst, ids...)
}

func (m *bpe) mergeWord(word string) []int {
	if m.ignoreMerges {
		var b []byte
		for i := 0; i < len(word); i++ {
			b = append(b, byteStr[word[i]]...)
		}
		if id, ok := m.vocab[string(b)]; ok {
			return []int{int(id)}
		}
	}
	if len(word) > longPiece {
		return m.mergeLong(word)
	}
	return m.mergeShort(word)
}

// mergeShort is mergeWord for short pieces.
func (m *bpe) mergeShort(word string) []int {
	n := len(word)
	// syms holds the current symbols; rank[i] and next[i] describe the pair
	// (syms[i], syms[i+1]). Each step merges the lowest-ranked, leftmost
	// pair: a linear scan, which beats a heap for the short pieces that
	// dominate text, and only the two pairs around a merge are looked up again.
	var symBuf, rankBuf, nextBuf [48]int32
	syms, rank, next := symBuf[:0], rankBuf[:0], nextBuf[:0]
	if n > len(symBuf) {
		syms, rank, next = make([]int32, 0, n), make([]int32, 0, n), make([]int32, 0, n)
	}
	for i := 0; i < n; i++ {
		syms = append(syms, m.byteIDs[word[i]])
	}
	pair := func(i int) (int32, int32) {
		if mg, ok := m.merges.get(syms[i], syms[i+1]); ok {
			return mg.rank, mg.id
		}
		return noMerge, 0
	}
	for i := 0; i+1 < n; i++ {
		r, id := pair(i)
		rank, next = append(rank, r), append(next, id)
	}
	for len(syms) > 1 {
		best := 0
		for i := 1; i < len(rank); i++ {
			if rank[i] < rank[best] {
				best = i
			}
		}
		if rank[best] == noMerge {
			break
		}
		syms[best] = next[best]
		syms = append(syms[:best+1], syms[best+2:]...)
		rank = append(rank[:best], rank[best+1:]...)
		next = append(next[:best], next[best+1:]...)
		if best > 0 {
			rank[best-1], next[best-1] = pair(best - 1)
		}
		if best < len(rank) {
			rank[best], next[best] = pair(best)
		}
	}
	ids := make([]int, len(syms))
	for i, s := range syms {
		ids[i] = int(s)
	}
	return ids
}

// longPiece is the piece length (bytes) above which mergeLong's heap, with
// O(n log n) work instead of the linear scan's O(n²), takes over: a 100 kB run
// of one letter is a single piece.
const longPiece = 128

// candidate is a queued merge of the pair starting at symbol pos.
type candidate struct {
	pos, rank, id int32
	left, right   int32 // the pair as queued, to detect stale entries
}

func (c candidate) less(d candidate) bool {
	return c.rank < d.rank || c.rank == d.rank && c.pos < d.pos
}

// candHeap is a binary min-heap of candidates (typed, so no boxing).
type candHeap []candidate

func (h *candHeap) push(c candidate) {
	*h = append(*h, c)
	q := *h
	for i := len(q) - 1; i > 0; {
		p := (i - 1) / 2
		if !q[i].less(q[p]) {
			break
		}
		q[i], q[p] = q[p], q[i]
		i = p
	}
}

func (h *candHeap) pop() candidate {
	q := *h
	top := q[0]
	last := len(q) - 1
	q[0] = q[last]
	q = q[:last]
	for i := 0; ; {
		l, small := 2*i+1, i
		if l < len(q) && q[l].less(q[small]) {
			small = l
		}
		if r := l + 1; r < len(q) && q[r].less(q[small]) {
			small = r
		}
		if small == i {
			break
		}
		q[i], q[small] = q[small], q[i]
		i = small
	}
	*h = q
	return top
}

// mergeLong is mergeWord for long pieces: symbols in a linked list and
// candidate merges in a heap ordered by (rank, position), as HF does.
func (m *bpe) mergeLong(word string) []int {
	type symbol struct {
		id         int32
		prev, next int32 // -1 at the ends
		alive      bool
	}
	n := len(word)
	syms := make([]symbol, n)
	for i := range syms {
		syms[i] = symbol{id: m.byteIDs[word[i]], prev: int32(i - 1), next: int32(i + 1), alive: true}
	}
	syms[n-1].next = -1
	var q candHeap
	queue := func(pos int32) {
		l := syms[pos]
		if l.next < 0 {
			return
		}
		r := syms[l.next]
		if mg, ok := m.merges.get(l.id, r.id); ok {
			q.push(candidate{pos, mg.rank, mg.id, l.id, r.id})
		}
	}
	for i := int32(0); i+1 < int32(n); i++ {
		queue(i)
	}
	for len(q) > 0 {
		c := q.pop()
		l := &syms[c.pos]
		if !l.alive || l.next < 0 || l.id != c.left || syms[l.next].id != c.right {
			continue // stale: a side changed since it was queued
		}
		r := &syms[l.next]
		l.id = c.id
		r.alive = false
		l.next = r.next
		if l.next >= 0 {
			syms[l.next].prev = c.pos
		}
		if l.prev >= 0 {
			queue(l.prev)
		}
		queue(c.pos)
	}
	var ids []int
	for i := int32(0); i >= 0; i = syms[i].next {
		ids = append(ids, int(syms[i].id))
	}
	return ids
}

// wordCache is a bounded, concurrency-safe map from piece to ids, sharded to
// keep lock contention low under EncodeBatch. A full shard is emptied
// wholesale rather than tracked for recency: pieces follow a Zipf law, so
// the frequent ones are back within a few calls.
type wordCache struct {
	shards [cacheShards]cacheShard
	limit  int // entries per shard
}

const cacheShards = 32

type cacheShard struct {
	mu sync.RWMutex
	m  map[string][]int
}

func newWordCache(capacity int) *wordCache {
	c := &wordCache{limit: max(capacity/cacheShards, 1)}
	for i := range c.shards {
		c.shards[i].m = make(map[string][]int)
	}
	return c
}

func (c *wordCache) shard(s string) *cacheShard {
	h := uint32(2166136261) // FNV-1a
	for i := 0; i < len(s); i++ {
		h = (h ^ uint32(s[i])) * 16777619
	}
	return &c.shards[h%cacheShards]
}

func (c *wordCache) get(s string) ([]int, bool) {
	if c == nil {
		return nil, false
	}
	sh := c.shard(s)
	sh.mu.RLock()
	ids, ok := sh.m[s]
	sh.mu.RUnlock()
	return ids, ok
}

func (c *wordCache) put(s string, ids []int) {
	if c == nil || len(s) > maxCachedPiece {
		return
	}
	sh := c.shard(s)
	sh.mu.Lock()
	if len(sh.m) >= c.limit {
		clear(sh.m)
	}
	sh.m[s] = ids
	sh.mu.Unlock()
}

// maxCachedPiece: longer pieces (whitespace runs, long words) are rare and
// would only evict useful entries.
const maxCachedPiece = 256

// len is the number of cached pieces.
func (c *wordCache) len() int {
	n := 0
	for i := range c.shards {
		c.shards[i].mu.RLock()
		n += len(c.shards[i].m)
		c.shards[i].mu.RUnlock()
	}
	return n
}
