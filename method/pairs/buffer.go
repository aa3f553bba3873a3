package pairs

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"

	"github.com/evolm/evolm/internal/choice"
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

// Window is an inclusive range of ages (see AgeClock).
type Window struct{ MinAge, MaxAge int64 }

// Fallback says what the temporal strategy does when no buffered answer's age
// lies in the window.
type Fallback string

const (
	// FallbackOfficial is the official EVOLM code's four stages, tried in
	// order until one yields an entry: (1) when even the youngest entry is at
	// least min_age old, drop the max age; (2) take entries at least
	// max(1, min_age/2) old; (3) when some entry is older than 0, take the
	// older half of the buffer by step (its oldest entry when it holds one);
	// (4) take any entry.
	FallbackOfficial Fallback = "official"
	// FallbackWiden is evolm's earlier rule: widen the window by WidenStep on
	// both sides (never below age 1) until it holds an entry at least one
	// step old.
	FallbackWiden Fallback = "widen"
)

// ParseFallback validates a config value.
func ParseFallback(s string) (Fallback, error) {
	return choice.Parse("temporal fallback", s, FallbackOfficial, FallbackWiden)
}

// Picked is the entry a temporal pair uses as a−, with its age and the
// fallback stage that found it (schemas.TemporalWindow when the window held
// it).
type Picked struct {
	Entry schemas.ReplayEntry
	Age   int64
	Stage string
	// Window is the window that held the entry (FallbackWiden's widened one).
	Window Window
}

// Pick draws uniformly among the entries whose age (age(entry)) lies in w,
// falling back as fb says when none does. ok is false when the buffer is
// empty (and, for FallbackWiden, when no entry is at least one step old).
func (b *Buffer) Pick(age func(schemas.ReplayEntry) int64, w Window, fb Fallback, widen int64, rng *rand.Rand) (p Picked, ok bool) {
	if len(b.entries) == 0 {
		return p, false
	}
	ages := make([]int64, len(b.entries))
	for i, e := range b.entries {
		ages[i] = age(e)
	}
	pick := func(idx []int, stage string, used Window) (Picked, bool) {
		i := idx[rng.IntN(len(idx))]
		return Picked{Entry: b.entries[i], Age: ages[i], Stage: stage, Window: used}, true
	}
	where := func(keep func(age int64) bool) []int {
		var idx []int
		for i, a := range ages {
			if keep(a) {
				idx = append(idx, i)
			}
		}
		return idx
	}
	if fb == FallbackWiden {
		return b.pickWiden(ages, w, widen, pick, where)
	}
	if in := where(func(a int64) bool { return a >= w.MinAge && a <= w.MaxAge }); len(in) > 0 {
		return pick(in, schemas.TemporalWindow, w)
	}
	newest, oldest := ages[0], ages[0]
	for _, a := range ages {
		newest, oldest = min(newest, a), max(oldest, a)
	}
	// 1. Everything is too old: no max age.
	if newest >= w.MinAge {
		if in := where(func(a int64) bool { return a >= w.MinAge }); len(in) > 0 {
			return pick(in, schemas.TemporalRelaxedMaxAge, Window{MinAge: w.MinAge, MaxAge: math.MaxInt64})
		}
	}
	// 2. Half the minimum age, no max age.
	relaxed := max(1, w.MinAge/2)
	if in := where(func(a int64) bool { return a >= relaxed }); len(in) > 0 {
		return pick(in, schemas.TemporalRelaxedMinAge, Window{MinAge: relaxed, MaxAge: math.MaxInt64})
	}
	// 3. The older half of the buffer by step, for at least some gap.
	if oldest > 0 {
		idx := make([]int, len(b.entries))
		for i := range idx {
			idx[i] = i
		}
		sort.SliceStable(idx, func(x, y int) bool { return b.entries[idx[x]].Step < b.entries[idx[y]].Step })
		half := len(idx) / 2
		if half == 0 {
			half = 1
		}
		return pick(idx[:half], schemas.TemporalOldestHalf, Window{MinAge: math.MinInt64, MaxAge: math.MaxInt64})
	}
	// 4. Anything.
	all := where(func(int64) bool { return true })
	return pick(all, schemas.TemporalAnyExperience, Window{MinAge: math.MinInt64, MaxAge: math.MaxInt64})
}

// pickWiden is FallbackWiden: only entries at least one step old qualify.
func (b *Buffer) pickWiden(ages []int64, w Window, widen int64, pick func([]int, string, Window) (Picked, bool),
	where func(func(int64) bool) []int) (Picked, bool) {
	if widen <= 0 {
		widen = 1
	}
	oldest := int64(-1)
	for _, a := range ages {
		if a >= 1 && a > oldest {
			oldest = a
		}
	}
	if oldest < 0 {
		return Picked{}, false
	}
	stage := schemas.TemporalWindow
	for {
		if in := where(func(a int64) bool { return a >= max(w.MinAge, 1) && a <= w.MaxAge }); len(in) > 0 {
			return pick(in, stage, w)
		}
		// Terminates: the window grows until it covers [1, oldest].
		w = Window{MinAge: max(w.MinAge-widen, 1), MaxAge: w.MaxAge + widen}
		stage = schemas.TemporalWidened
	}
}

// Enum lists the fallbacks (a config key's allowed values).
func (Fallback) Enum() []string { return []string{string(FallbackOfficial), string(FallbackWiden)} }
