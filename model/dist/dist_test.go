package dist

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/model/fused"
	"github.com/evolm/evolm/model/torch"
)

// The tests run each rank as a process: the test binary re-executed with
// helperEnv naming a scenario and torchrun's variables (Env) naming the
// rank, which TestMain hands to helper instead of running the tests.
const helperEnv = "EVOLM_DIST_HELPER"

func TestMain(m *testing.M) {
	if s := os.Getenv(helperEnv); s != "" {
		if err := helper(s); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// helper runs one rank of scenario s and prints its outcome on stdout.
func helper(s string) error {
	o, err := FromEnv()
	if err != nil {
		return err
	}
	o.Timeout = 60 * time.Second
	if s == "collectives" {
		o.Backend = testBackend()
	}
	if v := os.Getenv("EVOLM_DIST_TIMEOUT"); v != "" {
		if o.Timeout, err = time.ParseDuration(v); err != nil {
			return err
		}
	}
	start := time.Now()
	g, err := Init(context.Background(), o)
	if s == "absent" {
		// The other ranks never start: Init must fail, and in time.
		if err == nil {
			g.Close()
			return errors.New("init succeeded without the other ranks")
		}
		fmt.Printf("failed after %v: %v\n", time.Since(start).Round(time.Millisecond), err)
		return nil
	}
	if err != nil {
		return err
	}
	defer g.Close()
	switch s {
	case "collectives":
		live := torch.Live()
		if err := runCollectives(g); err != nil {
			return err
		}
		if n := torch.Live(); n != live {
			return fmt.Errorf("live tensors: %d before, %d after", live, n)
		}
		fmt.Println("ok")
		return nil
	case "die", "stall", "stall-group":
		// Both ranks are connected; then rank 1 dies (SIGKILL: no
		// cleanup of any kind) or stops taking part, and rank 0's next
		// collective must fail within its timeout.
		if err := g.Barrier(); err != nil {
			return err
		}
		if g.Rank() == 1 {
			if s == "die" {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}
			time.Sleep(time.Hour) // the test kills it
		}
		time.Sleep(200 * time.Millisecond)
		sc := torch.NewScope()
		defer sc.Close()
		t := sc.Ones([]int64{1024}, torch.Float32, torch.CPU)
		if err := sc.Err(); err != nil {
			return err
		}
		start := time.Now()
		call := g.WithTimeout(3 * time.Second) // stall-group: the group's 2s
		if s == "stall-group" {
			call = g
		}
		err := call.AllReduce(t, Sum)
		if err == nil {
			return errors.New("all-reduce with a dead peer succeeded")
		}
		fmt.Printf("failed after %v: %v\n", time.Since(start).Round(time.Millisecond), err)
		return nil
	}
	return fmt.Errorf("unknown scenario %q", s)
}

// runCollectives is testdata/collectives.py in Go: the same collectives in
// the same order with the same inputs and checks, so Go and Python ranks
// can make up one group. Every expected value is exact in float32.
func runCollectives(g *Group) error {
	s := torch.NewScope()
	defer s.Close()
	dev := torch.CPU
	if g.Backend() == NCCL {
		dev = torch.CUDA(g.Rank()) // LOCAL_RANK = RANK here
	}
	from := func(data []float32, shape ...int64) *torch.Tensor {
		return s.To(s.FromFloat32(data, shape...), dev, torch.Float32)
	}
	r, w := float32(g.Rank()), g.WorldSize()
	wf := float32(w)
	tri := wf * (wf + 1) / 2 // Σ (rank+1)
	idx := []float32{1, 2, 3, 4, 5}
	scaled := func(k float32) []float32 {
		out := make([]float32, len(idx))
		for i, v := range idx {
			out[i] = v * k
		}
		return out
	}
	check := func(name string, t *torch.Tensor, want []float32) error {
		if err := s.Err(); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		got, err := torch.Float32s(t)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if !slices.Equal(got, want) {
			if len(got) > 8 {
				return fmt.Errorf("%s: got %v… (%d values), want %v…", name, got[:8], len(got), want[:8])
			}
			return fmt.Errorf("%s: got %v, want %v", name, got, want)
		}
		return nil
	}

	t := from(scaled(r+1), 5)
	if err := g.AllReduce(t, Sum); err != nil {
		return err
	}
	if err := check("all-reduce sum", t, scaled(tri)); err != nil {
		return err
	}

	t = from(scaled(r+1), 5)
	if err := g.AllReduce(t, Avg); err != nil {
		return err
	}
	if err := check("all-reduce avg", t, scaled((wf+1)/2)); err != nil {
		return err
	}

	t = from([]float32{r, -r}, 2)
	if err := g.AllReduce(t, Max); err != nil {
		return err
	}
	if err := check("all-reduce max", t, []float32{wf - 1, 0}); err != nil {
		return err
	}

	t = from([]float32{r, -r}, 2)
	if err := g.AllReduce(t, Min); err != nil {
		return err
	}
	if err := check("all-reduce min", t, []float32{0, -(wf - 1)}); err != nil {
		return err
	}

	gathered := s.Empty([]int64{int64(2 * w), 3}, torch.Float32, dev)
	var want []float32
	for q := range w {
		for k := range 6 {
			want = append(want, float32(k+10*q))
		}
	}
	in := from(want[6*g.Rank():6*g.Rank()+6], 2, 3)
	if err := g.AllGather(gathered, in); err != nil {
		return err
	}
	if err := check("all-gather", gathered, want); err != nil {
		return err
	}

	t = s.Full([]int64{4}, float64(100+r), torch.Float32, dev)
	if err := g.Broadcast(t, w-1); err != nil {
		return err
	}
	if err := check("broadcast", t, slices.Repeat([]float32{float32(100 + w - 1)}, 4)); err != nil {
		return err
	}

	// A weight written by a collective: a packed copy of it (model/fused,
	// as the lm_head keeps one) must be remade, so the shim bumps the
	// weight's version.
	packed := dev == torch.CPU && fused.PackedAvailable()
	x := from([]float32{1, 1, 1, 1}, 1, 4)
	wt := s.Full([]int64{3, 4}, float64(100+r), torch.Float32, dev)
	if packed {
		fused.PackedLinear(s, x, wt, nil)
	}
	if err := g.Broadcast(wt, w-1); err != nil {
		return err
	}
	if err := check("weight broadcast", wt, slices.Repeat([]float32{float32(100 + w - 1)}, 12)); err != nil {
		return err
	}
	if packed {
		if err := check("packed linear after a broadcast", fused.PackedLinear(s, x, wt, nil), slices.Repeat([]float32{4 * float32(100+w-1)}, 3)); err != nil {
			return err
		}
	}

	// rows: (2W, 2), row i = (i+1, i+1); rank r sends rows·(r+1) and gets
	// rows 2r, 2r+1 of rows·Σ(rank+1).
	var rows, mine []float32
	for i := range 2 * w {
		v := float32(i + 1)
		rows = append(rows, v*(r+1), v*(r+1))
		if i/2 == g.Rank() {
			mine = append(mine, v*tri, v*tri)
		}
	}
	out := s.Empty([]int64{2, 2}, torch.Float32, dev)
	if err := g.ReduceScatter(out, from(rows, int64(2*w), 2), Sum); err != nil {
		return err
	}
	if err := check("reduce-scatter", out, mine); err != nil {
		return err
	}

	t = s.Full([]int64{1 << 20}, float64(r+1), torch.Float32, dev)
	if err := g.AllReduce(t, Sum); err != nil {
		return err
	}
	if err := check("all-reduce 4 MiB", t, slices.Repeat([]float32{tri}, 1<<20)); err != nil {
		return err
	}

	return g.Barrier()
}

// freePort is a TCP port free on 127.0.0.1 a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// rank is one launched rank: a helper process or a Python one.
type rank struct {
	cmd    *exec.Cmd
	out    bytes.Buffer
	done   chan error
	python bool
}

// launch starts rank r of a world of w at port: the test binary running
// scenario, or with python set, testdata/collectives.py.
func launch(t *testing.T, ctx context.Context, scenario string, r, w, port int, python bool, extra ...string) *rank {
	t.Helper()
	o := Options{WorldSize: w, MasterAddr: "127.0.0.1", MasterPort: port}
	var cmd *exec.Cmd
	if python {
		cmd = exec.CommandContext(ctx, testutil.Python(t), filepath.Join("testdata", "collectives.py"))
	} else {
		cmd = exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	}
	cmd.Env = append(append(append(os.Environ(), helperEnv+"="+scenario), Env(o, r)...), extra...)
	p := &rank{cmd: cmd, done: make(chan error, 1), python: python}
	cmd.Stdout, cmd.Stderr = &p.out, &p.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

func (p *rank) wait(t *testing.T, r int) string {
	t.Helper()
	err := <-p.done
	out := strings.TrimSpace(p.out.String())
	if err != nil {
		t.Errorf("rank %d (python %v): %v\n%s", r, p.python, err, out)
	}
	return out
}

// testBackend is the backend of TestCollectives's ranks: gloo, or with
// EVOLM_DIST_TEST_BACKEND=nccl on a CUDA build, NCCL with rank r on GPU r.
func testBackend() string {
	if b := os.Getenv("EVOLM_DIST_TEST_BACKEND"); b != "" {
		return b
	}
	return Gloo
}

// TestCollectives runs every collective on 2 and 3 ranks (gloo) and checks
// exact results. On a GPU machine built with TORCH_CUDA=1:
//
//	EVOLM_DIST_TEST_BACKEND=nccl EVOLM_DIST_TEST_WORLDS=1,2 go test -run TestCollectives ./model/dist
//
// (NCCL needs a GPU per rank.)
func TestCollectives(t *testing.T) {
	worlds := []int{2, 3}
	if v := os.Getenv("EVOLM_DIST_TEST_WORLDS"); v != "" {
		worlds = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(f)
			if err != nil || n < 1 {
				t.Fatalf("EVOLM_DIST_TEST_WORLDS=%q: want comma-separated world sizes", v)
			}
			worlds = append(worlds, n)
		}
	}
	if testBackend() == NCCL && !NCCLBuilt() {
		t.Fatal("EVOLM_DIST_TEST_BACKEND=nccl, but this build has no NCCL (make TORCH_CUDA=1 torch)")
	}
	for _, w := range worlds {
		t.Run(fmt.Sprintf("world=%d", w), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			port := freePort(t)
			var ranks []*rank
			for r := range w {
				ranks = append(ranks, launch(t, ctx, "collectives", r, w, port, false))
			}
			for r, p := range ranks {
				if out := p.wait(t, r); !strings.HasSuffix(out, "ok") {
					t.Errorf("rank %d: %s", r, out)
				}
			}
		})
	}
}

// TestPythonInterop puts Go and Python torch.distributed ranks in one gloo
// group, each side hosting the TCPStore once: the same collectives agree
// exactly, which they only can if the shim speaks c10d's store layout and
// Gloo's wire protocol.
func TestPythonInterop(t *testing.T) {
	for _, tc := range []struct {
		name   string
		python []bool // per rank
	}{
		{"go-store+python", []bool{false, true}},
		{"python-store+go", []bool{true, false}},
		{"go+python+go", []bool{false, true, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			port := freePort(t)
			var ranks []*rank
			for r, py := range tc.python {
				ranks = append(ranks, launch(t, ctx, "collectives", r, len(tc.python), port, py))
			}
			for r, p := range ranks {
				if out := p.wait(t, r); !strings.HasSuffix(out, "ok") {
					t.Errorf("rank %d (python %v): %s", r, tc.python[r], out)
				}
			}
		})
	}
}

// TestPeerFailure: rank 1 is SIGKILLed (die) or alive but silent (stall:
// per-call timeout 3s; stall-group: the group's 2s) after both connected;
// rank 0's all-reduce must fail in time with c10d's reason, never hang, and
// its process must exit (Close must not wait for the stuck collective).
// Init must fail in time when a rank never arrives (absent).
func TestPeerFailure(t *testing.T) {
	for _, tc := range []struct {
		scenario string
		world    int
		starts   int           // ranks launched
		timeout  string        // the group's
		within   time.Duration // rank 0's failure must come within
		reason   []string      // one of which the error must contain (lower case)
	}{
		{"die", 2, 2, "60s", 3 * time.Second, []string{"connection closed by peer", "connection reset"}},
		{"stall", 2, 2, "60s", 3*time.Second + time.Second, []string{"timed out after 3000ms"}},
		{"stall-group", 2, 2, "2s", 2*time.Second + time.Second, []string{"timed out"}},
		// c10d's rendezvous, as in Python: rank 0's TCPStore waits
		// timeout+1s for the clients and gives up quietly, then Gloo's
		// connect waits another timeout for rank 1's address ("Socket
		// Timeout" after 5s for 2s, the same as init_process_group).
		{"absent", 2, 1, "2s", 3 * 2 * time.Second, []string{"timeout"}},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			port := freePort(t)
			var ranks []*rank
			for r := range tc.starts {
				ranks = append(ranks, launch(t, ctx, tc.scenario, r, tc.world, port, false, "EVOLM_DIST_TIMEOUT="+tc.timeout))
			}
			out := ranks[0].wait(t, 0)
			t.Logf("rank 0: %s", out)
			var took time.Duration
			var msg string
			if _, err := fmt.Sscanf(out, "failed after %s", &msg); err == nil {
				took, _ = time.ParseDuration(strings.TrimSuffix(msg, ":"))
			} else {
				t.Fatalf("rank 0 did not report a failure: %s", out)
			}
			if took > tc.within {
				t.Errorf("failure took %v, want ≤ %v", took, tc.within)
			}
			lower := strings.ToLower(out)
			if !slices.ContainsFunc(tc.reason, func(r string) bool { return strings.Contains(lower, r) }) {
				t.Errorf("error %q names none of %q", out, tc.reason)
			}
			if tc.scenario != "absent" && !strings.Contains(out, "rank 0 of 2") {
				t.Errorf("error %q does not name the rank", out)
			}
		})
	}
}

func TestFromEnv(t *testing.T) {
	t.Setenv("RANK", "2")
	t.Setenv("WORLD_SIZE", "4")
	t.Setenv("LOCAL_RANK", "1")
	t.Setenv("MASTER_ADDR", "10.0.0.1")
	t.Setenv("MASTER_PORT", "1234")
	t.Setenv("TORCHELASTIC_USE_AGENT_STORE", "True")
	t.Setenv("TORCHELASTIC_RESTART_COUNT", "3")
	o, err := FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	want := Options{Rank: 2, WorldSize: 4, LocalRank: 1, MasterAddr: "10.0.0.1", MasterPort: 1234, AgentStore: true, RestartCount: 3}
	if o != want {
		t.Errorf("FromEnv = %+v, want %+v", o, want)
	}
	t.Setenv("RANK", "4")
	if _, err := FromEnv(); err == nil || !strings.Contains(err.Error(), "out of range") {
		t.Errorf("RANK=4 of 4: err = %v", err)
	}
	t.Setenv("RANK", "x")
	if _, err := FromEnv(); err == nil || !strings.Contains(err.Error(), strconv.Quote("x")) {
		t.Errorf("RANK=x: err = %v", err)
	}
}

func TestClosedAndBadArgs(t *testing.T) {
	g, err := Init(context.Background(), Options{Rank: 0, WorldSize: 1, MasterPort: freePort(t), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	s := torch.NewScope()
	defer s.Close()
	in := s.Ones([]int64{3, 2}, torch.Float32, torch.CPU)
	bad := s.Empty([]int64{4, 2}, torch.Float32, torch.CPU)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if err := g.AllGather(bad, in); err == nil || !strings.Contains(err.Error(), "stacked world-size") {
		t.Errorf("all-gather into a mis-shaped output: err = %v", err)
	}
	if err := g.AllReduce(nil, Sum); err == nil || !strings.Contains(err.Error(), "undefined tensor") {
		t.Errorf("all-reduce of nil: err = %v", err)
	}
	if err := g.Broadcast(in, 1); err == nil || !strings.Contains(err.Error(), "out of range") {
		t.Errorf("broadcast from rank 1 of 1: err = %v", err)
	}
	if err := g.AllReduce(in, Sum); err != nil {
		t.Errorf("all-reduce on a world of 1: %v", err)
	}
	g.Close()
	if err := g.Barrier(); !errors.Is(err, ErrClosed) {
		t.Errorf("barrier after close: err = %v, want ErrClosed", err)
	}
	if _, err := Init(context.Background(), Options{Backend: "mpi", WorldSize: 1, MasterPort: freePort(t)}); err == nil || !strings.Contains(err.Error(), "unknown backend") {
		t.Errorf("backend mpi: err = %v", err)
	}
	if !NCCLBuilt() {
		if _, err := Init(context.Background(), Options{Backend: NCCL, WorldSize: 1, MasterPort: freePort(t), Timeout: 5 * time.Second}); err == nil || !strings.Contains(err.Error(), "no NCCL") {
			t.Errorf("nccl in a CPU build: err = %v", err)
		}
		if NCCLVersion() != "" {
			t.Errorf("NCCLVersion() = %q in a build without NCCL", NCCLVersion())
		}
	} else {
		// A CUDA build: NCCL's library answers without a GPU, and a rank
		// whose device is missing (LOCAL_RANK past the visible devices)
		// fails Init in one line naming it, before the rendezvous.
		if v := NCCLVersion(); !strings.HasPrefix(v, "2.") {
			t.Errorf("NCCLVersion() = %q, want NCCL 2.x", v)
		}
		devs, _ := torch.CUDADevices()
		missing := len(devs)
		_, err := Init(context.Background(), Options{Backend: NCCL, WorldSize: 1, LocalRank: missing, MasterPort: freePort(t), Timeout: 5 * time.Second})
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("device cuda:%d: ", missing)) || strings.Contains(err.Error(), "\n") {
			t.Errorf("nccl on missing device cuda:%d: err = %q, want one line naming the device", missing, err)
		}
	}
}
