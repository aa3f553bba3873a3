package main

import (
	"github.com/spf13/cobra"

	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/stages/analyze"
)

func init() {
	customCommands[analyze.Name] = newAnalyzeCmd
}

// newAnalyzeCmd is `evolm analyze rubrics`: the analyze-rubrics stage's
// generated command under an `analyze` group (room for other analyses).
func newAnalyzeCmd(a *app, spec pipeline.Spec) *cobra.Command {
	group := &cobra.Command{Use: "analyze", Short: "Analyses of a run's tables (rubrics: rubric-evolution statistics)"}
	rubrics := newStageCmd(a, spec)
	rubrics.Use = "rubrics"
	rubrics.Aliases = []string{spec.Name}
	group.AddCommand(rubrics)
	return group
}
