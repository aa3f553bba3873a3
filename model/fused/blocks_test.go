package fused

import (
	"testing"

	"github.com/evolm/evolm/model/torch"
)

// TestKeepBlocks: inside KeepBlocks a freed large block serves the next
// request that fits it; a new block first frees cached ones so that live
// and cached bytes stay within the peak of live bytes; small blocks are not
// cached; the last KeepBlocks call frees every cached block; a reused
// block holds what is written to it.
func TestKeepBlocks(t *testing.T) {
	const mib = 1 << 20
	floats := func(bytes int64) int64 { return bytes / 4 }
	check := func(what string) BlockStats {
		st := Blocks()
		if st.Live+st.Cached > st.Peak {
			t.Errorf("%s: live %d + cached %d bytes > peak %d", what, st.Live, st.Cached, st.Peak)
		}
		return st
	}
	err := KeepBlocks(func() error {
		s := torch.NewScope()
		defer s.Close()
		a := s.Zeros([]int64{floats(8 * mib)}, torch.Float32, torch.CPU)
		torch.Drop(s.Keep(a))
		st := check("after freeing 8 MiB")
		if st.Cached < 8*mib {
			t.Errorf("cached %d bytes after freeing an 8 MiB tensor, want it kept", st.Cached)
		}
		// 7.5 MiB fits the 8 MiB block (an eighth wasted at most).
		b := s.Full([]int64{floats(15 * mib / 2)}, 3, torch.Float32, torch.CPU)
		if n := Blocks().Hits - st.Hits; n != 1 {
			t.Errorf("%d cache hits for a 7.5 MiB tensor after an 8 MiB one was freed, want 1", n)
		}
		sum, err := torch.Float64s(s.Sum(b))
		if err != nil {
			return err
		}
		if want := 3 * float64(floats(15*mib/2)); sum[0] != want {
			t.Errorf("sum over a reused block %v, want %v", sum[0], want)
		}
		torch.Drop(s.Keep(b))
		// 16 MiB fits nothing cached: the 8 MiB block goes first, since
		// keeping it would take live + cached past the peak.
		st = check("before 16 MiB")
		c := s.Zeros([]int64{floats(16 * mib)}, torch.Float32, torch.CPU)
		st2 := check("with 16 MiB live")
		if st2.Misses-st.Misses != 1 || st2.Cached != 0 {
			t.Errorf("a 16 MiB tensor: %d misses, %d bytes left cached; want 1 and 0", st2.Misses-st.Misses, st2.Cached)
		}
		torch.Drop(s.Keep(c))
		// Small blocks are not cached.
		before := Blocks().Cached
		torch.Drop(s.Keep(s.Zeros([]int64{1000}, torch.Float32, torch.CPU)))
		if Blocks().Cached != before {
			t.Errorf("a 4 kB tensor was cached")
		}
		return s.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if st := Blocks(); st.Cached != 0 || st.Live != 0 {
		t.Errorf("after KeepBlocks: %d bytes cached and %d live, want 0 and 0", st.Cached, st.Live)
	}
}
