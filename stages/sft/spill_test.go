package sft

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/serving/backend"
)

// byteTokenizerDouble is a test double of TokenizeSFT: one token per byte
// of the turns' contents (id = the byte + 1), the assistant's bytes
// (or the completion's) the targets.
func byteTokenizerDouble(ex backend.SFTExample) (backend.SFTSample, error) {
	var s backend.SFTSample
	add := func(text string, target bool) {
		for _, b := range []byte(text) {
			s.TokenIDs = append(s.TokenIDs, int(b)+1)
			s.Targets = append(s.Targets, target)
		}
	}
	if len(ex.Messages) == 0 {
		add(ex.Prompt, false)
		add(ex.Completion, true)
		return s, nil
	}
	for _, m := range ex.Messages {
		if m.Content == "fail" {
			return s, fmt.Errorf("cannot tokenize")
		}
		add(m.Content, m.Role == "assistant")
	}
	return s, nil
}

// writeChats writes n chats of about 100 bytes each as JSONL.
func writeChats(t *testing.T, path string, n int) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	for i := range n {
		fmt.Fprintf(w, `{"messages": [{"role": "user", "content": "What is %d plus %d? Answer with the number only, please."}, {"role": "assistant", "content": "It is %d, the sum."}]}`+"\n", i, i%7, i+i%7)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestSpillRoundTrip: each example read back by offset is the tokenizer's
// sample, truncated to max_length; a tokenizer error names the file and
// line; the spill files are removed on close.
func TestSpillRoundTrip(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	writeChats(t, in, 50)
	sp, err := writeSpill(context.Background(), dir, "examples", []string{in}, pipeline.ReadOptions{}, byteTokenizerDouble, 60)
	if err != nil {
		t.Fatal(err)
	}
	exs, err := readExamples(context.Background(), []string{in}, pipeline.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sp.n != len(exs) {
		t.Fatalf("spill has %d examples, input %d", sp.n, len(exs))
	}
	for _, i := range []int{0, 1, 17, 49, 3} {
		want, _ := byteTokenizerDouble(exs[i])
		want.TokenIDs, want.Targets = want.TokenIDs[:60], want.Targets[:60]
		got, err := sp.sample(i)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("example %d (-want +got):\n%s", i, d)
		}
	}
	sp.close()
	if left, _ := filepath.Glob(filepath.Join(dir, "examples.*")); len(left) > 0 {
		t.Errorf("spill files left after close: %v", left)
	}

	bad := filepath.Join(dir, "bad.jsonl")
	_ = os.WriteFile(bad, []byte(`{"prompt": "a", "completion": "b"}`+"\n\n"+`{"messages": [{"role": "assistant", "content": "fail"}]}`+"\n"), 0o644)
	_, err = writeSpill(context.Background(), dir, "examples", []string{bad}, pipeline.ReadOptions{}, byteTokenizerDouble, 60)
	if err == nil || !strings.Contains(err.Error(), "bad.jsonl line 3: cannot tokenize") {
		t.Errorf("tokenizer error %v, want the file and line 3", err)
	}
}

// TestSpillMemoryFlat: the Go heap that tokenizing leaves behind does not
// grow with the data: tokenizing 10·N examples instead of N grows it by no
// more than the epoch order's 4 bytes per example (and a fixed slack),
// where holding the samples in memory would take ~100 tokens × 9 bytes
// each.
func TestSpillMemoryFlat(t *testing.T) {
	const n = 4000
	dir := t.TempDir()
	c := &Config{Keys: Keys{BatchSize: 8, Shuffle: true, Seed: 1}}
	heap := func(examples int) uint64 {
		in := filepath.Join(dir, fmt.Sprintf("in-%d.jsonl", examples))
		writeChats(t, in, examples)
		sp, err := writeSpill(context.Background(), dir, fmt.Sprintf("ex-%d", examples), []string{in}, pipeline.ReadOptions{}, byteTokenizerDouble, 1024)
		if err != nil {
			t.Fatal(err)
		}
		defer sp.close()
		o := c.orders(sp.n)
		if _, err := sp.sample(o.batch(examples/c.BatchSize - 1)[0]); err != nil { // a step's read
			t.Fatal(err)
		}
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		runtime.KeepAlive(o)
		runtime.KeepAlive(sp)
		return ms.HeapAlloc
	}
	small, large := heap(n), heap(10*n)
	growth := int64(large) - int64(small)
	const slack = 256 << 10
	limit := int64(4*9*n + slack)
	t.Logf("Go heap after tokenizing %d examples: %d bytes; %d examples: %d bytes (growth %d, limit %d)", n, small, 10*n, large, growth, limit)
	if growth > limit {
		t.Errorf("the heap grew by %d bytes from %d to %d examples, more than the order's %d bytes and %d of slack", growth, n, 10*n, 4*9*n, slack)
	}
}
