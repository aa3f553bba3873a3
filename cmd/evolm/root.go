package main

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/evolm/evolm/model/torch"
	"github.com/evolm/evolm/pipeline"
)

// app is what the root command's pre-run resolves for subcommands.
type app struct {
	configFile string
	cfg        *pipeline.Config
	log        *slog.Logger
}

// extraCommands are commands written in files of their own, which add
// themselves from init() (prompts.go).
var extraCommands []func(*app) *cobra.Command

// globalFlags are the root's persistent flags; each sets a config key of
// pipeline/defaults.yaml, whose type and default it takes.
var globalFlags = []struct{ name, key, usage string }{
	{"run", "run.name", "run name: the run directory is <runs-root>/<run>"},
	{"runs-root", "run.root", "directory holding runs"},
	{"run-dir", "run.dir", "run directory (overrides --run and --runs-root)"},
	{"log-level", "log.level", "debug, info, warn or error"},
	{"log-format", "log.format", "text or json"},
	{"parallelism", "pipeline.parallelism", "output shards written at once"},
	{"progress", "pipeline.progress", "auto (a bar on a terminal, log lines otherwise), tty, log or off"},
	{"fresh", "pipeline.fresh", "forget the stage's committed shards and redo them"},
	{"mmap-threshold", "torch.mmap_threshold", "host allocations at least this large are mapped on their own and returned to the OS when freed (glibc M_MMAP_THRESHOLD, at most 32MiB; the heap keeps up to max(16MiB, twice this) free at its top, glibc M_TRIM_THRESHOLD), so a CPU run or server does not keep the heap its largest step or prompt grew; 0: glibc's adaptive default"},
}

func newRootCmd() *cobra.Command {
	a := &app{}
	root := &cobra.Command{
		Use:   "evolm",
		Short: "EVOLM co-evolving rubric/policy post-training as a Parquet pipeline",
		Long: `evolm runs the EVOLM method as discrete stages that pass Arrow record batches
over Parquet shards in a run directory (runs/<run>/<table>/<partitions>/part-NNNNN.parquet).

Configuration merges, later winning: built-in defaults, --config FILE (YAML),
EVOLM_* env vars (stages.dedup.threshold → EVOLM_STAGES_DEDUP_THRESHOLD) and flags.
The model roles are configured once each, in roles.policy, roles.rubric_generator
and roles.judge (env EVOLM_ROLES_POLICY_MODEL …, flags --policy-model,
--rubric-generator-temperature, --judge-backend … on every command that calls them).
'evolm config print' shows the result; 'evolm stages' lists the stages.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return a.load(cmd)
		},
	}
	pf := root.PersistentFlags()
	pf.StringVar(&a.configFile, "config", "", "YAML config file")
	for _, g := range globalFlags {
		if err := pipeline.AddKeyFlag(pf, g.name, g.key, g.usage); err != nil {
			panic(err) // a bad built-in flag table: a programming error
		}
	}
	root.AddCommand(newStagesCmd(), newConfigCmd(a), newInspectCmd(), newModelCmd(), newServeCmd(), newPlanCmd(a), newVersionCmd())
	addVersionFlag(root)
	for _, extra := range extraCommands {
		root.AddCommand(extra(a))
	}
	for _, spec := range pipeline.Specs() {
		if custom, ok := customCommands[spec.Name]; ok {
			if c := custom(a, spec); c != nil { // nil: another command holds it
				root.AddCommand(c)
			}
			continue
		}
		root.AddCommand(newStageCmd(a, spec))
	}
	return root
}

// load checks the libtorch this process loaded, merges the config with the
// flags of the command being run and sets up the logger.
func (a *app) load(cmd *cobra.Command) error {
	if err := torch.CheckLoadedVersion(); err != nil {
		return err
	}
	cfg, err := pipeline.LoadConfig(pipeline.LoadOptions{
		File:  a.configFile,
		Env:   os.Environ(),
		Flags: pipeline.FlagKeys(cmd.Flags()),
	})
	if err != nil {
		return err
	}
	log, err := pipeline.NewLogger(os.Stderr, cfg.String("log.level"), cfg.String("log.format"))
	if err != nil {
		return err
	}
	slog.SetDefault(log)
	a.cfg, a.log = cfg, log
	return setMmapThreshold(cfg.String("torch.mmap_threshold"))
}

// setMmapThreshold applies torch.mmap_threshold to this process. glibc's
// adaptive threshold rises to 32 MiB after the first large free, so a CPU
// step's 8–32 MiB tensors then come from a heap that never shrinks: the
// measured LoRA step peaked 36–67% above its plan under it, within 7% with
// 1 MiB (README, "Memory and evolm plan").
func setMmapThreshold(v string) error {
	n, err := parseBytes(v)
	if err != nil || n > 32<<20 {
		return fmt.Errorf("torch.mmap_threshold %q (--mmap-threshold, EVOLM_TORCH_MMAP_THRESHOLD): want a size up to 32MiB such as 1MiB, or 0", v)
	}
	if n == 0 {
		return nil
	}
	if err := torch.SetMmapThreshold(int(n)); err != nil {
		return fmt.Errorf("torch.mmap_threshold: %w", err)
	}
	return nil
}
