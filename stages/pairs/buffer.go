package pairs

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
)

// Buffer is the temporal-contrast replay buffer: the newest Cap entries,
// oldest first. Not safe for concurrent use.
type Buffer struct {
	Cap     int
	entries []schemas.ReplayEntry
}

// NewBuffer returns an empty buffer holding at most capacity entries.
func NewBuffer(capacity int) (*Buffer, error) {
	if capacity <= 0 {
		return nil, fmt.Errorf("replay buffer: capacity %d, want > 0", capacity)
	}
	return &Buffer{Cap: capacity}, nil
}

// Len is the number of entries.
func (b *Buffer) Len() int { return len(b.entries) }

// Entries returns the entries, oldest first (do not modify).
func (b *Buffer) Entries() []schemas.ReplayEntry { return b.entries }

// Add appends entries, evicting the oldest beyond Cap.
func (b *Buffer) Add(es ...schemas.ReplayEntry) {
	b.entries = append(b.entries, es...)
	if over := len(b.entries) - b.Cap; over > 0 {
		b.entries = append(b.entries[:0:0], b.entries[over:]...)
	}
}

// Window is an inclusive range of ages (current step − entry step).
type Window struct{ MinAge, MaxAge int64 }

// Pick draws uniformly among entries whose age at step lies in w. When none
// does, the window widens by widen on both sides (never below age 1) until
// one does; ok is false only when no entry is at least one step old. It
// returns the entry and the window that found it.
func (b *Buffer) Pick(step int64, w Window, widen int64, rng *rand.Rand) (e schemas.ReplayEntry, used Window, ok bool) {
	if widen <= 0 {
		widen = 1
	}
	oldest := int64(-1)
	for _, x := range b.entries {
		if age := step - x.Step; age >= 1 && age > oldest {
			oldest = age
		}
	}
	if oldest < 0 {
		return e, w, false
	}
	for {
		var in []int
		for i, x := range b.entries {
			if age := step - x.Step; age >= max(w.MinAge, 1) && age <= w.MaxAge {
				in = append(in, i)
			}
		}
		if len(in) > 0 {
			return b.entries[in[rng.IntN(len(in))]], w, true
		}
		// Terminates: the window grows until it covers [1, oldest].
		w = Window{MinAge: max(w.MinAge-widen, 1), MaxAge: w.MaxAge + widen}
	}
}

// Save writes the buffer to path atomically as one Parquet shard.
func (b *Buffer) Save(path string, mem memory.Allocator) error {
	w, err := pipeline.CreateShard(path, schemas.Replay.Schema(), pipeline.WriteOptions{Mem: mem})
	if err != nil {
		return fmt.Errorf("replay buffer: %w", err)
	}
	rec := schemas.Replay.Build(mem, b.entries)
	defer rec.Release()
	if err := w.Write(rec); err != nil {
		_ = w.Abort()
		return fmt.Errorf("replay buffer: %w", err)
	}
	if _, err := w.Commit(); err != nil {
		return fmt.Errorf("replay buffer: %w", err)
	}
	return nil
}

// LoadBuffer reads a buffer saved by Save.
func LoadBuffer(ctx context.Context, path string, capacity int, mem memory.Allocator) (*Buffer, error) {
	b, err := NewBuffer(capacity)
	if err != nil {
		return nil, err
	}
	for rec, err := range pipeline.ReadShard(ctx, path, pipeline.ReadOptions{Schema: schemas.Replay.Schema(), Mem: mem}) {
		if err != nil {
			return nil, fmt.Errorf("replay buffer %s: %w", path, err)
		}
		rows, err := schemas.Replay.Read(rec)
		if err != nil {
			return nil, fmt.Errorf("replay buffer %s: %w", path, err)
		}
		b.Add(rows...)
	}
	return b, nil
}
