// Command dist-bench measures all-reduce bandwidth through model/dist (Go,
// c10d's ProcessGroupGloo through the cgo shim) against Python
// torch.distributed's gloo backend, the same c10d code under Python, in one
// invocation on this machine:
//
//	go run ./bench/dist -sizes 1,16,64 -ranks 2 -iters 10 -runs 3
//
// Each side launches -ranks processes (this binary re-executed as a Go rank;
// bench/dist/allreduce.py under $EVOLM_PYTHON as a Python rank) on a fresh
// TCPStore port. Every rank all-reduces (sum) a float32 tensor of each size
// -warmup times, then between two barriers as many times as moves the bytes
// of -iters all-reduces of the largest size; rank 0 reports the mean time
// per all-reduce. Bandwidth is algorithm bandwidth, bytes / time
// (GB/s, 1e9); bus bandwidth (NCCL-tests' convention for a ring all-reduce)
// is that times 2(W−1)/W. The ratio Go/Python is printed as min / median /
// max over -runs runs, with the load average before and after: the sides
// run one after the other, so on a shared machine a ratio reflects noise as
// well.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/evolm/evolm/bench/internal/stat"
	"github.com/evolm/evolm/model/dist"
	"github.com/evolm/evolm/model/torch"
)

type config struct {
	sizes         []int // MiB
	ranks         int
	iters, warmup int
	runs          int
}

// workerEnv marks a re-executed process as a Go rank.
const workerEnv = "EVOLM_DIST_BENCH_WORKER"

func main() {
	var cfg config
	var sizes string
	flag.StringVar(&sizes, "sizes", "1,16,64", "comma-separated tensor sizes in MiB (float32)")
	flag.IntVar(&cfg.ranks, "ranks", 2, "ranks (processes) per side")
	flag.IntVar(&cfg.iters, "iters", 10, "timed all-reduces of the largest size; smaller sizes run proportionally more (the same bytes)")
	flag.IntVar(&cfg.warmup, "warmup", 3, "untimed all-reduces per size first")
	flag.IntVar(&cfg.runs, "runs", 3, "runs; the ratio is shown as min / median / max over them")
	flag.Parse()
	for _, s := range strings.Split(sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "dist-bench: bad size %q\n", s)
			os.Exit(2)
		}
		cfg.sizes = append(cfg.sizes, n)
	}
	var err error
	if os.Getenv(workerEnv) != "" {
		err = worker(cfg, os.Stdout)
	} else {
		err = run(context.Background(), cfg, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "dist-bench:", err)
		os.Exit(1)
	}
}

type result struct {
	MiB     int     `json:"mib"`
	Seconds float64 `json:"seconds"`
}

// worker is one Go rank: allreduce.py's loop through model/dist.
func worker(cfg config, w io.Writer) error {
	o, err := dist.FromEnv()
	if err != nil {
		return err
	}
	o.Timeout = 2 * time.Minute
	g, err := dist.Init(context.Background(), o)
	if err != nil {
		return err
	}
	defer g.Close()
	for _, mib := range cfg.sizes {
		s := torch.NewScope()
		t := s.Ones([]int64{int64(mib) << 20 / 4}, torch.Float32, torch.CPU)
		if err := s.Err(); err != nil {
			s.Close()
			return err
		}
		secs, err := timeAllReduce(g, t, cfg.warmup, itersFor(cfg, mib))
		s.Close()
		if err != nil {
			return err
		}
		if g.Rank() == 0 {
			if err := json.NewEncoder(w).Encode(result{MiB: mib, Seconds: secs}); err != nil {
				return err
			}
		}
	}
	return nil
}

// itersFor is the timed all-reduces of a size: every size moves the bytes
// of cfg.iters all-reduces of the largest (allreduce.py computes the same).
func itersFor(cfg config, mib int) int {
	return max(1, cfg.iters*slices.Max(cfg.sizes)/mib)
}

func timeAllReduce(g *dist.Group, t *torch.Tensor, warmup, iters int) (float64, error) {
	for range warmup {
		if err := g.AllReduce(t, dist.Sum); err != nil {
			return 0, err
		}
	}
	if err := g.Barrier(); err != nil {
		return 0, err
	}
	start := time.Now()
	for range iters {
		if err := g.AllReduce(t, dist.Sum); err != nil {
			return 0, err
		}
	}
	if err := g.Barrier(); err != nil {
		return 0, err
	}
	return time.Since(start).Seconds() / float64(iters), nil
}

// side launches cfg.ranks processes of one side and returns rank 0's
// seconds per all-reduce by size.
func side(ctx context.Context, cfg config, python bool) (map[int]float64, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	o := dist.Options{WorldSize: cfg.ranks, MasterAddr: "127.0.0.1", MasterPort: port}
	sizes := make([]string, len(cfg.sizes))
	for i, s := range cfg.sizes {
		sizes[i] = strconv.Itoa(s)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	var cmds []*exec.Cmd
	var outs []*bytes.Buffer
	for r := range cfg.ranks {
		var cmd *exec.Cmd
		if python {
			cmd = exec.CommandContext(ctx, pythonPath(), scriptPath(),
				"--sizes", strings.Join(sizes, ","), "--iters", strconv.Itoa(cfg.iters), "--warmup", strconv.Itoa(cfg.warmup))
		} else {
			self, err := os.Executable()
			if err != nil {
				return nil, err
			}
			cmd = exec.CommandContext(ctx, self, "-sizes", strings.Join(sizes, ","),
				"-iters", strconv.Itoa(cfg.iters), "-warmup", strconv.Itoa(cfg.warmup))
			cmd.Env = append(cmd.Env, workerEnv+"=1")
		}
		cmd.Env = append(append(os.Environ(), cmd.Env...), dist.Env(o, r)...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		cmds, outs = append(cmds, cmd), append(outs, &out)
	}
	var failed error
	for r, cmd := range cmds {
		if err := cmd.Wait(); err != nil && failed == nil {
			failed = fmt.Errorf("rank %d (python %v): %v\n%s", r, python, err, outs[r])
		}
	}
	if failed != nil {
		return nil, failed
	}
	secs := map[int]float64{}
	sc := bufio.NewScanner(outs[0])
	for sc.Scan() {
		var res result
		if json.Unmarshal(sc.Bytes(), &res) == nil && res.MiB > 0 {
			secs[res.MiB] = res.Seconds
		}
	}
	for _, s := range cfg.sizes {
		if secs[s] == 0 {
			return nil, fmt.Errorf("python %v: rank 0 reported no time for %d MiB:\n%s", python, s, outs[0])
		}
	}
	return secs, nil
}

func pythonPath() string {
	if p := os.Getenv("EVOLM_PYTHON"); p != "" {
		return p
	}
	return filepath.Join(root(), ".venv", "bin", "python")
}

func scriptPath() string { return filepath.Join(root(), "bench", "dist", "allreduce.py") }

// root is the repository root: $EVOLM_ROOT, else the working directory.
func root() string {
	if r := os.Getenv("EVOLM_ROOT"); r != "" {
		return r
	}
	wd, _ := os.Getwd()
	return wd
}

func run(ctx context.Context, cfg config, w io.Writer) error {
	load0 := stat.LoadAvg()
	goBW := map[int][]float64{}
	pyBW := map[int][]float64{}
	ratio := map[int][]float64{}
	for range cfg.runs {
		goSecs, err := side(ctx, cfg, false)
		if err != nil {
			return err
		}
		pySecs, err := side(ctx, cfg, true)
		if err != nil {
			return err
		}
		for _, mib := range cfg.sizes {
			bytes := float64(mib) * (1 << 20)
			g, p := bytes/goSecs[mib]/1e9, bytes/pySecs[mib]/1e9
			goBW[mib] = append(goBW[mib], g)
			pyBW[mib] = append(pyBW[mib], p)
			ratio[mib] = append(ratio[mib], g/p)
		}
	}
	load1 := stat.LoadAvg()
	bus := 2 * float64(cfg.ranks-1) / float64(cfg.ranks)
	fmt.Fprintf(w, "all-reduce (sum, float32), gloo, %d ranks on this machine, %d timed all-reduces of %d MiB (proportionally more of smaller sizes) after %d warm-up, %d runs\n",
		cfg.ranks, cfg.iters, slices.Max(cfg.sizes), cfg.warmup, cfg.runs)
	fmt.Fprintf(w, "load average before: %s, after: %s\n", load0, load1)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "size MiB\tGo GB/s (median)\tPython GB/s (median)\tGo bus GB/s\tGo/Python min / median / max\t\n")
	for _, mib := range cfg.sizes {
		fmt.Fprintf(tw, "%d\t%.3f\t%.3f\t%.3f\t%s\t\n", mib, stat.Median(goBW[mib]), stat.Median(pyBW[mib]), stat.Median(goBW[mib])*bus, stat.Spread(ratio[mib], "%.2f"))
	}
	return tw.Flush()
}
