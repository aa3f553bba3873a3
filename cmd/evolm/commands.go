package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/evolm/evolm/pipeline"
)

func newStagesCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "stages [NAME...]",
		Short: "List the registered stages with their specs",
		RunE: func(cmd *cobra.Command, args []string) error {
			specs := pipeline.Specs()
			if len(args) > 0 {
				specs = specs[:0]
				for _, name := range args {
					s, ok := pipeline.Lookup(name)
					if !ok {
						return fmt.Errorf("no stage %q", name)
					}
					specs = append(specs, s)
				}
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(specs)
			}
			if len(specs) == 0 {
				fmt.Fprintln(out, "no stages registered")
			}
			for i, s := range specs {
				if i > 0 {
					fmt.Fprintln(out, strings.Repeat("-", 72))
				}
				if err := pipeline.WriteSpecDoc(out, s); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the specs as JSON")
	return cmd
}

func newConfigCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Show the configuration"}
	var section string
	printCmd := &cobra.Command{
		Use:   "print",
		Short: "Print the effective merged config as YAML, checked as the stages check it",
		Long: `Prints the merged config (defaults, --config FILE, EVOLM_* env vars, flags) as
YAML, after checking every value as the stages check theirs when they run: a
value out of range is an error here too (exit status 1). It takes every
stage's flags: a flag only one stage has keeps its name (--rubric-samples 4); one
that several stages share is prefixed with the stage (--run.lr, --rollout.n); the
model roles' flags are --policy-<key>, --rubric-generator-<key>, --judge-<key>.
Values a stage needs only to run (a model path) may stay unset.`,
		Example: `  evolm --config stages/presets/paper.yaml config print --run.lr 2e-6
  evolm config print --section roles.judge --judge-temperature 0.2`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := pipeline.Validate(a.cfg); err != nil {
				return err
			}
			c := a.cfg
			if section != "" {
				c = c.Section(section)
				if len(c.Keys()) == 0 {
					return fmt.Errorf("config has no section %q", section)
				}
			}
			b, err := c.YAML()
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(b)
			return err
		},
	}
	printCmd.Flags().StringVar(&section, "section", "", "print only this section, e.g. stages.dedup")
	if err := pipeline.AddAllStageFlags(printCmd.Flags()); err != nil {
		panic(err) // Register validated the specs; this is a programming error
	}
	refCmd := &cobra.Command{
		Use:   "reference",
		Short: "Print the reference of every config key as Markdown (docs/config-reference.md)",
		Long: `Prints, from the registry, every key evolm reads — process settings, the model
roles' sections, each stage's keys — with its type, default, allowed values,
bounds, environment variable and meaning. docs/config-reference.md is this
output; a test fails when it is stale.`,
		Example: "  evolm config reference > docs/config-reference.md",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return pipeline.WriteReference(cmd.OutOrStdout())
		},
	}
	cmd.AddCommand(printCmd, refCmd)
	return cmd
}

func newInspectCmd() *cobra.Command {
	var rows int
	var verify bool
	cmd := &cobra.Command{
		Use:   "inspect PATH",
		Short: "Describe a Parquet file (schema, rows, row groups, metadata, first rows) or a run directory",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return pipeline.Inspect(cmd.Context(), cmd.OutOrStdout(), args[0], pipeline.InspectOptions{Rows: rows, Verify: verify})
		},
	}
	cmd.Flags().IntVarP(&rows, "rows", "n", 5, "rows to show for a file")
	cmd.Flags().BoolVar(&verify, "verify", false, "check the sha256 and partition of every committed shard of a run against its manifest, list stray files, and follow the references between tables (every judgment's response and rubric, every pair's rollouts), reporting dangling ones by table and count")
	return cmd
}

// newStageCmd generates `evolm <stage>`: flags and help come from the spec.
func newStageCmd(a *app, spec pipeline.Spec) *cobra.Command {
	cmd := &cobra.Command{
		Use:   spec.Name,
		Short: summary(spec.Summary),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return pipeline.RunStage(cmd.Context(), spec.Name, a.cfg, pipeline.RunOptions{Log: a.log})
		},
	}
	if err := pipeline.AddStageFlags(cmd.Flags(), spec); err != nil {
		panic(err) // Register validated the spec; this is a programming error
	}
	documentStage(cmd, spec)
	return cmd
}

// documentStage puts the stage's config table, each key with its flag, in
// cmd's help, and hides those flags from cobra's own flag list, so that
// every setting appears once.
func documentStage(cmd *cobra.Command, spec pipeline.Spec) {
	var doc strings.Builder
	_ = pipeline.WriteSpecDocFlags(&doc, spec, pipeline.FlagNames(cmd.Flags()))
	if cmd.Long != "" {
		doc.WriteString("\n" + cmd.Long + "\n")
	}
	cmd.Long = doc.String()
	for _, name := range pipeline.FlagNames(cmd.Flags()) {
		_ = cmd.Flags().MarkHidden(name)
	}
}

// summary capitalises a one-line summary for the command list, as cobra's
// own commands read.
func summary(s string) string {
	if s == "" {
		return s
	}
	r := []rune(s)
	return strings.ToUpper(string(r[0])) + string(r[1:])
}
