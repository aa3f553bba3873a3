//go:build e2e

package main

// The reliability suite of `evolm serve` (docs/reliability.md):
// each test starts the real command in a child process (this test binary
// re-run as the CLI, see TestServeHelperProcess) on a loopback address, with
// a tiny random Qwen3 checkpoint, and checks one hostile case. The load is
// bounded: a handful of requests per test.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/model"
	"github.com/evolm/evolm/serving/server/servertest"
)

// TestServeHelperProcess is not a test: run with EVOLM_SERVE_HELPER set to
// a JSON list of arguments, it is `evolm` with those arguments, optionally
// under an address-space cap (EVOLM_SERVE_HELPER_AS: bytes above what the
// process maps at start).
func TestServeHelperProcess(t *testing.T) {
	spec := os.Getenv("EVOLM_SERVE_HELPER")
	if spec == "" {
		t.Skip("helper process for the serve e2e tests")
	}
	var args []string
	if err := json.Unmarshal([]byte(spec), &args); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if extra := os.Getenv("EVOLM_SERVE_HELPER_AS"); extra != "" {
		var n uint64
		fmt.Sscan(extra, &n)
		cur := vmSize()
		lim := &syscall.Rlimit{Cur: cur + n, Max: cur + n}
		if err := syscall.Setrlimit(syscall.RLIMIT_AS, lim); err != nil {
			fmt.Fprintln(os.Stderr, "setrlimit:", err)
			os.Exit(2)
		}
		fmt.Fprintf(os.Stderr, "address space capped at %d MiB\n", (cur+n)>>20)
	}
	cmd := newRootCmd()
	cmd.SetArgs(args)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { // stop when the parent closes our stdin
		io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	if err := cmd.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "evolm:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// vmSize is this process's mapped address space in bytes.
func vmSize() uint64 {
	b, _ := os.ReadFile("/proc/self/status")
	m := regexp.MustCompile(`VmSize:\s+(\d+) kB`).FindSubmatch(b)
	var kb uint64
	if m != nil {
		fmt.Sscan(string(m[1]), &kb)
	}
	return kb << 10
}

var (
	tinyOnce sync.Once
	tinyDir  string
	tinyErr  error
)

// tinyCheckpoint is a tiny random Qwen3 checkpoint shared by these tests.
func tinyCheckpoint(t *testing.T) string {
	t.Helper()
	tinyOnce.Do(func() {
		tinyDir, tinyErr = os.MkdirTemp("", "evolm-serve-e2e")
		if tinyErr == nil {
			tinyDir = filepath.Join(tinyDir, "tiny")
			_, tinyErr = model.Init(model.InitOptions{Arch: "qwen3", Preset: "tiny", Seed: 1, OutDir: tinyDir})
		}
	})
	if tinyErr != nil {
		t.Fatal(tinyErr)
	}
	return tinyDir
}

// server is a running `evolm serve` child.
type serveProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	addr   string // host:port
	mu     sync.Mutex
	stderr bytes.Buffer
	exited chan error
}

// startServe runs `evolm serve --model <tiny> --addr 127.0.0.1:0 args…` in a
// child process (capped at asExtra bytes of address space above its start
// when > 0) and waits for it to listen.
func startServe(t *testing.T, asExtra uint64, env []string, args ...string) *serveProc {
	t.Helper()
	full := append([]string{"serve", "--model", tinyCheckpoint(t), "--addr", "127.0.0.1:0", "--threads", "1"}, args...)
	spec, _ := json.Marshal(full)
	cmd := exec.Command(os.Args[0], "-test.run=^TestServeHelperProcess$")
	cmd.Env = append(os.Environ(), "EVOLM_SERVE_HELPER="+string(spec))
	if asExtra > 0 {
		cmd.Env = append(cmd.Env, fmt.Sprintf("EVOLM_SERVE_HELPER_AS=%d", asExtra))
	}
	cmd.Env = append(cmd.Env, env...)
	s := &serveProc{cmd: cmd, exited: make(chan error, 1)}
	var err error
	if s.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	cmd.Stdout = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addrc := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`addr=http://([0-9.:]+)/v1`)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			s.mu.Lock()
			s.stderr.WriteString(sc.Text() + "\n")
			s.mu.Unlock()
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addrc <- m[1]:
				default:
				}
			}
		}
	}()
	go func() { s.exited <- cmd.Wait(); pw.Close() }()
	t.Cleanup(func() {
		s.stdin.Close()
		select {
		case <-s.exited:
		case <-time.After(time.Minute):
			cmd.Process.Kill()
			<-s.exited
		}
		if t.Failed() {
			t.Logf("server output:\n%s", s.output())
		}
	})
	select {
	case s.addr = <-addrc:
	case err := <-s.exited:
		t.Fatalf("evolm serve exited before listening: %v\n%s", err, s.output())
	}
	return s
}

func (s *serveProc) output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stderr.String()
}

// alive fails the test when the server process has exited.
func (s *serveProc) alive(t *testing.T) {
	t.Helper()
	select {
	case err := <-s.exited:
		s.exited <- err
		t.Fatalf("evolm serve died: %v", err)
	default:
	}
	resp, err := http.Get("http://" + s.addr + "/health")
	if err != nil {
		t.Fatalf("evolm serve does not answer: %v", err)
	}
	resp.Body.Close()
}

type answer struct {
	status int
	body   map[string]any
	header http.Header
}

func (a answer) message() string {
	if e, ok := a.body["error"].(map[string]any); ok {
		m, _ := e["message"].(string)
		return m
	}
	return ""
}

func (s *serveProc) post(t *testing.T, ctx context.Context, path string, body any, hdr ...string) (answer, error) {
	t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case string:
		r = strings.NewReader(b)
	case io.Reader:
		r = b
	default:
		data, _ := json.Marshal(body)
		r = bytes.NewReader(data)
	}
	status, header, data, err := testutil.PostJSON(ctx, "http://"+s.addr+path, r, hdr...)
	if err != nil {
		return answer{}, err
	}
	a := answer{status: status, header: header}
	_ = json.Unmarshal(data, &a.body)
	return a, nil
}

func (s *serveProc) mustPost(t *testing.T, path string, body any, hdr ...string) answer {
	t.Helper()
	a, err := s.post(t, context.Background(), path, body, hdr...)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	return a
}

var small = map[string]any{"prompt": "Hello there", "max_tokens": 4, "temperature": 0}

// prompt8k is about 8,000 tokens.
var prompt8k = strings.Repeat(" hello", 8000)

// TestServeLongPromptUnderMemoryCap: an 8k-token prompt under an
// address-space cap. Prefilled in chunks it is answered; a 30k-token prompt
// sampled 128 times, whose KV caches (about 2 GB) cannot fit the cap, fails
// that request with 503,
// and the server lives on and answers the next request. (Prefill itself no
// longer outgrows the cap: its chunks keep their attention scores within
// generate.PrefillScoreElems, whatever --prefill-chunk says.)
func TestServeLongPromptUnderMemoryCap(t *testing.T) {
	const headroom = 1536 << 20
	s := startServe(t, headroom, nil)
	if a := s.mustPost(t, "/v1/completions", map[string]any{"prompt": prompt8k, "max_tokens": 2}); a.status != http.StatusOK {
		t.Errorf("8k prompt, chunked prefill, %d MiB headroom: %d %q", headroom>>20, a.status, a.message())
	}
	s.alive(t)

	whole := startServe(t, headroom, nil, "--prefill-chunk", "16384")
	a := whole.mustPost(t, "/v1/completions", map[string]any{"prompt": strings.Repeat(" hello", 30000), "max_tokens": 2, "n": 128})
	if a.status != http.StatusServiceUnavailable {
		t.Errorf("30k prompt sampled 128 times over the cap: %d %q, want 503", a.status, a.message())
	}
	whole.alive(t)
	if a := whole.mustPost(t, "/v1/completions", small); a.status != http.StatusOK {
		t.Errorf("small request after the failed one: %d %q", a.status, a.message())
	}
}

// TestServeAdmission: prompts over --max-model-len and requests over the
// --memory-budget get 400 with an OpenAI error body before any work.
func TestServeAdmission(t *testing.T) {
	s := startServe(t, 0, nil, "--max-model-len", "1024", "--memory-budget", "256MiB")
	a := s.mustPost(t, "/v1/completions", map[string]any{"prompt": prompt8k, "max_tokens": 2})
	if a.status != http.StatusBadRequest || !strings.Contains(a.message(), "maximum context length is 1024 tokens") {
		t.Errorf("prompt over --max-model-len: %d %q, want 400 with vLLM's message", a.status, a.message())
	}
	a = s.mustPost(t, "/v1/completions", map[string]any{"prompt": "Hi", "max_tokens": 1000, "n": 128})
	if a.status != http.StatusBadRequest || !strings.Contains(a.message(), "over the budget") {
		t.Errorf("request over --memory-budget: %d %q, want 400", a.status, a.message())
	}
	if a := s.mustPost(t, "/v1/chat/completions", map[string]any{"messages": []map[string]string{{"role": "user", "content": "Hi"}}, "max_tokens": 4}); a.status != http.StatusOK {
		t.Errorf("small chat: %d %q", a.status, a.message())
	}
	s.alive(t)
}

// TestServeFairness: a small request sent while a max_tokens 3000 × n 16
// request decodes is answered while the large one is still running.
func TestServeFairness(t *testing.T) {
	s := startServe(t, 0, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bigDone := make(chan answer, 1)
	go func() {
		a, _ := s.post(t, ctx, "/v1/completions", map[string]any{"prompt": "Tell a long story.", "max_tokens": 3000, "n": 16,
			"temperature": 1, "seed": 1})
		bigDone <- a
	}()
	// Let the large request reach the engine: a request answered after it
	// started proves nothing, so wait for one small round trip first. That
	// one may be merged into the large request's engine call; it is
	// answered when its own tokens are done all the same.
	if a := s.mustPost(t, "/v1/completions", small); a.status != http.StatusOK {
		t.Fatalf("small request: %d %q", a.status, a.message())
	}
	for i := 0; i < 3; i++ {
		if a := s.mustPost(t, "/v1/completions", small); a.status != http.StatusOK {
			t.Fatalf("small request %d: %d %q", i, a.status, a.message())
		}
		select {
		case a := <-bigDone:
			t.Fatalf("the large request finished (%d) before small request %d: nothing was shown", a.status, i)
		default:
		}
	}
	cancel() // the large request's client goes away; the server drops its work
	<-bigDone
	s.alive(t)
}

// TestServeBodyLimits: a 70 MB body is answered 413; a slow-loris body 408
// within --body-timeout, its connection closed; a stalled header is closed.
func TestServeBodyLimits(t *testing.T) {
	s := startServe(t, 0, nil, "--body-timeout", "1s", "--header-timeout", "1s")
	big := `{"prompt": "` + strings.Repeat("x", 70<<20) + `"}`
	if a := s.mustPost(t, "/v1/completions", big); a.status != http.StatusRequestEntityTooLarge {
		t.Errorf("70 MB body: %d %q, want 413", a.status, a.message())
	}
	// The deadlines guard against a hang; they are not a latency check.
	if st := servertest.StalledBody(t, servertest.RawConn(t, s.addr, 2*time.Minute)); st != http.StatusRequestTimeout {
		t.Errorf("slow-loris body: %d, want 408", st)
	}
	h := servertest.RawConn(t, s.addr, 2*time.Minute)
	fmt.Fprintf(h, "POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
	if _, err := io.ReadAll(h); err != nil {
		t.Errorf("slow-loris headers: %v, want the connection closed", err)
	}
	s.alive(t)
}

// TestServeAPIKey: with EVOLM_API_KEY (or --api-key, which wins) every /v1
// route needs the bearer token; /health does not.
func TestServeAPIKey(t *testing.T) {
	s := startServe(t, 0, []string{"EVOLM_API_KEY=sk-env"})
	if a := s.mustPost(t, "/v1/completions", small); a.status != http.StatusUnauthorized {
		t.Errorf("no key: %d, want 401", a.status)
	}
	if a := s.mustPost(t, "/v1/completions", small, "Authorization", "Bearer sk-env"); a.status != http.StatusOK {
		t.Errorf("key from EVOLM_API_KEY: %d %q", a.status, a.message())
	}
	resp, err := http.Get("http://" + s.addr + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /v1/models without a key: %d, want 401", resp.StatusCode)
	}
	s.alive(t)
	flag := startServe(t, 0, []string{"EVOLM_API_KEY=sk-env"}, "--api-key", "sk-flag")
	if a := flag.mustPost(t, "/v1/completions", small, "Authorization", "Bearer sk-flag"); a.status != http.StatusOK {
		t.Errorf("key from --api-key: %d %q", a.status, a.message())
	}
	if a := flag.mustPost(t, "/v1/completions", small, "Authorization", "Bearer sk-env"); a.status != http.StatusUnauthorized {
		t.Errorf("env key when --api-key is set: %d, want 401", a.status)
	}
}
