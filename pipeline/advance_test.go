package pipeline

import (
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/schemas/schematest"
)

// Rows a task advances before writing them count once: progress moves at
// Advance, and the later Write adds only what was not advanced.
func TestShardWriterAdvance(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	w, err := CreateShard(filepath.Join(t.TempDir(), "a.parquet"), schemas.Steps.Schema(), WriteOptions{Mem: mem})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	p := NewProgress("test", 12, "off", io.Discard, slog.New(slog.DiscardHandler))
	defer p.Done()
	w.progress = p
	w.Advance(4)
	w.Advance(4)
	if got := p.Rows(); got != 8 {
		t.Fatalf("after advancing 8 rows: progress %d", got)
	}
	rec := schemas.Steps.Build(mem, schematest.Steps(10))
	defer rec.Release()
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if got := p.Rows(); got != 10 {
		t.Errorf("after writing the 10 rows: progress %d, want 10", got)
	}
}

// A partition matches its zero-padded form in a path (a run made before
// steps were written in plain decimal).
func TestPartitionIn(t *testing.T) {
	for _, tc := range []struct {
		rel  string
		want bool
	}{
		{"rollouts/phase=policy/step=12/role=policy/part-00000.parquet", true},
		{"rollouts/phase=policy/step=000012/role=policy/part-00000.parquet", true},
		{"rollouts/phase=policy/step=120/part-00000.parquet", false},
		{"rollouts/phase=policy/part-00000.parquet", false},
	} {
		if got := Step(12).In(tc.rel); got != tc.want {
			t.Errorf("Step(12).In(%q) = %v", tc.rel, got)
		}
	}
}
