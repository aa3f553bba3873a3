package dedup

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"github.com/evolm/evolm/bench/dedup/corpus"
	"github.com/evolm/evolm/datasets"
)

// writeCorpus writes n rows of the benchmark corpus (prompts only in the
// conversations' user turns) and returns the file and the prompt bytes.
func writeCorpus(t testing.TB, dir string, n int) (string, int64) {
	t.Helper()
	path := filepath.Join(dir, "corpus.parquet")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := datasets.NewParquetWriter(f, 4096) // readers buffer a row group
	var text int64
	batch := make([]datasets.TuluRow, 0, 1024)
	for i := range n {
		r := corpus.Default.Row(i).TuluRow
		text += int64(len(r.Prompt))
		batch = append(batch, r)
		if len(batch) == cap(batch) || i == n-1 {
			if err := w.Write(batch); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path, text
}

// peakLiveHeap runs f while a sampler forces a full GC every few
// milliseconds and reads the heap it marked live, and returns the largest
// reading: the peak of the live set itself. Garbage (whose amount depends on
// GC pacing and CPU contention, not on the input) never counts, and a forced
// collection cannot be missed the way a background GC's metric can.
func peakLiveHeap(f func()) uint64 {
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	var peak uint64
	var mu sync.Mutex
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			runtime.GC()
			metrics.Read(s)
			mu.Lock()
			peak = max(peak, s[0].Value.Uint64())
			mu.Unlock()
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	f()
	close(stop)
	<-done
	return peak
}

// TestMemoryDoesNotGrowWithInput: the peak live heap of passes 1 and 2 on
// 4× the input grows by far less than the extra prompt text (holding the
// texts would grow it by at least that much); what growth there is comes
// from the duplicate bookkeeping, which is O(duplicates).
func TestMemoryDoesNotGrowWithInput(t *testing.T) {
	sizes := []int{20_000, 80_000}
	var peaks []uint64
	var texts []int64
	for _, n := range sizes {
		dir := t.TempDir()
		path, text := writeCorpus(t, dir, n)
		p := DefaultParams()
		p.Workers = 1 // one worker: the peak must not depend on how two interleave
		var stats Stats
		peak := peakLiveHeap(func() {
			res, err := Analyze(context.Background(), []string{path}, filepath.Join(dir, "work"), p)
			if err != nil {
				t.Fatal(err)
			}
			stats = res.Stats
		})
		t.Logf("n=%d prompt text %.1f MB, peak heap %.1f MB; %s", n, float64(text)/1e6, float64(peak)/1e6, stats.Summary())
		peaks = append(peaks, peak)
		texts = append(texts, text)
	}
	growth := float64(peaks[1]) - float64(peaks[0])
	extraText := float64(texts[1] - texts[0])
	// 35%: the live-heap peak is sampled (a forced GC every 2ms), and a loaded
	// machine samples the small run's peak less finely; holding the texts
	// would grow it by 100% or more.
	if growth > 0.35*extraText {
		t.Errorf("peak heap grew by %.1f MB for %.1f MB more prompt text (limit 35%%)", growth/1e6, extraText/1e6)
	}
}
