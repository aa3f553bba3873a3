package tokenizer

import (
	"container/heap"
	"sync"
)

// merge is one entry of the ranked merge table.
type merge struct {
	rank int32 // position in the file: lower merges first
	id   int32 // id of the merged token
}

// bpe holds the byte-level BPE model.
type bpe struct {
	vocab        map[string]int32
	merges       map[[2]int32]merge
	byteIDs      [256]int32 // id of each single-byte token
	ignoreMerges bool
	cache        *wordCache
}

// symbol is a node of the doubly linked list a word is merged in.
type symbol struct {
	id         int32
	prev, next int32 // -1 at the ends
	size       int32 // 0 once merged into its left neighbour
}

type candidate struct {
	pos  int32 // left symbol
	rank int32
	id   int32
	// the pair as queued, to detect stale entries
	left, right int32
}

type candidates []candidate

func (c candidates) Len() int { return len(c) }
func (c candidates) Less(i, j int) bool {
	if c[i].rank != c[j].rank {
		return c[i].rank < c[j].rank
	}
	return c[i].pos < c[j].pos
}
func (c candidates) Swap(i, j int) { c[i], c[j] = c[j], c[i] }
func (c *candidates) Push(x any)   { *c = append(*c, x.(candidate)) }
func (c *candidates) Pop() any {
	old := *c
	x := old[len(old)-1]
	*c = old[:len(old)-1]
	return x
}

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
	n := len(word)
	syms := make([]symbol, n)
	for i := 0; i < n; i++ {
		syms[i] = symbol{id: m.byteIDs[word[i]], prev: int32(i - 1), next: int32(i + 1), size: 1}
	}
	syms[n-1].next = -1
	var q candidates
	for i := 0; i+1 < n; i++ {
		if mg, ok := m.merges[[2]int32{syms[i].id, syms[i+1].id}]; ok {
			q = append(q, candidate{int32(i), mg.rank, mg.id, syms[i].id, syms[i+1].id})
		}
	}
	heap.Init(&q)
	for q.Len() > 0 {
		c := heap.Pop(&q).(candidate)
		l := &syms[c.pos]
		if l.size == 0 || l.next < 0 || l.id != c.left || syms[l.next].id != c.right {
			continue // stale: one side changed since it was queued
		}
		r := &syms[l.next]
		l.id = c.id
		l.size += r.size
		r.size = 0
		l.next = r.next
		if l.next >= 0 {
			syms[l.next].prev = c.pos
		}
		if l.prev >= 0 {
			p := syms[l.prev]
			if mg, ok := m.merges[[2]int32{p.id, l.id}]; ok {
				heap.Push(&q, candidate{l.prev, mg.rank, mg.id, p.id, l.id})
			}
		}
		if l.next >= 0 {
			nx := syms[l.next]
			if mg, ok := m.merges[[2]int32{l.id, nx.id}]; ok {
				heap.Push(&q, candidate{c.pos, mg.rank, mg.id, l.id, nx.id})
			}
		}
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
