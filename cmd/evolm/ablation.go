//go:build toyworld_ablation

package main

// An evolm built with -tags toyworld_ablation also has toyworld's test-only
// rubric reward (inverted_margin), for the ablations of make toyworld.
import _ "github.com/evolm/evolm/datasets/toyworld/ablation"
