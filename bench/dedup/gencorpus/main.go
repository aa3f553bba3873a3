// Command gencorpus writes the dedup benchmark corpus (package corpus) as
// Tulu-layout Parquet files, streaming: rows [j·n/k, (j+1)·n/k) go to
// <out>/corpus-0000j.parquet. With -truth it also writes the ground truth
// (row, kind, of) of the planted duplicates as CSV.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/evolm/evolm/bench/dedup/corpus"
	"github.com/evolm/evolm/datasets"
)

func main() {
	n := flag.Int("n", 1_000_000, "rows")
	files := flag.Int("files", 1, "Parquet files to split the rows over")
	out := flag.String("out", "corpus", "output directory")
	truth := flag.String("truth", "", "optional CSV of row,kind,of for planted duplicates")
	seed := flag.Uint64("seed", corpus.Default.Seed, "seed")
	flag.Parse()
	if err := run(*n, *files, *out, *truth, *seed); err != nil {
		fmt.Fprintln(os.Stderr, "gencorpus:", err)
		os.Exit(1)
	}
}

func run(n, files int, out, truth string, seed uint64) error {
	g := corpus.Default
	g.Seed = seed
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
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
	for j := range files {
		lo, hi := j*n/files, (j+1)*n/files
		if err := writeFile(filepath.Join(out, fmt.Sprintf("corpus-%05d.parquet", j)), g, lo, hi, tw); err != nil {
			return err
		}
	}
	return nil
}

func writeFile(path string, g corpus.Gen, lo, hi int, tw *bufio.Writer) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 1<<20)
	w := datasets.NewParquetWriter(bw, 16*1024)
	batch := make([]datasets.TuluRow, 0, 4096)
	for i := lo; i < hi; i++ {
		r := g.Row(i)
		batch = append(batch, r.TuluRow)
		if tw != nil && r.Kind != corpus.Fresh {
			fmt.Fprintf(tw, "%d,%d,%d\n", i, r.Kind, r.Of)
		}
		if len(batch) == cap(batch) || i == hi-1 {
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
