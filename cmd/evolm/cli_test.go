package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"go.yaml.in/yaml/v3"

	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/schemas/schematest"
)

// cliTestStage is a test double registered as "clitest": it writes the
// sample steps rows into one shard.
type cliTestStage struct{ rows int }

func init() {
	pipeline.Register(pipeline.Spec{
		Name:        "clitest",
		Summary:     "test double for the CLI tests",
		Description: "Writes generated steps rows.",
		Outputs:     []string{"steps"},
		Fields: []pipeline.Field{
			{Key: "rows", Type: pipeline.TypeInt, Default: 10, Description: "rows to write"},
			{Key: "label_mode", Type: pipeline.TypeString, Default: "a", Enum: []string{"a", "b"}, Description: "an enum", Example: "b"},
			{Key: "tag", Type: pipeline.TypeString, Default: "", Description: "a required string", Required: true},
		},
		New: func(cfg *pipeline.Config) (pipeline.Stage, error) {
			if cfg.Int("rows") < 0 {
				return nil, cfg.Errorf("rows", "must be ≥ 0")
			}
			return cliTestStage{rows: cfg.Int("rows")}, nil
		},
	})
}

func (s cliTestStage) Run(ctx context.Context, env *pipeline.Env) error {
	return env.MapShards(ctx, []pipeline.Task{{
		Output: pipeline.ShardPath("steps", 0), Schema: schemas.Steps.Schema(),
		Write: func(ctx context.Context, w *pipeline.ShardWriter) error {
			rec := schemas.Steps.Build(env.Mem, schematest.Steps(s.rows))
			defer rec.Release()
			return w.Write(rec)
		},
	}})
}

// run executes the CLI in-process and returns stdout and the error.
func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newRootCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

func TestStagesCommand(t *testing.T) {
	out, err := run(t, "stages", "clitest")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"clitest: test double for the CLI tests", "Outputs: steps",
		"label_mode", `default "a"`, "EVOLM_STAGES_CLITEST_LABEL_MODE", "One of: a, b.", `Example: "b".`, "Required."} {
		if !strings.Contains(out, want) {
			t.Errorf("`evolm stages clitest` lacks %q:\n%s", want, out)
		}
	}
	out, err = run(t, "stages", "--json")
	if err != nil || !strings.Contains(out, `"name": "clitest"`) {
		t.Errorf("stages --json: %v\n%s", err, out)
	}
	if _, err := run(t, "stages", "nosuch"); err == nil || !strings.Contains(err.Error(), `no stage "nosuch"`) {
		t.Errorf("stages nosuch: %v", err)
	}
}

func TestStageCommandHelpAndFlags(t *testing.T) {
	out, err := run(t, "clitest", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Writes generated steps rows.", "rows  --rows  int  default 10", "label_mode  --label-mode  string", "--run-dir string"} {
		if !strings.Contains(out, want) {
			t.Errorf("help lacks %q:\n%s", want, out)
		}
	}
}

func TestConfigPrint(t *testing.T) {
	cfgFile := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(cfgFile, []byte("stages:\n  clitest:\n    rows: 3\n    label_mode: b\nlog:\n  level: warn\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("EVOLM_STAGES_CLITEST_ROWS", "4")
	out, err := run(t, "--config", cfgFile, "--parallelism", "7", "config", "print")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"    rows: 4\n", "    label_mode: b\n", "  level: warn\n", "  parallelism: 7\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("config print lacks %q:\n%s", want, out)
		}
	}
	out, err = run(t, "config", "print", "--section", "stages.clitest")
	if err != nil || !strings.HasPrefix(out, "label_mode: a\nrows: 4\n") {
		t.Errorf("config print --section: %v\n%s", err, out)
	}
}

func TestCLIErrors(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("stages:\n  clitest:\n    rowz: 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--config", bad, "config", "print"}, "bad.yaml: unknown key stages.clitest.rowz (did you mean stages.clitest.rows?)"},
		{[]string{"clitest", "--run-dir", dir, "--label-mode", "c", "--tag", "x"}, `config key stages.clitest.label_mode (from flag --label-mode): "c" is not one of a, b`},
		{[]string{"clitest", "--run-dir", dir}, "config key stages.clitest.tag: required, not set (flag --tag or env EVOLM_STAGES_CLITEST_TAG)"},
		{[]string{"clitest", "--run-dir", dir, "--tag", "x", "--rows", "-1"}, "config key stages.clitest.rows (from flag --rows): must be ≥ 0"},
		{[]string{"--log-level", "loud", "config", "print"}, "config key log.level"},
		{[]string{"--mmap-threshold", "64MiB", "config", "print"}, `torch.mmap_threshold "64MiB" (--mmap-threshold, EVOLM_TORCH_MMAP_THRESHOLD): want a size up to 32MiB`},
		{[]string{"--mmap-threshold", "lots", "config", "print"}, `torch.mmap_threshold "lots"`},
		{[]string{"inspect", filepath.Join(dir, "nope.parquet")}, "nope.parquet"},
	}
	for _, tc := range tests {
		_, err := run(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("evolm %s: err = %v\nwant it to contain %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}

func TestRunStageAndInspect(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	if _, err := run(t, "clitest", "--run-dir", dir, "--rows", "12", "--tag", "x", "--progress", "off", "--log-level", "warn"); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "inspect", dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"clitest: 1 shards, 12 rows", "steps", "12 rows"} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect dir lacks %q:\n%s", want, out)
		}
	}
	out, err = run(t, "inspect", "-n", "2", filepath.Join(dir, "steps", "part-00000.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"rows:       12", "row groups: 1", "  format_rate: float64 (nullable)", "evolm.stage: clitest",
		"evolm.schema_version: 4", "first 2 rows:", `"step":1`} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect file lacks %q:\n%s", want, out)
		}
	}
}

// TestConfigPrintValidatesLikeTheStages: config print takes the stages'
// flags and rejects what the stage would reject when it runs.
func TestConfigPrintValidatesLikeTheStages(t *testing.T) {
	out, err := run(t, "config", "print", "--run.lr", "2e-6", "--rubric-samples", "3", "--section", "stages.run")
	if err != nil || !strings.Contains(out, "lr: 2e-06\n") || !strings.Contains(out, "rubric_samples: 3\n") {
		t.Errorf("config print --run.lr 2e-6 --rubric-samples 3: %v\n%s", err, out)
	}
	// A model role's keys are its section's, set by --<role>-<key>.
	out, err = run(t, "config", "print", "--judge-temperature", "0.2", "--judge-mode", "yesno", "--section", "roles.judge")
	if err != nil || !strings.Contains(out, "temperature: 0.2\n") || !strings.Contains(out, "mode: yesno\n") {
		t.Errorf("config print --judge-temperature 0.2 --judge-mode yesno: %v\n%s", err, out)
	}
	// Each role is printed once, in its own section, and no stage repeats
	// a role key.
	out, err = run(t, "config", "print")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Roles  map[string]map[string]any
		Stages map[string]map[string]any
	}
	if err := yaml.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	for _, role := range []string{"policy", "rubric_generator", "judge"} {
		if _, ok := doc.Roles[role]["model"]; !ok {
			t.Errorf("config print: roles.%s has no model:\n%s", role, out)
		}
	}
	for name, keys := range doc.Stages {
		for _, k := range []string{"model", "backend", "temperature", "max_tokens", "device", "policy_model", "judge_model"} {
			if _, ok := keys[k]; ok {
				t.Errorf("config print: stages.%s repeats the role key %s", name, k)
			}
		}
	}
	_, err = run(t, "config", "print", "--alpha", "1.5")
	if err == nil || !strings.Contains(err.Error(), "stages.run.alpha (from flag --alpha): 1.5, want in [0, 1]") {
		t.Errorf("config print --alpha 1.5: err = %v", err)
	}
	t.Setenv("EVOLM_STAGES_RUN_ALPHA", "1.5")
	if _, err := run(t, "config", "print"); err == nil || !strings.Contains(err.Error(), "from env EVOLM_STAGES_RUN_ALPHA") {
		t.Errorf("config print with EVOLM_STAGES_RUN_ALPHA=1.5: err = %v", err)
	}
}

func TestServeBindWarning(t *testing.T) {
	for addr, want := range map[string]bool{"127.0.0.1:80": true, "[::1]:80": true, "0.0.0.0:80": false, "10.0.0.5:80": false} {
		a, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := loopback(a); got != want {
			t.Errorf("loopback(%s) = %v, want %v", addr, got, want)
		}
	}
	for s, want := range map[string]int64{"0": 0, "6GiB": 6 << 30, "512 MiB": 512 << 20, "1.5kb": 1500, "42": 42} {
		if got, err := parseBytes(s); err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "-1", "NaN", "inf", "5 parsecs"} {
		if _, err := parseBytes(s); err == nil {
			t.Errorf("parseBytes(%q) accepted", s)
		}
	}
}

// TestHelpOverEveryCommand: every command's --help reads cleanly: no flag
// usage that pflag would mangle (a `word` becomes the value's type name), no
// integer bound printed as a float, a full stop before "One of:" and
// "Range:", an empty choice shown as "", each stage key's flag listed once,
// and summaries that start with a capital, as cobra's own do.
func TestHelpOverEveryCommand(t *testing.T) {
	var walk func(c *cobra.Command)
	floatInt := regexp.MustCompile(`\d\.\d+e\+\d+`)
	noStop := regexp.MustCompile(`[a-z0-9)] (One of|Range|Example):`)
	walk = func(c *cobra.Command) {
		path := c.CommandPath()
		out, err := run(t, append(strings.Fields(path)[1:], "--help")...)
		if err != nil {
			t.Errorf("%s --help: %v", path, err)
		}
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if strings.Contains(f.Usage, "`") {
				t.Errorf("%s --%s: usage has a backtick, which pflag turns into the value's name", path, f.Name)
			}
		})
		for _, bad := range []*regexp.Regexp{floatInt, noStop} {
			if m := bad.FindString(out); m != "" {
				t.Errorf("%s --help: %q", path, m)
			}
		}
		if strings.Contains(out, "One of: ,") {
			t.Errorf("%s --help: an empty choice printed as nothing", path)
		}
		seen := map[string]int{}
		for _, m := range regexp.MustCompile(`(?m)^\s+[a-z_]+  (--[a-z0-9-]+)  `).FindAllStringSubmatch(out, -1) {
			seen[m[1]]++
		}
		for _, m := range regexp.MustCompile(`(?m)^\s+(--[a-z0-9-]+) `).FindAllStringSubmatch(out, -1) {
			seen[m[1]]++
		}
		for flag, n := range seen {
			if n > 1 {
				t.Errorf("%s --help lists %s %d times", path, flag, n)
			}
		}
		if c.Short != "" && strings.ToUpper(c.Short[:1]) != c.Short[:1] {
			t.Errorf("%s: summary %q starts lower-case", path, c.Short)
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd())
}
