// Package ablation registers toyworld's test-only rubric reward, a
// deliberately wrong one that a sound loop must fail with: inverted_margin,
// α·(s− − s+) + (1 − α)·R_format, which pays rubrics for scoring the worse
// answer of a pair higher, so the held-out rubric margin should fall.
//
// It is not linked into evolm: the toyworld ablations build evolm with
// -tags toyworld_ablation (cmd/evolm/ablation.go imports this package
// then), and tests import it directly.
package ablation

import "github.com/evolm/evolm/method/grpo"

// InvertedMargin is the ablation's rubric_reward name.
const InvertedMargin = "inverted_margin"

func init() {
	grpo.RubricRewards.Register(InvertedMargin, "α·(s− − s+) + (1 − α)·R_format: the paper's margin with the pair swapped (a test-only ablation; the margin should fall)", func(in grpo.RubricInput) float64 {
		f := 0.0
		if in.FormatOK {
			f = 1
		}
		return in.Alpha*(in.SMinus-in.SPlus) + (1-in.Alpha)*f
	})
}
