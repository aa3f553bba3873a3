//go:build e2e

package main

// The reliability suite (docs/reliability.md: run directories, checkpoints' model
// files, config, inputs): each test runs the built binary on a case a new
// user hit and checks it now fails with an error naming the culprit, or
// works. docs/reliability.md lists the cases and their behaviour.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/evolm/evolm/datasets"
	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/internal/testutil/sttest"
	"github.com/evolm/evolm/internal/testutil/synthrun"
	"github.com/evolm/evolm/model/safetensors"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
	binOut  []byte
)

// evolmBin builds the binary once per test process.
func evolmBin(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "evolm-reliability-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "evolm")
		build := exec.Command("go", "build", "-o", binPath, "./cmd/evolm")
		build.Dir = testutil.Root(t)
		binOut, binErr = build.CombinedOutput()
	})
	if binErr != nil {
		t.Fatalf("go build: %v\n%s", binErr, binOut)
	}
	return binPath
}

// evolm runs the binary with extra env vars and returns its combined output.
func evolm(t *testing.T, env []string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(evolmBin(t), append(args, "--progress", "off", "--log-level", "warn")...)
	cmd.Dir = testutil.Root(t)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func wantFail(t *testing.T, out string, err error, wants ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("succeeded, want an error containing %q:\n%s", wants, out)
	}
	if strings.Contains(out, "panic") {
		t.Errorf("panicked:\n%s", out)
	}
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
}

func sample(t *testing.T) string { return filepath.Join(testutil.Root(t), datasets.SamplePath) }

// dedupRun deduplicates the sample set into a fresh run with several
// prompts shards.
func dedupRun(t *testing.T) string {
	t.Helper()
	run := filepath.Join(t.TempDir(), "run")
	if out, err := evolm(t, nil, "dedup", "--input", sample(t), "--run-dir", run, "--shard-rows", "40"); err != nil {
		t.Fatalf("dedup: %v\n%s", err, out)
	}
	return run
}

// --- run directories -------------------------------------------------------

func TestReliabilityRunLock(t *testing.T) {
	run := filepath.Join(t.TempDir(), "run")
	r, err := pipeline.OpenRun(run)
	if err != nil {
		t.Fatal(err)
	}
	// This process holds the dedup lock, and a live writer's temp file sits
	// under prompts/ beside a crashed writer's.
	unlock, err := r.LockStage("dedup")
	if err != nil {
		t.Fatal(err)
	}
	live, err := pipeline.CreateShard(r.Path("prompts/part-00099.parquet"), schemas.Prompts.Schema(), pipeline.WriteOptions{Mem: memory.NewGoAllocator()})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Abort()
	dead := r.Path("prompts/.part-00098.parquet.0123456789ab.tmp")
	if err := os.WriteFile(dead, []byte("partial"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := evolm(t, nil, "dedup", "--input", sample(t), "--run-dir", run)
	wantFail(t, out, err, "stage dedup is already running in process "+strconv.Itoa(os.Getpid()))
	unlock()
	if out, err := evolm(t, nil, "dedup", "--input", sample(t), "--run-dir", run); err != nil {
		t.Fatalf("dedup after the lock was released: %v\n%s", err, out)
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("the dead writer's temp file was not swept: %v", err)
	}
	if m, _ := filepath.Glob(r.Path("prompts/.part-00099.parquet.*.tmp")); len(m) != 1 {
		t.Errorf("the live writer's temp file was swept: %v", m)
	}
}

// Two dedup runs on one run directory at once, with different thresholds:
// one waits for nothing and fails naming the other's pid, or runs after it;
// neither panics, and the run directory verifies.
func TestReliabilityConcurrentDedup(t *testing.T) {
	run := filepath.Join(t.TempDir(), "run")
	outs := make([]string, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, th := range []string{"0.7", "0.5"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i], errs[i] = evolm(t, nil, "dedup", "--input", sample(t), "--run-dir", run, "--shard-rows", "20", "--threshold", th)
		}()
	}
	wg.Wait()
	ok := 0
	for i := range outs {
		if strings.Contains(outs[i], "panic") {
			t.Errorf("run %d panicked:\n%s", i, outs[i])
		}
		switch {
		case errs[i] == nil:
			ok++
		case strings.Contains(outs[i], "stage dedup is already running in process"),
			// The later run found the other's committed shards under
			// another threshold.
			strings.Contains(outs[i], "holds shards made with config"):
		default:
			t.Errorf("run %d: %v\n%s", i, errs[i], outs[i])
		}
	}
	if ok == 0 {
		t.Errorf("neither run succeeded:\n%s\n%s", outs[0], outs[1])
	}
	if out, err := evolm(t, nil, "inspect", "--verify", run); err != nil {
		t.Errorf("inspect --verify after concurrent runs: %v\n%s", err, out)
	}
	if ents, _ := os.ReadDir(filepath.Join(run, "_work", "dedup")); len(ents) != 0 {
		t.Errorf("spill directories left behind: %v", ents)
	}
}

func TestReliabilityDamagedShards(t *testing.T) {
	part := func(i int) string { return filepath.Join("prompts", pipeline.ShardName(i)) }
	tests := []struct {
		name   string
		damage func(t *testing.T, run string)
		want   string
	}{
		{"swapped", func(t *testing.T, run string) {
			b, _ := os.ReadFile(filepath.Join(run, part(2)))
			os.WriteFile(filepath.Join(run, part(1)), b, 0o644)
		}, part(1)},
		{"deleted", func(t *testing.T, run string) {
			os.Remove(filepath.Join(run, part(1)))
		}, part(1) + ": committed in the manifest but the file is gone"},
		{"row count edited", func(t *testing.T, run string) {
			p := filepath.Join(run, "_manifests", "dedup.json")
			var m pipeline.Manifest
			b, _ := os.ReadFile(p)
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			for k := range m.Shards {
				if m.Shards[k].Path == "prompts/"+pipeline.ShardName(1) {
					m.Shards[k].Rows++
				}
			}
			b, _ = json.Marshal(m)
			os.WriteFile(p, b, 0o644)
		}, part(1)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			run := dedupRun(t)
			if out, err := evolm(t, nil, "inspect", "--verify", run); err != nil {
				t.Fatalf("inspect --verify of an intact run: %v\n%s", err, out)
			}
			tc.damage(t, run)
			for _, args := range [][]string{{"inspect", run}, {"inspect", "--verify", run}} {
				out, err := evolm(t, nil, args...)
				wantFail(t, out, err, tc.want, "do not match their manifest")
			}
		})
	}
}

func TestReliabilityVerifyListsStrays(t *testing.T) {
	run := dedupRun(t)
	b, _ := os.ReadFile(filepath.Join(run, "prompts", pipeline.ShardName(0)))
	os.WriteFile(filepath.Join(run, "prompts", "part-00777.parquet"), b, 0o644)
	out, err := evolm(t, nil, "inspect", "--verify", run)
	if err != nil {
		t.Fatalf("inspect --verify: %v\n%s", err, out)
	}
	if !strings.Contains(out, "stray files") || !strings.Contains(out, "prompts/part-00777.parquet") {
		t.Errorf("inspect --verify does not list the stray file:\n%s", out)
	}
}

// The case that put step-1 rollouts under step 0: a committed step-0
// shard replaced by a step-1 one. Export refuses it, naming the file.
func TestReliabilityExportRefusesSwappedStep(t *testing.T) {
	run := filepath.Join(t.TempDir(), "run")
	if _, err := synthrun.Write(context.Background(), memory.NewGoAllocator(), run, synthrun.Options{Steps: 4}); err != nil {
		t.Fatal(err)
	}
	step0, _ := filepath.Glob(filepath.Join(run, "rollouts", "phase=policy", "step=0", "*", "*.parquet"))
	step1, _ := filepath.Glob(filepath.Join(run, "rollouts", "phase=policy", "step=1", "*", "*.parquet"))
	if len(step0) == 0 || len(step1) == 0 {
		t.Fatalf("synthetic run lacks policy rollouts of steps 0 and 1: %v %v", step0, step1)
	}
	b, _ := os.ReadFile(step1[0])
	os.WriteFile(step0[0], b, 0o644)
	out, err := evolm(t, nil, "export", "--run-dir", run)
	wantFail(t, out, err, step0[0])
	if m, _ := filepath.Glob(filepath.Join(run, "export_responses", "*.parquet")); len(m) != 0 {
		t.Errorf("export wrote %v from a damaged run", m)
	}
}

// --- checkpoints' model files ---------------------------------------------

func TestReliabilityNaNWeights(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tiny")
	if out, err := evolm(t, nil, "model", "init", "--arch", "qwen3", "--preset", "tiny", "--seed", "1", "--out", dir); err != nil {
		t.Fatalf("model init: %v\n%s", err, out)
	}
	const name = "model.layers.0.mlp.down_proj.weight"
	path := filepath.Join(dir, safetensors.SingleFile)
	sttest.SetF32(t, path, name, float32(math.NaN()), 4)
	// serve loads the model before it listens: it must stop there.
	cmd := exec.Command(evolmBin(t), "serve", "--model", dir, "--addr", "127.0.0.1:0")
	var out bytes.Buffer
	pipe, _ := cmd.StdoutPipe()
	cmd.Stderr = cmd.Stdout // one pipe for both
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(pipe)
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), "serving") {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("serve loaded a checkpoint with NaN weights:\n%s", out.String())
		}
	}
	err := cmd.Wait()
	wantFail(t, out.String(), err, name+": 4 of", "NaN or Inf")
}

// --- config ----------------------------------------------------------------

func TestReliabilityConfig(t *testing.T) {
	tmp := t.TempDir()
	nanFile := filepath.Join(tmp, "nan.yaml")
	os.WriteFile(nanFile, []byte("stages:\n  dedup:\n    threshold: .nan\n"), 0o644)
	typo := filepath.Join(tmp, "typo.yaml")
	os.WriteFile(typo, []byte("stagez:\nrun:\n  name: x\n"), 0o644)
	run := filepath.Join(tmp, "run")
	dedup := []string{"dedup", "--input", sample(t), "--run-dir", run}
	tests := []struct {
		name string
		env  []string
		args []string
		want []string
	}{
		{"NaN threshold in env", []string{"EVOLM_STAGES_DEDUP_THRESHOLD=NaN"}, dedup,
			[]string{"config key stages.dedup.threshold (from env EVOLM_STAGES_DEDUP_THRESHOLD)", "want a finite float, got NaN"}},
		{"NaN alpha in env", []string{"EVOLM_STAGES_RUN_ALPHA=NaN"}, []string{"config", "print"},
			[]string{"config key stages.run.alpha (from env EVOLM_STAGES_RUN_ALPHA)", "want a finite float"}},
		{"Inf flag", nil, append(dedup, "--threshold", "+Inf"),
			[]string{"config key stages.dedup.threshold (from flag --threshold)", "want a finite float, got +Inf"}},
		{"NaN in the config file", nil, []string{"--config", nanFile, "config", "print"},
			[]string{"config key stages.dedup.threshold (from config file " + nanFile + ")", "want a finite float, got NaN"}},
		{"empty env var", []string{"EVOLM_STAGES_DEDUP_BANDS="}, dedup,
			[]string{"env EVOLM_STAGES_DEDUP_BANDS: empty value for config key stages.dedup.bands"}},
		{"unknown section", nil, []string{"--config", typo, "config", "print"},
			[]string{typo + ": unknown key stagez"}},
		{"huge bands", nil, append(dedup, "--bands", "100000", "--band-rows", "100000"),
			[]string{"config key stages.dedup.bands (from flag --bands)", "want in [1, 4096]"}},
		{"huge band product", nil, append(dedup, "--bands", "1000", "--band-rows", "1000"),
			[]string{"config key stages.dedup.bands", "1000000 MinHash permutations, want at most 4096"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := evolm(t, tc.env, tc.args...)
			wantFail(t, out, err, tc.want...)
			if _, err := os.Stat(filepath.Join(run, "_manifests", "dedup.json")); err == nil {
				t.Errorf("a refused config committed shards")
			}
		})
	}
}

// --- inputs ----------------------------------------------------------------

func TestReliabilityInputs(t *testing.T) {
	tmp := t.TempDir()
	in := filepath.Join(tmp, "in")
	os.MkdirAll(in, 0o755)
	b, err := os.ReadFile(sample(t))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(in, "a.parquet"), b, 0o644)
	os.WriteFile(filepath.Join(in, "b.parquet"), b, 0o644)

	t.Run("glob", func(t *testing.T) {
		run := filepath.Join(tmp, "glob")
		out, err := evolm(t, nil, "dedup", "--input", filepath.Join(in, "*.parquet"), "--run-dir", run)
		if err != nil {
			t.Fatalf("dedup of a glob: %v\n%s", err, out)
		}
		// b.parquet repeats a.parquet: every row of it is an exact duplicate.
		single := filepath.Join(tmp, "single")
		if out, err := evolm(t, nil, "dedup", "--input", filepath.Join(in, "a.parquet"), "--run-dir", single); err != nil {
			t.Fatalf("dedup: %v\n%s", err, out)
		}
		rows := func(dir string) int64 {
			r, _ := pipeline.OpenRun(dir)
			m, err := r.Manifest("dedup")
			if err != nil {
				t.Fatal(err)
			}
			return m.Rows("prompts")
		}
		if got, want := rows(run), rows(single); got != want || got == 0 {
			t.Errorf("glob over a file and its copy kept %d prompts, the file alone %d", got, want)
		}
	})
	t.Run("glob matching nothing", func(t *testing.T) {
		pat := filepath.Join(tmp, "none", "*.parquet")
		out, err := evolm(t, nil, "dedup", "--input", pat, "--run-dir", filepath.Join(tmp, "none-run"))
		wantFail(t, out, err, pat, "matches no file")
	})
	t.Run("whitespace-only prompt", func(t *testing.T) {
		p := filepath.Join(tmp, "ws.jsonl")
		var lines []string
		for i, prompt := range []string{"What is the capital of France?", " \t\n ", "Name three primes."} {
			msgs := []map[string]string{{"role": "user", "content": prompt}, {"role": "assistant", "content": "ok"}}
			row, _ := json.Marshal(map[string]any{"id": "r" + strconv.Itoa(i), "prompt": prompt, "chosen": msgs, "rejected": msgs, "source": "test"})
			lines = append(lines, string(row))
		}
		os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
		out, err := evolm(t, nil, "dedup", "--input", p, "--run-dir", filepath.Join(tmp, "ws-run"))
		wantFail(t, out, err, p+" row 1 (id \"r1\")", "only whitespace")
	})
}
