//go:build e2e

package dedup

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/pipeline/pipelinetest"
	"github.com/evolm/evolm/schemas"
)

// TestCrashSafety builds the binary, runs `evolm dedup` on an input that
// makes many shards, SIGKILLs it at several points while it writes, and
// checks after every kill that the run directory shows only committed
// shards: every visible file under the output tables is in the manifest
// with its size and checksum (temp files are hidden dot-files). The rerun
// then completes and its rows equal those of an uninterrupted run.
func TestCrashSafety(t *testing.T) {
	tmp := t.TempDir()
	bin := testutil.BuildEvolm(t, tmp)
	input, _ := writeCorpus(t, tmp, 60_000)
	args := func(run string) []string {
		return []string{"dedup", "--input", input, "--run-dir", run, "--shard-rows", "4000",
			"--parallelism", "1", "--progress", "off", "--log-level", "warn"}
	}

	ref := filepath.Join(tmp, "ref")
	if out, err := exec.Command(bin, args(ref)...).CombinedOutput(); err != nil {
		t.Fatalf("reference run: %v\n%s", err, out)
	}
	want := readPrompts(t, ref)
	if len(want) == 0 {
		t.Fatal("reference run wrote no rows")
	}
	checkCommitted(t, ref)

	run := filepath.Join(tmp, "crash")
	// Kill points: during pass 1 (no shard yet), then while the k-th
	// prompts shard is being written (its temp file is on disk).
	kills := 0
	for _, k := range []int{-1, 0, 2, 5, 9} {
		cmd := exec.Command(bin, args(run)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		killed := false
		start := time.Now()
		deadline := start.Add(10 * time.Minute)
	poll:
		for time.Now().Before(deadline) {
			select {
			case err := <-exited:
				t.Logf("kill point %d: process finished first (%v)", k, err)
				break poll
			default:
			}
			if k < 0 && time.Since(start) > 300*time.Millisecond ||
				k >= 0 && committedShards(run) >= k && writingShard(run) {
				_ = cmd.Process.Signal(syscall.SIGKILL)
				<-exited
				killed = true
				break
			}
			time.Sleep(200 * time.Microsecond)
		}
		if killed {
			kills++
			t.Logf("killed at point %d: %d shards committed, temp files %v", k, committedShards(run), tempFiles(run))
		}
		checkCommitted(t, run)
	}
	if kills < 3 {
		t.Errorf("only %d of the kills landed while writing", kills)
	}
	if out, err := exec.Command(bin, args(run)...).CombinedOutput(); err != nil {
		t.Fatalf("final rerun: %v\n%s", err, out)
	}
	checkCommitted(t, run)
	if left := tempFiles(run); len(left) != 0 {
		t.Errorf("temp files left after a complete run: %v", left)
	}
	got := readPrompts(t, run)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rows after crashes and resume differ from an uninterrupted run (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(readReport(t, ref), readReport(t, run)); diff != "" {
		t.Errorf("report differs (-want +got):\n%s", diff)
	}
}

func committedShards(run string) int {
	r, err := pipeline.OpenRun(run)
	if err != nil {
		return 0
	}
	m, err := r.Manifest(Name)
	if err != nil {
		return 0
	}
	return len(m.Shards)
}

func tempFiles(run string) []string {
	var out []string
	for _, table := range []string{schemas.Prompts.Name, schemas.DedupReport.Name} {
		ents, _ := os.ReadDir(filepath.Join(run, table))
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), ".") {
				out = append(out, table+"/"+e.Name())
			}
		}
	}
	return out
}

func writingShard(run string) bool {
	for _, f := range tempFiles(run) {
		if strings.HasPrefix(f, schemas.Prompts.Name+"/") {
			return true
		}
	}
	return false
}

// checkCommitted: every visible file of the output tables is a committed
// shard (in the manifest, right size and sha256), and every manifest entry
// exists.
func checkCommitted(t *testing.T, run string) {
	t.Helper()
	_, m := pipelinetest.Manifest(t, run, Name)
	listed := map[string]pipeline.ShardInfo{}
	for _, s := range m.Shards {
		listed[s.Path] = s
	}
	for _, table := range []string{schemas.Prompts.Name, schemas.DedupReport.Name} {
		ents, _ := os.ReadDir(filepath.Join(run, table))
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), ".") {
				continue // a temp file: hidden from readers and globs
			}
			rel := table + "/" + e.Name()
			info, ok := listed[rel]
			if !ok {
				t.Errorf("visible file %s is not in the manifest", rel)
				continue
			}
			data, err := os.ReadFile(filepath.Join(run, table, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(data)
			if int64(len(data)) != info.Bytes || hex.EncodeToString(sum[:]) != info.SHA256 {
				t.Errorf("shard %s: %d bytes sha256 %x, manifest %d bytes %s", rel, len(data), sum, info.Bytes, info.SHA256)
			}
			delete(listed, rel)
		}
	}
	for rel := range listed {
		t.Errorf("manifest lists %s, which is not on disk", rel)
	}
}
