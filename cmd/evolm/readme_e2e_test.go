//go:build e2e

package main

// TestReadmeBlocks runs the README's code blocks as written. The convention
// (stated in the README): every ```sh and ```python block runs, in order, in
// a directory laid out as a checkout after `make demo` — bin/evolm,
// build/demo.yaml, the demo's tiny models and its run in runs/ — unless its
// first line is a comment saying "not run by the tests" and why (a GPU, a
// download, make itself). A sh block is one command a line, run as sh would
// split it (no pipes or variables); `bin/evolm serve` starts in the
// background and serves until the test ends. A python block runs with the
// project's venv.

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/evolm/evolm/internal/testutil"
)

// readmeBlock is one fenced code block of README.md.
type readmeBlock struct {
	line int    // 1-based line of its opening fence
	lang string // sh or python
	body []string
}

// readmeBlocks returns README.md's sh and python blocks.
func readmeBlocks(t *testing.T, readme string) []readmeBlock {
	t.Helper()
	var out []readmeBlock
	var cur *readmeBlock
	for i, line := range strings.Split(readme, "\n") {
		switch {
		case cur == nil && strings.HasPrefix(line, "```"):
			lang := strings.TrimPrefix(line, "```")
			cur = &readmeBlock{line: i + 1, lang: lang}
		case cur != nil && line == "```":
			if cur.lang == "sh" || cur.lang == "python" {
				out = append(out, *cur)
			}
			cur = nil
		case cur != nil:
			cur.body = append(cur.body, line)
		}
	}
	if cur != nil {
		t.Fatalf("README.md:%d: unterminated code block", cur.line)
	}
	return out
}

func (b readmeBlock) skipped() bool {
	return len(b.body) > 0 && strings.HasPrefix(b.body[0], "# not run by the tests")
}

// readmeDemo lays dir out as a checkout after `make demo`, doing what the
// Makefile's demo target does, and returns the environment to run in.
func readmeDemo(t *testing.T, dir, root, bin string) []string {
	t.Helper()
	for _, d := range []string{"datasets", "stages", "scripts", "notebooks", ".venv", "node_modules"} {
		if err := os.Symlink(filepath.Join(root, d), filepath.Join(dir, d)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bin, filepath.Join(dir, "bin", "evolm")); err != nil {
		t.Fatal(err)
	}
	preset, err := os.ReadFile(filepath.Join(root, "stages", "presets", "demo.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	models := filepath.Join(dir, "runs", "demo-models")
	if err := os.MkdirAll(filepath.Join(dir, "build"), 0o755); err != nil {
		t.Fatal(err)
	}
	demo := strings.ReplaceAll(string(preset), "runs/demo-models/", models+"/")
	if err := os.WriteFile(filepath.Join(dir, "build", "demo.yaml"), []byte(demo), 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "EVOLM_ROOT="+root, "EVOLM_PROGRESS=off")
	run := func(args ...string) {
		cmd := exec.Command(bin, args...)
		cmd.Dir, cmd.Env = dir, env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("make demo's step `evolm %s`: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run("model", "init", "--arch", "qwen3", "--preset", "tiny", "--seed", "1", "--out", filepath.Join(models, "policy"))
	run("model", "init", "--arch", "qwen3", "--preset", "tiny", "--seed", "2", "--out", filepath.Join(models, "judge"))
	for _, stage := range [][]string{{"dedup"}, {"run"}, {"analyze", "rubrics"}, {"export"}} {
		run(append([]string{"--config", "build/demo.yaml", "--run-dir", "runs/demo"}, stage...)...)
	}
	return env
}

func TestReadmeBlocks(t *testing.T) {
	root := testutil.Root(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := readmeBlocks(t, string(readme))
	if len(blocks) < 5 {
		t.Fatalf("README.md: %d code blocks; want the worked examples", len(blocks))
	}
	dir := t.TempDir()
	bin := testutil.BuildEvolm(t, t.TempDir())
	env := readmeDemo(t, dir, root, bin)
	python := testutil.Python(t)
	ran := 0
	for _, b := range blocks {
		what := fmt.Sprintf("README.md:%d", b.line)
		if b.skipped() {
			t.Logf("%s: %s", what, strings.TrimPrefix(b.body[0], "# "))
			continue
		}
		start := time.Now()
		switch b.lang {
		case "python":
			cmd := exec.Command(python, "-c", strings.Join(b.body, "\n"))
			cmd.Dir, cmd.Env = dir, env
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s: the python block failed: %v\n%s", what, err, out)
			}
			// The DuckDB example prints the steps rows of both phases and
			// the pairs per strategy, not an empty result.
			if code := strings.Join(b.body, "\n"); strings.Contains(code, "duckdb") {
				for _, want := range []string{"policy", "rubric", "temporal"} {
					if !strings.Contains(string(out), want) {
						t.Errorf("%s: the DuckDB example printed no %q rows:\n%s", what, want, out)
					}
				}
			}
		case "sh":
			for k, line := range b.body {
				if strings.TrimSpace(line) == "" || strings.HasPrefix(strings.TrimSpace(line), "#") {
					continue
				}
				where := fmt.Sprintf("README.md:%d", b.line+1+k)
				vars, args, err := shellWords(line)
				if err != nil || len(args) == 0 || args[0] != "bin/evolm" {
					t.Fatalf("%s: %q: a README command runs bin/evolm as sh would split it (%v)", where, line, err)
				}
				cmd := exec.Command(bin, args[1:]...)
				cmd.Dir, cmd.Env = dir, append(append([]string(nil), env...), vars...)
				if len(args) > 1 && args[1] == "serve" {
					readmeBackground(t, where, cmd, args)
					continue
				}
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("%s: `%s` failed: %v\n%s", where, line, err, out)
				}
			}
		}
		ran++
		t.Logf("%s: %.1fs", what, time.Since(start).Seconds())
	}
	if ran == 0 {
		t.Fatal("README.md: no block ran")
	}
}

// readmeBackground starts `evolm serve` in the background at the --addr it was
// given, waits until it answers, and stops it when the test ends.
func readmeBackground(t *testing.T, where string, cmd *exec.Cmd, args []string) {
	t.Helper()
	addr := ""
	for i, a := range args {
		if a == "--addr" && i+1 < len(args) {
			addr = args[i+1]
		}
	}
	if addr == "" {
		t.Fatalf("%s: serve without --addr", where)
	}
	if ln, err := net.Listen("tcp", addr); err != nil {
		t.Fatalf("%s: %s is taken by another process; the README's example needs it free: %v", where, addr, err)
	} else {
		ln.Close()
	}
	log, err := os.Create(filepath.Join(t.TempDir(), "serve.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		<-exited
	})
	// Until it answers, or exits: loading the model has no time limit here
	// (go test's -timeout bounds the whole run).
	for {
		resp, err := http.Get("http://" + addr + "/v1/models")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case werr := <-exited:
			exited <- werr
			out, _ := os.ReadFile(log.Name())
			t.Fatalf("%s: evolm serve exited before answering /v1/models: %v\n%s", where, werr, out)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
