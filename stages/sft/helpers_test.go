package sft

import (
	"context"

	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/serving/backend"
)

// readExamples collects the examples eachExample streams (the tests'
// view of the input).
func readExamples(ctx context.Context, paths []string, opts pipeline.ReadOptions) ([]backend.SFTExample, error) {
	var out []backend.SFTExample
	err := eachExample(ctx, paths, opts, func(_ string, ex backend.SFTExample) error {
		out = append(out, ex)
		return nil
	})
	return out, err
}

// batchAt returns the example indices of step s over n examples.
func (c *Config) batchAt(n, s int) []int { return c.orders(n).batch(s) }
