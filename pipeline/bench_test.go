package pipeline_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/pipeline/pipelinetest"
	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/schemas/schematest"
)

const benchRows = 100_000

// benchBatches builds the rollouts-like table in batches of 16Ki rows and
// returns them with their in-memory size.
func benchBatches(b *testing.B, mem memory.Allocator) ([]arrow.RecordBatch, int64) {
	b.Helper()
	var recs []arrow.RecordBatch
	var size int64
	for i := 0; i < benchRows; i += 16384 {
		rec := schemas.Rollouts.Build(mem, schematest.BenchRollouts(i, min(16384, benchRows-i)))
		recs = append(recs, rec)
		for _, c := range rec.Columns() {
			for _, buf := range c.Data().Buffers() {
				if buf != nil {
					size += int64(buf.Len())
				}
			}
		}
	}
	return recs, size
}

func BenchmarkShardWrite(b *testing.B) {
	mem := memory.NewGoAllocator()
	recs, size := benchBatches(b, mem)
	defer func() {
		for _, r := range recs {
			r.Release()
		}
	}()
	p := filepath.Join(b.TempDir(), "part-00000.parquet")
	b.SetBytes(size)
	b.ResetTimer()
	for range b.N {
		pipelinetest.WriteShard(b, mem, p, schemas.Rollouts.Schema(), recs...)
	}
	b.ReportMetric(float64(benchRows*b.N)/b.Elapsed().Seconds(), "rows/s")
}

func BenchmarkShardRead(b *testing.B) {
	mem := memory.NewGoAllocator()
	recs, size := benchBatches(b, mem)
	p := filepath.Join(b.TempDir(), "part-00000.parquet")
	pipelinetest.WriteShard(b, mem, p, schemas.Rollouts.Schema(), recs...)
	for _, r := range recs {
		r.Release()
	}
	st, _ := os.Stat(p)
	b.ReportMetric(float64(st.Size())/benchRows, "file_bytes/row")
	for _, parallel := range []bool{false, true} {
		name := "serial"
		if parallel {
			name = "parallel"
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(size)
			for range b.N {
				n := int64(0)
				for rec, err := range pipeline.ReadShard(context.Background(), p, pipeline.ReadOptions{Mem: mem, Parallel: parallel, Schema: schemas.Rollouts.Schema()}) {
					if err != nil {
						b.Fatal(err)
					}
					n += rec.NumRows()
				}
				if n != benchRows {
					b.Fatalf("read %d rows", n)
				}
			}
			b.ReportMetric(float64(benchRows*b.N)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}

// BenchmarkDecodeRows measures the typed reader (batch → []Rollout).
func BenchmarkDecodeRows(b *testing.B) {
	mem := memory.NewGoAllocator()
	rec := schemas.Rollouts.Build(mem, schematest.BenchRollouts(0, 16384))
	defer rec.Release()
	b.ResetTimer()
	for range b.N {
		if _, err := schemas.Rollouts.Read(rec); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(16384*b.N)/b.Elapsed().Seconds(), "rows/s")
}
