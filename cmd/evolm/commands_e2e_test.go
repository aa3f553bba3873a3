//go:build e2e

package main

// TestCommandsTable runs the command table of docs/commands.md: the docs and
// the CLI cannot drift apart. The convention (stated under the table): the
// table of the section "## Commands" holds one example per row, in
// backticks in its third cell, written as a user types it. The test runs
// every example in order, as written, in a scratch directory that holds tiny
// random checkpoints and small data sets at the paths the docs name
// (models/…, data/…, adapters/policy, stages/presets/paper.yaml), with
// EVOLM_* variables that shrink the work (a few tokens, steps and items).
// The only rewrites are of model paths and devices (readmeRewrites: the
// checkpoints of a paper-length run become the two-step run's, cuda becomes
// cpu), and `evolm serve` listens on a free loopback port instead of its
// --addr and is stopped once /v1/models answers with its --model-id. The test also fails when a command of `evolm --help` has no
// row.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/evolm/evolm/datasets"
	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/model/lora"
	"github.com/evolm/evolm/model/modeltest"
)

// readmeExample is one row of docs/commands.md's command table.
type readmeExample struct {
	line    int    // 1-based line in docs/commands.md
	command string // the first cell, unquoted
	example string // the third cell, unquoted
}

// readmeExamples returns the rows of the table under "## Commands".
func readmeExamples(t *testing.T, readme string) []readmeExample {
	t.Helper()
	var out []readmeExample
	in := false
	for i, line := range strings.Split(readme, "\n") {
		switch {
		case strings.HasPrefix(line, "#"):
			in = line == "# Commands"
			continue
		case !in || !strings.HasPrefix(line, "| `"):
			continue
		}
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		ex := strings.TrimSpace(cells[len(cells)-1])
		if len(cells) < 3 || !strings.HasPrefix(ex, "`") || !strings.HasSuffix(ex, "`") || strings.Count(ex, "`") != 2 {
			t.Fatalf("docs/commands.md:%d: a row of the command table must end in one example in backticks: %s", i+1, line)
		}
		out = append(out, readmeExample{line: i + 1, command: strings.Trim(cells[0], "`"), example: strings.Trim(ex, "`")})
	}
	if len(out) == 0 {
		t.Fatal("docs/commands.md: no command table under # Commands")
	}
	return out
}

// shellWords splits a command line as sh would for the examples:
// words separated by blanks, single and double quotes removed, leading
// NAME=value words returned as environment.
func shellWords(line string) (env, args []string, err error) {
	var words []string
	var cur strings.Builder
	inWord := false
	var quote rune
	for _, r := range line {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case strings.ContainsRune("|&;<>()$`\\*?[", r):
			return nil, nil, fmt.Errorf("unquoted %q: the examples are single commands with literal arguments", r)
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, nil, fmt.Errorf("unterminated quote")
	}
	if inWord {
		words = append(words, cur.String())
	}
	assign := regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)
	for len(words) > 0 && assign.MatchString(words[0]) {
		env, words = append(env, words[0]), words[1:]
	}
	return env, words, nil
}

// binCommands lists the command paths below path ("evolm model init", …)
// that the built binary's help lists, without cobra's help and completion.
// (The test binary registers test doubles: the built one has only the real
// commands.)
func binCommands(t *testing.T, bin, path string) []string {
	t.Helper()
	out, err := exec.Command(bin, append(strings.Fields(path)[1:], "--help")...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s --help: %v\n%s", path, err, out)
	}
	_, list, ok := strings.Cut(string(out), "\nAvailable Commands:\n")
	if !ok {
		return []string{path}
	}
	var cmds []string
	for _, line := range strings.Split(list, "\n") {
		if !strings.HasPrefix(line, "  ") {
			break
		}
		name := strings.Fields(line)[0]
		if name == "help" || name == "completion" {
			continue
		}
		cmds = append(cmds, binCommands(t, bin, path+" "+name)...)
	}
	return cmds
}

// readmeFixtures lays out dir as docs/data.md's "Getting data and weights"
// leaves a checkout: tiny random checkpoints under models/, the Tulu 3 mixture
// (6 prompts of the sample set) as the Hub stores it under data/tulu3, a
// RewardBench-2 download under data/reward-bench-2, a LoRA adapter of the
// policy under adapters/policy, the paper preset, and a clone of the
// official repository under EvoLM holding the test double of its prompt
// module (syntheticTemplates).
func readmeFixtures(t *testing.T, dir, root string) {
	t.Helper()
	writeTo(t, filepath.Join(dir, "EvoLM", syntheticModule), func(w io.Writer) error {
		_, err := io.WriteString(w, syntheticTemplates)
		return err
	})
	for seed, name := range []string{"Qwen3-8B", "Qwen3-1.7B", "other-judge"} {
		modeltest.InitTiny(t, filepath.Join(dir, "models", name), int64(seed+1))
	}
	rows, err := datasets.ReadAll([]string{filepath.Join(root, datasets.SamplePath)}, datasets.Options{})
	if err != nil {
		t.Fatal(err)
	}
	writeTo(t, filepath.Join(dir, "data", "tulu3", "data", "train-00000-of-00001.parquet"), func(w io.Writer) error {
		return datasets.WriteParquet(w, rows[:6])
	})
	writeTo(t, filepath.Join(dir, "data", "reward-bench-2", "data", "test-00000-of-00001.jsonl"), func(w io.Writer) error {
		_, err := io.WriteString(w, `{"id": "0", "prompt": "What is 2+2?", "chosen": ["4"], "rejected": ["5", "3", "22"], "num_correct": 1, "subset": "Math"}
{"id": "1", "prompt": "Why is the sky blue?", "chosen": ["Rayleigh scattering."], "rejected": ["Cats.", "Because.", "Pizza."], "num_correct": 1, "subset": "Focus"}
`)
		return err
	})
	writeTo(t, filepath.Join(dir, "data", "sft.jsonl"), func(w io.Writer) error {
		_, err := io.WriteString(w, `{"messages": [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"}]}
{"messages": [{"role": "user", "content": "Why is the sky blue?"}, {"role": "assistant", "content": "Rayleigh scattering."}]}
`)
		return err
	})
	writeTo(t, filepath.Join(dir, "data", "eval_prompts.jsonl"), func(w io.Writer) error {
		_, err := io.WriteString(w, `{"question": "What is 2+2?"}
{"question": "Why is the sky blue?"}
`)
		return err
	})
	base := filepath.Join(dir, "models", "Qwen3-8B")
	m, err := model.Load(base, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ad, err := lora.New(m, lora.Config{Rank: 4, Alpha: 8}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := ad.Save(filepath.Join(dir, "adapters", "policy"), base); err != nil {
		t.Fatal(err)
	}
	ad.Close()
	paper, err := os.ReadFile(filepath.Join(root, "stages", "presets", "paper.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	writeTo(t, filepath.Join(dir, "stages", "presets", "paper.yaml"), func(w io.Writer) error {
		_, err := w.Write(paper)
		return err
	})
}

func writeTo(t *testing.T, path string, write func(io.Writer) error) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := write(f); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// readmeRewrites are the only changes made to the examples: model paths
// and devices. The examples name checkpoints of a paper-length run; the
// shrunken run has two steps. Every test runs on the CPU.
var readmeRewrites = strings.NewReplacer(
	"runs/paper/checkpoints/step-000025/", "runs/paper/checkpoints/step-000001/",
	"runs/paper/checkpoints/step-000050/", "runs/paper/checkpoints/step-000002/",
)

func rewriteArgs(args []string) []string {
	out := slices.Clone(args)
	for i := range out {
		out[i] = readmeRewrites.Replace(out[i])
		if i > 0 && strings.HasSuffix(out[i-1], "-device") && strings.HasPrefix(out[i], "cuda") {
			out[i] = "cpu"
		}
	}
	return out
}

// readmeEnv shrinks the paper preset's work to seconds on tiny CPU models:
// the examples themselves stay as written.
var readmeEnv = []string{
	"EVOLM_PIPELINE_PROGRESS=off", "EVOLM_LOG_LEVEL=warn",
	"EVOLM_ROLES_POLICY_DEVICE=cpu", "EVOLM_ROLES_JUDGE_DEVICE=cpu", "EVOLM_ROLES_POLICY_THREADS=1", "EVOLM_ROLES_JUDGE_THREADS=1",
	"EVOLM_ROLES_POLICY_MAX_TOKENS=8", "EVOLM_ROLES_RUBRIC_GENERATOR_MAX_TOKENS=8", "EVOLM_ROLES_JUDGE_MAX_TOKENS=8",
	// Random models never write a parsable judgment: the yes/no judge scores
	// without parsing, as in the demo.
	"EVOLM_ROLES_JUDGE_MODE=yesno",
	"EVOLM_STAGES_ROLLOUT_N=2",
	"EVOLM_STAGES_RUN_STEPS=2", "EVOLM_STAGES_RUN_K=1", "EVOLM_STAGES_RUN_PROMPTS_PER_STEP=2",
	"EVOLM_STAGES_RUN_SAMPLES=2", "EVOLM_STAGES_RUN_RUBRIC_SAMPLES=2", "EVOLM_STAGES_RUN_CHECKPOINT_EVERY=1",
	"EVOLM_STAGES_RUN_TEMPORAL_MIN_AGE=1", "EVOLM_STAGES_RUN_TEMPORAL_MAX_AGE=2",
	"EVOLM_STAGES_REPLAY_N=2", "EVOLM_STAGES_EVAL_LIMIT=2", "EVOLM_STAGES_EVAL_BOOTSTRAP_SAMPLES=20",
	// The yes/no judge cannot be asked under a rubric with no criterion.
	"EVOLM_STAGES_RUN_UNUSABLE_RUBRIC=zero",
}

func TestCommandsTable(t *testing.T) {
	root := testutil.Root(t)
	readme, err := os.ReadFile(filepath.Join(root, "docs", "commands.md"))
	if err != nil {
		t.Fatal(err)
	}
	examples := readmeExamples(t, string(readme))

	// Every command of `evolm --help` has a row whose example runs it.
	cli := newRootCmd()
	covered := map[string]bool{}
	parsed := make([][]string, len(examples))
	envs := make([][]string, len(examples))
	for i, ex := range examples {
		env, args, err := shellWords(ex.example)
		if err != nil || len(args) < 2 || args[0] != "evolm" {
			t.Fatalf("docs/commands.md:%d: example %q: want `[NAME=value …] evolm …` (%v)", ex.line, ex.example, err)
		}
		cmd, _, err := cli.Find(args[1:])
		if err != nil || cmd == cli {
			t.Fatalf("docs/commands.md:%d: example %q names no evolm command (%v)", ex.line, ex.example, err)
		}
		covered[cmd.CommandPath()] = true
		parsed[i], envs[i] = args, env
	}
	bin := evolmBin(t)
	for _, c := range binCommands(t, bin, "evolm") {
		if !covered[c] {
			t.Errorf("docs/commands.md: `%s` (in `evolm --help`) has no example in the command table under ## Commands", c)
		}
	}

	dir := t.TempDir()
	readmeFixtures(t, dir, root)
	baseEnv := append(append(os.Environ(), "EVOLM_ROOT="+root), readmeEnv...)
	runIn := func(what string, env, args []string) {
		t.Helper()
		start := time.Now()
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		cmd.Env = append(slices.Clone(baseEnv), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: `%s` failed: %v\n%s", what, strings.Join(args, " "), err, out)
		}
		t.Logf("%s: %.1fs", what, time.Since(start).Seconds())
	}
	// The run the examples read: the paper preset's first step (docs/commands.md,
	// "Real Qwen3 checkpoints on a GPU machine").
	runIn("setup", nil, []string{"--config", "stages/presets/paper.yaml", "dedup", "--run", "paper"})
	for i, ex := range examples {
		what := fmt.Sprintf("docs/commands.md:%d", ex.line)
		if parsed[i][1] == "serve" {
			readmeServe(t, what, bin, dir, append(slices.Clone(baseEnv), envs[i]...), parsed[i][1:])
			continue
		}
		runIn(what, envs[i], rewriteArgs(parsed[i][1:]))
	}
}

// readmeServe starts the serve example on a free loopback port, checks that
// /v1/models answers (with the example's API key) naming its --model-id,
// and stops it with SIGINT.
func readmeServe(t *testing.T, what, bin, dir string, env, args []string) {
	t.Helper()
	args = slices.Clone(args)
	modelID := ""
	for i := 0; i+1 < len(args); i++ {
		switch args[i] {
		case "--addr":
			args[i+1] = "127.0.0.1:0"
		case "--model-id":
			modelID = args[i+1]
		}
	}
	apiKey := ""
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "EVOLM_API_KEY="); ok {
			apiKey = v
		}
	}
	cmd := exec.Command(bin, append(args, "--log-level", "info", "--threads", "1")...)
	cmd.Dir = dir
	cmd.Env = env
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGINT)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Errorf("%s: evolm serve did not stop within 30s of SIGINT", what)
		}
	}()
	addrc := make(chan string, 1)
	var log strings.Builder
	go func() {
		re := regexp.MustCompile(`addr=http://([0-9.:]+)/v1`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addrc <- m[1]:
				default:
				}
			}
		}
		close(addrc)
	}()
	var addr string
	select {
	case a, ok := <-addrc:
		if !ok {
			t.Fatalf("%s: evolm serve exited before listening:\n%s", what, log.String())
		}
		addr = a
	case <-time.After(2 * time.Minute):
		t.Fatalf("%s: evolm serve did not listen within 2 minutes", what)
	}
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/v1/models", nil)
	if err != nil {
		t.Fatal(err)
	}
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s: GET /v1/models: %v", what, err)
	}
	defer resp.Body.Close()
	var body struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: GET /v1/models: HTTP %d, %v", what, resp.StatusCode, err)
	}
	if modelID != "" && (len(body.Data) != 1 || body.Data[0].ID != modelID) {
		t.Errorf("%s: /v1/models lists %+v, want the --model-id %q", what, body.Data, modelID)
	}
}
