package track_test

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/pipeline/track"
)

// mlflowServer is a real `mlflow server` from the venv on a SQLite store.
type mlflowServer struct {
	URI  string
	port int
	dir  string
	mlf  string // the mlflow command
	cmd  *exec.Cmd
	out  *bytes.Buffer
	dead chan struct{}
}

// The package's server, started by the first test that needs one and
// stopped by TestMain.
var shared struct {
	once sync.Once
	srv  *mlflowServer
	err  error
}

// sharedMLflow returns the package's tracking server.
func sharedMLflow(t *testing.T) *mlflowServer {
	t.Helper()
	shared.once.Do(func() {
		dir, err := os.MkdirTemp("", "evolm-mlflow-")
		if err != nil {
			shared.err = err
			return
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			shared.err = err
			return
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		s := &mlflowServer{URI: fmt.Sprintf("http://127.0.0.1:%d", port), port: port, dir: dir,
			mlf: filepath.Join(filepath.Dir(testutil.Python(t)), "mlflow")}
		shared.srv, shared.err = s, s.start()
	})
	if shared.err != nil {
		t.Fatalf("mlflow server: %v", shared.err)
	}
	return shared.srv
}

func TestMain(m *testing.M) {
	code := m.Run()
	if s := shared.srv; s != nil {
		s.stop()
		os.RemoveAll(s.dir)
	}
	os.Exit(code)
}

// watchdog runs its arguments as a child and, should the test binary die
// (a test timeout skips TestMain's cleanup), kills its process group: the
// server and its workers never outlive the tests.
const watchdog = `import os, signal, subprocess, sys, time
parent = os.getppid()
child = subprocess.Popen(sys.argv[1:])
while child.poll() is None:
    if os.getppid() != parent:
        os.killpg(0, signal.SIGKILL)
    time.sleep(0.5)
sys.exit(child.returncode)`

// start runs the server (its own process group, so that stop ends its
// workers too) and waits until /health answers or the server exits.
func (s *mlflowServer) start() error {
	s.out = &bytes.Buffer{}
	s.cmd = exec.Command(filepath.Join(filepath.Dir(s.mlf), "python"), "-c", watchdog, s.mlf, "server",
		"--backend-store-uri", "sqlite:///"+filepath.Join(s.dir, "mlflow.db"),
		"--default-artifact-root", filepath.Join(s.dir, "artifacts"), "--host", "127.0.0.1", "--port", fmt.Sprint(s.port), "--workers", "1")
	// The job runner spawns workers the tests do not need.
	s.cmd.Env = append(os.Environ(), "MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false")
	s.cmd.Dir = s.dir
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		return err
	}
	s.dead = make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(s.dead) }()
	for {
		select {
		case <-s.dead:
			return fmt.Errorf("mlflow server exited: %v\n%s", s.cmd.ProcessState, s.out.String())
		case <-time.After(200 * time.Millisecond):
		}
		resp, err := http.Get(s.URI + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
	}
}

// stop ends the server's process group: SIGTERM, then SIGKILL.
func (s *mlflowServer) stop() {
	s.signal(syscall.SIGTERM)
	select {
	case <-s.dead:
	case <-time.After(15 * time.Second):
		s.signal(syscall.SIGKILL)
		<-s.dead
	}
}

// kill ends the server's process group at once, as a crash would.
func (s *mlflowServer) kill() {
	s.signal(syscall.SIGKILL)
	<-s.dead
}

func (s *mlflowServer) signal(sig syscall.Signal) { _ = syscall.Kill(-s.cmd.Process.Pid, sig) }

// mlflowRunID is the run id the tracker keeps in the run directory.
func mlflowRunID(t *testing.T, run string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(run, "trackers", "mlflow.json"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(b), `"run_id": "`)
	id, _, _ := strings.Cut(rest, `"`)
	return id
}

// TestMLflowReadBack: a real tracking server holds, read through
// MlflowClient, every steps column at every step equal to the steps table
// (NaN included), the configuration as params, the version, config hash
// and checkpoints as tags. A resumed session (after a crash at step 9 from
// a checkpoint at step 6) continues the same run and sends no step twice.
// (The server killed and restarted mid-run: the e2e test.)
func TestMLflowReadBack(t *testing.T) {
	srv := sharedMLflow(t)
	dir := t.TempDir()
	rows := stepRows(12)
	writeSteps(t, dir, rows)
	log, _ := newLog()
	s := track.Settings{Trackers: []string{"mlflow"}, MLflowURI: srv.URI, MLflowExperiment: "evolm-test", RunName: "readback",
		Tags: map[string]string{"team": "rl"}, Queue: 100, FlushTimeout: 10 * time.Minute}
	if last := reportRows(t, s, runInfo(dir), rows[:10], log); last != -1 {
		t.Fatalf("a new run's tracker holds step %d", last)
	}
	id := mlflowRunID(t, dir)
	if last := reportRows(t, s, runInfo(dir), rows[6:], log); last != 9 {
		t.Fatalf("resumed tracker holds up to step %d, want 9", last)
	}
	if got := mlflowRunID(t, dir); got != id {
		t.Fatalf("resumed run id %s, want %s", got, id)
	}
	rep := check(t, dir, "--mlflow", srv.URI, id)["mlflow"]
	if rep.Steps != 12 || rep.Tags < 30 || rep.Status != "FINISHED" || rep.Params != len(runInfo(dir).Params) {
		t.Errorf("mlflow: %+v", rep)
	}
	for _, k := range []string{"evolm.version", "evolm.config_hash", "evolm.checkpoint.step-000004", "evolm.checkpoint.step-000008", "evolm.last_checkpoint"} {
		if rep.Tagged[k] == nil {
			t.Errorf("mlflow tag %s missing: %v", k, rep.Tagged)
		}
	}
}

// TestMLflowStartErrors: a tracking URI that is not an http(s) server, or
// a server that does not answer, stops the run at start.
func TestMLflowStartErrors(t *testing.T) {
	log, _ := newLog()
	_, err := track.Open(t.Context(), track.Settings{Trackers: []string{"mlflow"}, MLflowURI: "file:///tmp/mlruns", Queue: 1}, runInfo(t.TempDir()), log)
	testutil.ErrorContains(t, err, "a file store", "tracker mlflow", "file:///tmp/mlruns", "http(s) URL of a tracking server")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	uri := "http://" + l.Addr().String()
	l.Close() // nothing listens there now
	_, err = track.Open(t.Context(), track.Settings{Trackers: []string{"mlflow"}, MLflowURI: uri, MLflowExperiment: "x", Queue: 1}, runInfo(t.TempDir()), log)
	testutil.ErrorContains(t, err, "no server", "tracker mlflow", uri, "connection refused", "mlflow server")
}
