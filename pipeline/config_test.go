package pipeline_test

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"

	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/pipeline"
)

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// flags returns a flag set with the testcopy stage's flags and two global
// ones, parsed from args.
func flags(t *testing.T, args ...string) map[string]*pflag.Flag {
	t.Helper()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	spec, _ := pipeline.Lookup("testcopy")
	if err := pipeline.AddStageFlags(fs, spec); err != nil {
		t.Fatal(err)
	}
	if err := pipeline.AddKeyFlag(fs, "run", "run.name", "run name"); err != nil {
		t.Fatal(err)
	}
	if err := pipeline.AddKeyFlag(fs, "parallelism", "pipeline.parallelism", ""); err != nil {
		t.Fatal(err)
	}
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return pipeline.FlagKeys(fs)
}

func TestConfigPrecedence(t *testing.T) {
	file := writeFile(t, "c.yaml", `
run:
  name: from-file
stages:
  testcopy:
    threshold: 0.6
    rows: 7
    shards: 3
    sources: [x, y, z]
`)
	env := []string{"EVOLM_STAGES_TESTCOPY_THRESHOLD=0.7", "EVOLM_STAGES_TESTCOPY_ROWS=8", "EVOLM_RUN_NAME=from-env",
		"EVOLM_STAGES_TESTCOPY_SOURCES=p,q", "EVOLM_ROOT=/ignored", "PATH=/bin"}
	type view struct {
		Threshold float64
		Rows      int
		Shards    int
		Mode      string
		Run       string
		Sources   []string
		Timeout   time.Duration
		Par       int
	}
	tests := []struct {
		name  string
		opts  pipeline.LoadOptions
		want  view
		wantS map[string]string // key → Source
	}{
		{"defaults", pipeline.LoadOptions{},
			view{0.5, 50, 4, "fast", "default", []string{"a", "b"}, 30 * time.Second, 2},
			map[string]string{"stages.testcopy.threshold": "default"}},
		{"file over defaults", pipeline.LoadOptions{File: file},
			view{0.6, 7, 3, "fast", "from-file", []string{"x", "y", "z"}, 30 * time.Second, 2},
			map[string]string{"stages.testcopy.threshold": "config file " + file}},
		{"env over file", pipeline.LoadOptions{File: file, Env: env},
			view{0.7, 8, 3, "fast", "from-env", []string{"p", "q"}, 30 * time.Second, 2},
			map[string]string{"stages.testcopy.threshold": "env EVOLM_STAGES_TESTCOPY_THRESHOLD", "stages.testcopy.shards": "config file " + file}},
		{"flags over env", pipeline.LoadOptions{File: file, Env: env, Flags: flags(t, "--threshold=0.8", "--run", "from-flag", "--sources", "f1,f2", "--timeout", "2m", "--parallelism", "5")},
			view{0.8, 8, 3, "fast", "from-flag", []string{"f1", "f2"}, 2 * time.Minute, 5},
			map[string]string{"stages.testcopy.threshold": "flag --threshold", "stages.testcopy.rows": "env EVOLM_STAGES_TESTCOPY_ROWS"}},
		{"unset flags do not mask", pipeline.LoadOptions{File: file, Env: env, Flags: flags(t)},
			view{0.7, 8, 3, "fast", "from-env", []string{"p", "q"}, 30 * time.Second, 2}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := pipeline.LoadConfig(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			s := cfg.Section("stages.testcopy")
			got := view{s.Float("threshold"), s.Int("rows"), s.Int("shards"), s.String("mode"), cfg.String("run.name"),
				s.Strings("sources"), s.Duration("timeout"), cfg.Int("pipeline.parallelism")}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			for k, want := range tc.wantS {
				if got := cfg.Source(k); got != want {
					t.Errorf("Source(%s) = %q, want %q", k, got, want)
				}
			}
		})
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		file string // YAML body; "" for none
		env  []string
		args []string
		want []string
	}{
		{"unknown key in file", "stages:\n  testcopy:\n    treshold: 0.3\n", nil, nil,
			[]string{"c.yaml: unknown key stages.testcopy.treshold", "did you mean stages.testcopy.threshold?"}},
		{"unknown top-level key", "runn:\n  name: x\n", nil, nil, []string{"unknown key runn.name"}},
		{"unknown stage", "stages:\n  nosuch:\n    x: 1\n", nil, nil, []string{"unknown key stages.nosuch.x"}},
		{"bad yaml", "stages: [\n", nil, nil, []string{"c.yaml"}},
		{"wrong type in file", "stages:\n  testcopy:\n    rows: many\n", nil, nil,
			[]string{"config key stages.testcopy.rows (from config file", `want int, got "many"`}},
		{"fractional int", "stages:\n  testcopy:\n    rows: 2.5\n", nil, nil, []string{"config key stages.testcopy.rows", "want int"}},
		{"wrong type in env", "", []string{"EVOLM_STAGES_TESTCOPY_THRESHOLD=high"}, nil,
			[]string{"config key stages.testcopy.threshold (from env EVOLM_STAGES_TESTCOPY_THRESHOLD)", `want float, got "high"`}},
		{"bad duration", "", []string{"EVOLM_STAGES_TESTCOPY_TIMEOUT=soon"}, nil,
			[]string{"config key stages.testcopy.timeout", "want duration"}},
		{"enum", "stages:\n  testcopy:\n    mode: slow\n", nil, nil,
			[]string{"config key stages.testcopy.mode", `"slow" is not one of fast, exact`}},
		{"enum from flag", "", nil, []string{"--mode", "slow"}, []string{"config key stages.testcopy.mode (from flag --mode)"}},
		{"unknown stage env var", "", []string{"EVOLM_STAGES_TESTCOPY_TRESHOLD=0.3"}, nil,
			[]string{"env EVOLM_STAGES_TESTCOPY_TRESHOLD: no such config key"}},
		{"missing file", "-", nil, nil, []string{"nope.yaml", "no such file"}},
		{"NaN in env", "", []string{"EVOLM_STAGES_TESTCOPY_THRESHOLD=NaN"}, nil,
			[]string{"config key stages.testcopy.threshold (from env EVOLM_STAGES_TESTCOPY_THRESHOLD)", "want a finite float, got NaN"}},
		{"Inf in env", "", []string{"EVOLM_STAGES_TESTCOPY_THRESHOLD=-Inf"}, nil,
			[]string{"config key stages.testcopy.threshold (from env", "want a finite float, got -Inf"}},
		{"NaN in file", "stages:\n  testcopy:\n    threshold: .nan\n", nil, nil,
			[]string{"config key stages.testcopy.threshold (from config file", "want a finite float, got NaN"}},
		{"Inf in file", "stages:\n  testcopy:\n    threshold: .inf\n", nil, nil,
			[]string{"config key stages.testcopy.threshold (from config file", "want a finite float, got +Inf"}},
		{"Inf for an int", "stages:\n  testcopy:\n    rows: .inf\n", nil, nil,
			[]string{"config key stages.testcopy.rows (from config file", "want int"}},
		{"NaN flag", "", nil, []string{"--threshold", "NaN"},
			[]string{"config key stages.testcopy.threshold (from flag --threshold)", "want a finite float, got NaN"}},
		{"empty env var", "", []string{"EVOLM_STAGES_TESTCOPY_ROWS="}, nil,
			[]string{"env EVOLM_STAGES_TESTCOPY_ROWS: empty value for config key stages.testcopy.rows"}},
		{"empty float env var", "", []string{"EVOLM_STAGES_TESTCOPY_THRESHOLD="}, nil,
			[]string{"env EVOLM_STAGES_TESTCOPY_THRESHOLD: empty value"}},
		{"unknown empty section", "stagez:\n", nil, nil, []string{"c.yaml: unknown key stagez"}},
		{"unknown section as map", "stagez: {}\nrun:\n  name: x\n", nil, nil, []string{"c.yaml: unknown key stagez"}},
		{"unknown stage section", "stages:\n  dedupp: {}\n", nil, nil, []string{"c.yaml: unknown key stages.dedupp"}},
		{"mapping for a key the env sets", "stages:\n  testcopy:\n    mode: {}\n", []string{"EVOLM_STAGES_TESTCOPY_MODE=fast"}, nil,
			[]string{"c.yaml: key stages.testcopy.mode: want string, got a mapping"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts := pipeline.LoadOptions{Env: tc.env}
			switch tc.file {
			case "":
			case "-":
				opts.File = filepath.Join(t.TempDir(), "nope.yaml")
			default:
				opts.File = writeFile(t, "c.yaml", tc.file)
			}
			if tc.args != nil {
				opts.Flags = flags(t, tc.args...)
			}
			_, err := pipeline.LoadConfig(opts)
			testutil.ErrorContains(t, err, "LoadConfig succeeded", tc.want...)
		})
	}
}

func TestConfigPrintAndHash(t *testing.T) {
	cfg := loadConfig(t)
	b, err := cfg.YAML()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"stages:\n  testcopy:\n", "    threshold: 0.5\n", "    timeout: 30s\n", "    sources:\n      - a\n", "pipeline:\n"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("YAML lacks %q:\n%s", want, b)
		}
	}
	// The printed YAML loads back as a config file with the same values.
	again, err := pipeline.LoadConfig(pipeline.LoadOptions{File: writeFile(t, "printed.yaml", string(b))})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(cfg.Map(), again.Map()); diff != "" {
		t.Errorf("reloaded config (-want +got):\n%s", diff)
	}
	h := cfg.Section("stages.testcopy").Hash()
	if h2 := again.Section("stages.testcopy").Hash(); h2 != h {
		t.Errorf("hash not stable: %s vs %s", h, h2)
	}
	other := loadConfig(t, "EVOLM_STAGES_TESTCOPY_ROWS=51")
	if other.Section("stages.testcopy").Hash() == h {
		t.Error("hash ignores a changed value")
	}
	// Keys outside the stage's section do not change its hash.
	if loadConfig(t, "EVOLM_RUN_NAME=x").Section("stages.testcopy").Hash() != h {
		t.Error("hash depends on keys outside the section")
	}
}

func TestConfigEmptyStringEnvIsAValue(t *testing.T) {
	// An empty string is a string; only typed keys refuse "".
	cfg := loadConfig(t, "EVOLM_RUN_DIR=", "EVOLM_STAGES_TESTCOPY_SOURCES=")
	if cfg.String("run.dir") != "" || len(cfg.Section("stages.testcopy").Strings("sources")) != 0 {
		t.Errorf("run.dir %q, sources %v", cfg.String("run.dir"), cfg.Section("stages.testcopy").Strings("sources"))
	}
}

func TestStageConfigRefusesNaN(t *testing.T) {
	for _, v := range []any{math.NaN(), math.Inf(1), "NaN"} {
		if _, err := pipeline.StageConfig("testcopy", map[string]any{"threshold": v}); err == nil || !strings.Contains(err.Error(), "stages.testcopy.threshold") {
			t.Errorf("threshold %v: %v", v, err)
		}
	}
}

func TestStageConfig(t *testing.T) {
	cfg, err := pipeline.StageConfig("testcopy", map[string]any{"rows": 3, "sources": []string{"s"}})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Int("rows") != 3 || cfg.Int("shards") != 4 || cfg.Strings("sources")[0] != "s" {
		t.Errorf("StageConfig = %v", cfg.Map())
	}
	if _, err := pipeline.StageConfig("testcopy", map[string]any{"nope": 1}); err == nil || !strings.Contains(err.Error(), "stages.testcopy.nope") {
		t.Errorf("unknown key: %v", err)
	}
	if _, err := pipeline.StageConfig("testcopy", map[string]any{"mode": "x"}); err == nil || !strings.Contains(err.Error(), "stages.testcopy.mode") {
		t.Errorf("bad enum: %v", err)
	}
	// The constructor reports its own checks with the full key.
	bad, _ := pipeline.StageConfig("testcopy", map[string]any{"shards": 0})
	if _, err := newTestStageFromConfig(bad); err == nil || !strings.Contains(err.Error(), "config key stages.testcopy.shards") {
		t.Errorf("constructor error: %v", err)
	}
}
