package main

import (
	"context"
	"testing"
)

// BenchmarkYesNo compares yes/no judging with prefix reuse against a full
// forward pass per criterion on a tiny random checkpoint (one op = one
// (response, rubric) request of 4 criteria over a 300-word response):
//
//	go test -run '^$' -bench YesNo -benchtime 5x ./bench/judge
func BenchmarkYesNo(b *testing.B) {
	m, err := load("", "tiny", 0, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(m.Close)
	reqs, err := workload(1, 300, 4)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for _, c := range []struct {
		name string
		f    scoreFunc
	}{{"naive", m.ScoreNaive}, {"prefix_reuse", m.Score}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := c.f(ctx, reqs); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestWorkloadShape checks that the benchmark's requests share a real
// prefix: every suffix is one criterion of the yes/no prompt.
func TestWorkloadShape(t *testing.T) {
	reqs, err := workload(2, 10, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 2 || len(reqs[0].Suffixes) != 3 || reqs[0].Prefix == "" || reqs[0].Prefix == reqs[1].Prefix {
		t.Fatalf("workload = %+v", reqs)
	}
}
