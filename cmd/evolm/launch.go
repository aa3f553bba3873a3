package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/evolm/evolm/model/dist"
)

// isRank reports whether the environment makes this process a rank of a
// data-parallel group (torchrun's RANK and WORLD_SIZE), and whether it is a
// follower (rank > 0).
func isRank() (rank bool, follower bool) {
	ws, err := strconv.Atoi(os.Getenv("WORLD_SIZE"))
	if err != nil || ws <= 1 {
		return false, false
	}
	r, err := strconv.Atoi(os.Getenv("RANK"))
	return err == nil, err == nil && r > 0
}

// failpointRankEnv is the prefix of the variables that set EVOLM_FAILPOINT
// for one rank only: EVOLM_FAILPOINT_RANK1=update@2 (fault tests).
const failpointRankEnv = "EVOLM_FAILPOINT_RANK"

// launch runs the command (what, e.g. "evolm run", for messages) as nproc
// ranks on this machine, as torchrun
// --standalone --nproc-per-node nproc would: the same binary and arguments,
// with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR=127.0.0.1 and a free
// MASTER_PORT. Rank 0's output passes through; the other ranks' lines are
// prefixed with [rank k]. SIGINT and SIGTERM are forwarded to every rank.
// When a rank fails, the others get grace to fail on their own (a
// collective's timeout), then are killed; the error names the rank that
// failed first.
func launch(ctx context.Context, what string, nproc int, grace time.Duration) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("--nproc: %w", err)
	}
	port, err := freePort()
	if err != nil {
		return fmt.Errorf("--nproc: free port: %w", err)
	}
	o := dist.Options{WorldSize: nproc, MasterAddr: "127.0.0.1", MasterPort: port}
	var base []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "EVOLM_FAILPOINT=") && !strings.HasPrefix(kv, failpointRankEnv) {
			base = append(base, kv)
		}
	}
	base = withoutNvfuser(base)
	cmds := make([]*exec.Cmd, nproc)
	var outs sync.WaitGroup
	for r := range cmds {
		c := exec.Command(exe, os.Args[1:]...)
		c.Env = append(append([]string{}, base...), dist.Env(o, r)...)
		if fp := os.Getenv(failpointRankEnv + strconv.Itoa(r)); fp != "" {
			c.Env = append(c.Env, "EVOLM_FAILPOINT="+fp)
		} else if fp := os.Getenv("EVOLM_FAILPOINT"); fp != "" {
			c.Env = append(c.Env, "EVOLM_FAILPOINT="+fp)
		}
		if r == 0 {
			c.Stdout, c.Stderr = os.Stdout, os.Stderr
		} else {
			so, err := c.StdoutPipe()
			if err != nil {
				return err
			}
			se, err := c.StderrPipe()
			if err != nil {
				return err
			}
			prefix := fmt.Sprintf("[rank %d] ", r)
			outs.Add(2)
			go prefixLines(&outs, so, os.Stdout, prefix)
			go prefixLines(&outs, se, os.Stderr, prefix)
		}
		cmds[r] = c
	}
	for r, c := range cmds {
		if err := c.Start(); err != nil {
			for _, p := range cmds[:r] {
				_ = p.Process.Kill()
			}
			return fmt.Errorf("--nproc: start rank %d: %w", r, err)
		}
	}
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)

	type exit struct {
		rank int
		err  error
	}
	done := make(chan exit, nproc)
	for r, c := range cmds {
		go func() { done <- exit{r, c.Wait()} }()
	}
	errs := make([]error, nproc)
	first := -1
	var deadline <-chan time.Time
	for left := nproc; left > 0; {
		select {
		case e := <-done:
			left--
			errs[e.rank] = e.err
			if e.err != nil && first < 0 {
				first = e.rank
				deadline = time.After(grace)
			}
		case s := <-sig:
			for _, c := range cmds {
				_ = c.Process.Signal(s)
			}
		case <-deadline:
			for r, c := range cmds {
				if c.ProcessState == nil {
					fmt.Fprintf(os.Stderr, "%s --nproc %d: rank %d still running %v after rank %d failed; killing it\n", what, nproc, r, grace, first)
					_ = c.Process.Kill()
				}
			}
			deadline = nil
		case <-ctx.Done():
			for _, c := range cmds {
				_ = c.Process.Signal(syscall.SIGTERM)
			}
		}
	}
	outs.Wait()
	if first < 0 {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s --nproc %d: rank %d failed first (%v)", what, nproc, first, errs[first])
	for r, e := range errs {
		if r != first && e != nil {
			fmt.Fprintf(&b, "; rank %d: %v", r, e)
		}
	}
	return fmt.Errorf("%s", b.String())
}

func prefixLines(wg *sync.WaitGroup, r io.Reader, w io.Writer, prefix string) {
	defer wg.Done()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		fmt.Fprintf(w, "%s%s\n", prefix, sc.Bytes())
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
