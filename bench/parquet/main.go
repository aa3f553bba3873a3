// Command parquet-bench is the Go side of bench/parquet: it generates the
// rollouts-like table and times evolm's shard writer and reader on it. The
// driver run.py runs it and pyarrow on the same file and prints the ratios.
//
//	parquet-bench gen   -rows 1000000 -out src.parquet
//	parquet-bench bench -in src.parquet -dir DIR -iters 3 [-cpuprofile FILE]
//	parquet-bench read  -in FILE
//
// bench loads src.parquet into memory as record batches, then per iteration
// writes them to DIR/go.parquet through pipeline.CreateShard, the writer
// every stage uses (zstd level 3, dictionary, statistics, 128Ki-row row
// groups), and reads that file back, serially and with
// parallel column decoding. It prints one JSON object: best-of wall and CPU
// seconds per phase, sizes and the process's peak RSS. read streams a file
// in a fresh process and prints its rows and peak RSS: what a stage that
// streams a shard costs in memory.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/schemas/schematest"
)

const level = 3

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: parquet-bench gen|bench [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "gen":
		err = gen(os.Args[2:])
	case "bench":
		err = bench(os.Args[2:])
	case "read":
		err = read(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "parquet-bench: %v\n", err)
		os.Exit(1)
	}
}

func gen(args []string) error {
	fs := flag.NewFlagSet("gen", flag.ExitOnError)
	rows := fs.Int("rows", 1_000_000, "rows")
	out := fs.String("out", "src.parquet", "output file")
	fs.Parse(args)
	mem := memory.NewGoAllocator()
	w, err := pipeline.CreateShard(*out, schemas.Rollouts.Schema(), pipeline.WriteOptions{Mem: mem, CompressionLevel: level})
	if err != nil {
		return err
	}
	defer w.Abort()
	for i := 0; i < *rows; i += 65536 {
		rec := schemas.Rollouts.Build(mem, schematest.BenchRollouts(i, min(65536, *rows-i)))
		err := w.Write(rec)
		rec.Release()
		if err != nil {
			return err
		}
	}
	_, err = w.Commit()
	return err
}

// usage is wall and CPU (user+system, all threads) time.
type usage struct{ wall, cpu time.Duration }

func now() usage {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return usage{time.Duration(time.Now().UnixNano()), time.Duration(ru.Utime.Nano() + ru.Stime.Nano())}
}

func (u usage) since() usage {
	n := now()
	return usage{n.wall - u.wall, n.cpu - u.cpu}
}

type phase struct {
	Wall float64 `json:"wall_s"`
	CPU  float64 `json:"cpu_s"`
}

func best(p *phase, u usage) {
	if p.Wall == 0 || u.wall.Seconds() < p.Wall {
		p.Wall = u.wall.Seconds()
	}
	if p.CPU == 0 || u.cpu.Seconds() < p.CPU {
		p.CPU = u.cpu.Seconds()
	}
}

func bench(args []string) error {
	fs := flag.NewFlagSet("bench", flag.ExitOnError)
	in := fs.String("in", "src.parquet", "source table")
	dir := fs.String("dir", ".", "output directory")
	iters := fs.Int("iters", 3, "iterations (best is reported)")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the first iteration's write to this file")
	fs.Parse(args)
	ctx := context.Background()
	mem := memory.NewGoAllocator()

	// Load the table into memory.
	var recs []arrow.RecordBatch
	var rows, memBytes int64
	for rec, err := range pipeline.ReadShard(ctx, *in, pipeline.ReadOptions{Mem: mem, Parallel: true, Schema: schemas.Rollouts.Schema()}) {
		if err != nil {
			return err
		}
		rec.Retain()
		recs = append(recs, rec)
		rows += rec.NumRows()
		for _, c := range rec.Columns() {
			memBytes += arraySize(c.Data())
		}
	}
	out := filepath.Join(*dir, "go.parquet")
	var write, readSerial, readParallel phase
	for it := range *iters {
		if it == 0 && *cpuprofile != "" {
			f, err := os.Create(*cpuprofile)
			if err != nil {
				return err
			}
			defer f.Close()
			if err := pprof.StartCPUProfile(f); err != nil {
				return err
			}
		}
		u := now()
		w, err := pipeline.CreateShard(out, schemas.Rollouts.Schema(), pipeline.WriteOptions{Mem: mem, CompressionLevel: level})
		if err != nil {
			return err
		}
		for _, r := range recs {
			if err := w.Write(r); err != nil {
				return err
			}
		}
		if _, err := w.Commit(); err != nil {
			return err
		}
		best(&write, u.since())
		if it == 0 && *cpuprofile != "" {
			pprof.StopCPUProfile()
		}
		for _, par := range []bool{false, true} {
			u := now()
			var n int64
			for rec, err := range pipeline.ReadShard(ctx, out, pipeline.ReadOptions{Mem: mem, Parallel: par}) {
				if err != nil {
					return err
				}
				n += rec.NumRows()
			}
			if n != rows {
				return fmt.Errorf("read %d rows of %d", n, rows)
			}
			if par {
				best(&readParallel, u.since())
			} else {
				best(&readSerial, u.since())
			}
		}
	}
	for _, r := range recs {
		r.Release()
	}
	st, err := os.Stat(out)
	if err != nil {
		return err
	}
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"rows": rows, "mem_bytes": memBytes, "file_bytes": st.Size(),
		"write": write, "read_serial": readSerial, "read_parallel": readParallel,
		"peak_rss_bytes": ru.Maxrss * 1024,
	})
}

func read(args []string) error {
	fs := flag.NewFlagSet("read", flag.ExitOnError)
	in := fs.String("in", "go.parquet", "file to stream")
	fs.Parse(args)
	var rows int64
	u := now()
	for rec, err := range pipeline.ReadShard(context.Background(), *in, pipeline.ReadOptions{Mem: memory.NewGoAllocator()}) {
		if err != nil {
			return err
		}
		rows += rec.NumRows()
	}
	var p phase
	best(&p, u.since())
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return json.NewEncoder(os.Stdout).Encode(map[string]any{"rows": rows, "read": p, "peak_rss_bytes": ru.Maxrss * 1024})
}

func arraySize(d arrow.ArrayData) int64 {
	var n int64
	for _, b := range d.Buffers() {
		if b != nil {
			n += int64(b.Len())
		}
	}
	for _, c := range d.Children() {
		n += arraySize(c)
	}
	return n
}
