package main

import (
	"github.com/spf13/cobra"

	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/stages/analyze"
)

func init() {
	customCommands[analyze.Name] = newAnalyzeCmd
	// analyze-trend is `evolm analyze trend`, in the group made above.
	customCommands[analyze.TrendName] = func(*app, pipeline.Spec) *cobra.Command { return nil }
}

// newAnalyzeCmd is the `analyze` group: `evolm analyze rubrics` (the
// analyze-rubrics stage) and `evolm analyze trend` (analyze-trend), the
// stages' generated commands under shorter names.
func newAnalyzeCmd(a *app, spec pipeline.Spec) *cobra.Command {
	group := &cobra.Command{Use: "analyze", Short: "Analyses of rubric evolution (rubrics: statistics of a run's rubrics; trend: rubrics of checkpoints on a fixed prompt set)"}
	rubrics := newStageCmd(a, spec)
	rubrics.Use = "rubrics"
	rubrics.Aliases = []string{spec.Name}
	group.AddCommand(rubrics)
	if ts, ok := pipeline.Lookup(analyze.TrendName); ok {
		trend := newStageCmd(a, ts)
		trend.Use = "trend"
		trend.Aliases = []string{ts.Name}
		group.AddCommand(trend)
	}
	return group
}
