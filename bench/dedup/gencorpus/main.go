// Command gencorpus writes the dedup benchmark corpus (package corpus) as a
// Tulu-layout Parquet file, streaming, and optionally the ground truth
// (row, kind, of) as CSV.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"

	"github.com/evolm/evolm/bench/dedup/corpus"
	"github.com/evolm/evolm/datasets"
)

func main() {
	n := flag.Int("n", 1_000_000, "rows")
	out := flag.String("out", "corpus.parquet", "output Parquet file")
	truth := flag.String("truth", "", "optional CSV of row,kind,of")
	seed := flag.Uint64("seed", corpus.Default.Seed, "seed")
	flag.Parse()
	if err := run(*n, *out, *truth, *seed); err != nil {
		fmt.Fprintln(os.Stderr, "gencorpus:", err)
		os.Exit(1)
	}
}

func run(n int, out, truth string, seed uint64) error {
	g := corpus.Default
	g.Seed = seed
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 1<<20)
	w := datasets.NewParquetWriter(bw, 16*1024)
	var tw *bufio.Writer
	if truth != "" {
		tf, err := os.Create(truth)
		if err != nil {
			return err
		}
		defer tf.Close()
		tw = bufio.NewWriter(tf)
		defer tw.Flush()
		fmt.Fprintln(tw, "row,kind,of")
	}
	batch := make([]datasets.TuluRow, 0, 4096)
	for i := range n {
		r := g.Row(i)
		batch = append(batch, r.TuluRow)
		if tw != nil && r.Kind != corpus.Fresh {
			fmt.Fprintf(tw, "%d,%d,%d\n", i, r.Kind, r.Of)
		}
		if len(batch) == cap(batch) || i == n-1 {
			if err := w.Write(batch); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	if err := w.Close(); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return f.Sync()
}
