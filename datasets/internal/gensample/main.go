// Command gensample writes the sample dataset (datasets.Sample) as Parquet in
// the Tulu 3 layout. `go generate ./datasets` runs it to refresh the committed
// copy at datasets/sample/tulu3_sample.parquet.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/evolm/evolm/datasets"
)

func main() {
	out := flag.String("out", "tulu3_sample.parquet", "output Parquet file")
	flag.Parse()
	set, err := datasets.WriteSample(*out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gensample:", err)
		os.Exit(1)
	}
	exact, near := 0, 0
	for _, p := range set.Plants {
		if p.Kind == datasets.PlantExact {
			exact++
		} else {
			near++
		}
	}
	fmt.Printf("wrote %s: %d rows, %d planted exact and %d planted near duplicates, %d far groups\n",
		*out, len(set.Rows), exact, near, len(set.FarGroups))
}
