//go:build e2e

package run

// The loop with generation on a fleet (stages.run.generation_backend openai,
// package stages/roles/fleet): `evolm run` against `evolm serve` child
// processes, with LoRA sync (vLLM's runtime LoRA API) and full-weight sync
// (SGLang's update_weights_from_disk), and the fleet's faults.

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/serving/openai"
)

// fleetServer is a running `evolm serve` child.
type fleetServer struct {
	url    string // http://host:port/v1
	cmd    *exec.Cmd
	mu     sync.Mutex
	out    strings.Builder
	exited chan struct{}
}

func (s *fleetServer) output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.String()
}

// startFleetServer serves the policy checkpoint as the run's servers do:
// one thread, one request per engine call (so that its samples equal the
// in-process engine's), thinking off, runtime LoRA and weight updates on;
// env adds failpoints.
func startFleetServer(t *testing.T, e demoEnv, env ...string) *fleetServer {
	t.Helper()
	cmd := exec.Command(e.bin, "serve", "--model", filepath.Join(e.models, "policy"), "--addr", "127.0.0.1:0", "--threads", "1",
		"--max-batch", "1", "--coalesce", "1", "--engine-calls", "1", "--disable-thinking", "--enable-lora",
		"--enable-weight-updates", "--load-root", os.TempDir()) // the runs' sync directories are test temporaries
	cmd.Env = append(os.Environ(), env...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &fleetServer{cmd: cmd, exited: make(chan struct{})}
	urlc := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`addr=(http://[0-9.:]+/v1)`)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			s.mu.Lock()
			s.out.WriteString(sc.Text() + "\n")
			s.mu.Unlock()
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case urlc <- m[1]:
				default:
				}
			}
		}
	}()
	go func() { _ = cmd.Wait(); pw.Close(); close(s.exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-s.exited
		if t.Failed() {
			t.Logf("evolm serve output:\n%s", s.output())
		}
	})
	select {
	case s.url = <-urlc:
	case <-s.exited:
		t.Fatalf("evolm serve exited before listening:\n%s", s.output())
	case <-time.After(5 * time.Minute):
		t.Fatalf("evolm serve did not listen:\n%s", s.output())
	}
	return s
}

// fleetConfig is the demo loop cut to 4 steps (policy, policy, rubric,
// rubric) with small groups, one engine thread and one sequence per batch,
// plus extra stages.run lines.
func (e demoEnv) fleetConfig(t *testing.T, dir, name, extra string) string {
	t.Helper()
	cfg := fmt.Sprintf(`stages:
  run:
    input: [%s]
    steps: 4
    k: 2
    prompts_per_step: 3
    samples: 2
    rubric_samples: 2
    checkpoint_every: 2
    temporal_min_age: 1
    temporal_max_age: 2
    lr: 1.0e-3
    seed: 5
%sroles:
  policy:
    model: %s
    max_tokens: 8
    threads: 1
    max_batch: 1
    disable_thinking: true
  rubric_generator:
    max_tokens: 8
  judge:
    model: %s
    mode: yesno
    threads: 1
pipeline:
  progress: "off"
log:
  level: warn
`, e.prompts, extra, filepath.Join(e.models, "policy"), filepath.Join(e.models, "judge"))
	p := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(p, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func fleetLines(urls ...string) string {
	return fmt.Sprintf("    generation_backend: openai\n    generation_endpoints: [%s]\n    generation_max_attempts: 8\n", strings.Join(urls, ", "))
}

// rowCounts counts each table's rows by (phase, step).
func rowCounts(t *testing.T, run string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, r := range readTable(t, run, schemas.Rollouts) {
		out[fmt.Sprintf("rollouts %s %d %s", r.Phase, r.Step, r.Role)]++
	}
	for _, r := range readTable(t, run, schemas.Rubrics) {
		out[fmt.Sprintf("rubrics %s %d", r.Phase, r.Step)]++
	}
	for _, r := range readTable(t, run, schemas.Judgments) {
		out[fmt.Sprintf("judgments %s %d", r.Phase, r.Step)]++
	}
	for _, r := range readTable(t, run, schemas.Pairs) {
		out[fmt.Sprintf("pairs %d", r.Step)]++
	}
	out["steps"] = len(readTable(t, run, schemas.Steps))
	return out
}

// checkVersions checks that every rollout of the trained role came from its
// step's version (want(step) is the model name its answers carry), with the
// server's token ids, and that every rollout id is unique.
func checkVersions(t *testing.T, run string, want func(step int64) string) []schemas.Rollout {
	t.Helper()
	rolls := readTable(t, run, schemas.Rollouts)
	seen := map[string]bool{}
	for _, r := range rolls {
		if seen[r.RolloutID] {
			t.Errorf("rollout %s appears twice", r.RolloutID)
		}
		seen[r.RolloutID] = true
		if r.Error != nil {
			t.Errorf("rollout %s failed: %s", r.RolloutID, *r.Error)
			continue
		}
		if r.Model != want(r.Step) {
			t.Errorf("rollout %s (step %d) came from %q, want %q", r.RolloutID, r.Step, r.Model, want(r.Step))
		}
		if r.TokenIDsSource == nil || *r.TokenIDsSource != "server" {
			t.Errorf("rollout %s: token ids from %v, want the server's", r.RolloutID, r.TokenIDsSource)
		}
	}
	if len(rolls) == 0 {
		t.Fatal("no rollouts")
	}
	return rolls
}

// adapterVersion is the model name of run's LoRA version at each step.
func adapterVersion(run string) func(int64) string {
	return func(step int64) string { return openai.VersionName(openai.FleetRunName(run), "policy", int(step)) }
}

// twoServers runs the loop of config "two" (lora, or "" for full weights,
// plus extra stages.run lines) on two fresh `evolm serve` processes and
// checks it against the in-process run ref: every row from its step's
// version (version(run)), the same row counts, and each server's log
// showing that it loaded weights (loaded).
func twoServers(t *testing.T, e demoEnv, dir, ref, lora, extra string, version func(run string) func(int64) string, loaded string) {
	t.Helper()
	a, b := startFleetServer(t, e), startFleetServer(t, e)
	two := filepath.Join(dir, "two-servers")
	run(t, e.bin, "run", "--config", e.fleetConfig(t, dir, "two", lora+fleetLines(a.url, b.url)+extra), "--run-dir", two)
	checkVersions(t, two, version(two))
	if g, w := rowCounts(t, two), rowCounts(t, ref); !maps.Equal(g, w) {
		t.Errorf("two servers: row counts %v, in process %v", g, w)
	}
	for _, s := range []*fleetServer{a, b} {
		if !strings.Contains(s.output(), loaded) {
			t.Errorf("server %s never logged %q", s.url, loaded)
		}
	}
}

func sortedRolls(rs []schemas.Rollout) []schemas.Rollout {
	sort.Slice(rs, func(i, j int) bool { return rs[i].RolloutID < rs[j].RolloutID })
	return rs
}

// TestE2EFleetLoRA: the loop on one server equals the in-process loop row
// for row (text and token ids), and on two servers with LoRA sync writes the
// same tables, every row from its step's adapter.
func TestE2EFleetLoRA(t *testing.T) {
	e := setup(t)
	dir := t.TempDir()
	lora := "    lora_rank: 4\n    lora_alpha: 8\n"
	ref := filepath.Join(dir, "in-process")
	run(t, e.bin, "run", "--config", e.fleetConfig(t, dir, "ref", lora), "--run-dir", ref)

	one := startFleetServer(t, e)
	single := filepath.Join(dir, "one-server")
	run(t, e.bin, "run", "--config", e.fleetConfig(t, dir, "one", lora+fleetLines(one.url)), "--run-dir", single)
	got := sortedRolls(checkVersions(t, single, adapterVersion(single)))
	want := sortedRolls(readTable(t, ref, schemas.Rollouts))
	if len(got) != len(want) {
		t.Fatalf("one server: %d rollouts, in process %d", len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.RolloutID != w.RolloutID || g.Text != w.Text || !slices.Equal(g.TokenIDs, w.TokenIDs) || !slices.Equal(g.TokenLogprobs, w.TokenLogprobs) {
			t.Errorf("rollout %s: one server gave %q %v, in process %s %q %v", g.RolloutID, g.Text, g.TokenIDs, w.RolloutID, w.Text, w.TokenIDs)
			break
		}
	}

	twoServers(t, e, dir, ref, lora, "", adapterVersion, "LoRA adapter loaded")
}

// TestE2EFleetFullWeights: full fine-tuning with SGLang's
// update_weights_from_disk on two servers (and tis_cap on) writes the same
// tables as the in-process loop, every row from its step's checkpoint; so
// does a learner of 2 data-parallel ranks on the fleet.
func TestE2EFleetFullWeights(t *testing.T) {
	e := setup(t)
	dir := t.TempDir()
	ref := filepath.Join(dir, "in-process")
	run(t, e.bin, "run", "--config", e.fleetConfig(t, dir, "ref", ""), "--run-dir", ref)
	// With truncated importance sampling against the servers' log-probs.
	checkpointDir := func(run string) func(int64) string {
		return func(step int64) string { return openai.VersionDir(filepath.Join(run, "sync"), "policy", int(step)) }
	}
	twoServers(t, e, dir, ref, "", "    tis_cap: 2\n", checkpointDir, "weights updated from disk")

	// Two learner ranks (--nproc 2, ZeRO-2) on the fleet: rank 0 syncs the
	// weights and sends every generation; the tables are the same.
	a, b := startFleetServer(t, e), startFleetServer(t, e)
	dp := filepath.Join(dir, "dp")
	run(t, e.bin, "run", "--config", e.fleetConfig(t, dir, "dp", fleetLines(a.url, b.url)+"    zero_stage: 2\n"), "--run-dir", dp, "--nproc", "2")
	checkVersions(t, dp, checkpointDir(dp))
	if g, w := rowCounts(t, dp), rowCounts(t, ref); !maps.Equal(g, w) {
		t.Errorf("2 ranks on the fleet: row counts %v, in process %v", g, w)
	}
}

// TestE2EFleetFaults: a server that refuses the new adapter is taken out of
// rotation and the step completes on the other; a server killed mid-step
// has its requests retried on the other, one row per request; when every
// server fails to load a version the run stops before the step writes
// anything, and --resume completes it once the servers are back.
func TestE2EFleetFaults(t *testing.T) {
	e := setup(t)
	dir := t.TempDir()
	lora := "    lora_rank: 4\n    lora_alpha: 8\n"
	ref := filepath.Join(dir, "in-process")
	run(t, e.bin, "run", "--config", e.fleetConfig(t, dir, "ref", lora), "--run-dir", ref)
	wantCounts := rowCounts(t, ref)

	t.Run("refuses the adapter", func(t *testing.T) {
		good, bad := startFleetServer(t, e), startFleetServer(t, e, "EVOLM_FAILPOINT=serve-load-adapter@2")
		rd := filepath.Join(dir, "refuse")
		cmd := exec.Command(e.bin, "run", "--config", e.fleetConfig(t, dir, "refuse", lora+fleetLines(bad.url, good.url)), "--run-dir", rd, "--log-level", "warn")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("run: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), "out of rotation") || !strings.Contains(string(out), bad.url) {
			t.Errorf("the refusing server was not reported out of rotation:\n%s", out)
		}
		checkVersions(t, rd, adapterVersion(rd))
		if g := rowCounts(t, rd); !maps.Equal(g, wantCounts) {
			t.Errorf("row counts %v, in process %v", g, wantCounts)
		}
	})

	t.Run("killed mid-step", func(t *testing.T) {
		// The victim dies at its 4th request, in step 0's rollouts.
		victim, other := startFleetServer(t, e, "EVOLM_FAILPOINT=serve-request@4"), startFleetServer(t, e)
		rd := filepath.Join(dir, "killed")
		run(t, e.bin, "run", "--config", e.fleetConfig(t, dir, "killed", lora+fleetLines(victim.url, other.url)), "--run-dir", rd)
		select {
		case <-victim.exited:
		default:
			t.Fatal("the victim server is still running: the failpoint did not fire")
		}
		checkVersions(t, rd, adapterVersion(rd))
		if g := rowCounts(t, rd); !maps.Equal(g, wantCounts) {
			t.Errorf("row counts %v, in process %v", g, wantCounts)
		}
	})

	t.Run("every server fails to sync", func(t *testing.T) {
		a := startFleetServer(t, e, "EVOLM_FAILPOINT=serve-load-adapter@2")
		b := startFleetServer(t, e, "EVOLM_FAILPOINT=serve-load-adapter@2")
		rd := filepath.Join(dir, "all-fail")
		out, err := exec.Command(e.bin, "run", "--config", e.fleetConfig(t, dir, "all-fail", lora+fleetLines(a.url, b.url)), "--run-dir", rd).CombinedOutput()
		if err == nil {
			t.Fatalf("the run succeeded with no server able to load step 1's adapter:\n%s", out)
		}
		for _, w := range []string{"step 1", "no endpoint loaded version", a.url, b.url, "--resume"} {
			if !strings.Contains(string(out), w) {
				t.Errorf("error does not name %q:\n%s", w, out)
			}
		}
		for _, r := range readTable(t, rd, schemas.Rollouts) {
			if r.Step >= 1 {
				t.Fatalf("rollout %s of step %d was committed although its weights never reached a server", r.RolloutID, r.Step)
			}
		}
		c, d := startFleetServer(t, e), startFleetServer(t, e)
		run(t, e.bin, "run", "--resume", rd, "--generation-endpoints", c.url+","+d.url)
		checkVersions(t, rd, adapterVersion(rd))
		if g := rowCounts(t, rd); !maps.Equal(g, wantCounts) {
			t.Errorf("resumed: row counts %v, in process %v", g, wantCounts)
		}
	})
}
