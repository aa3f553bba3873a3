package dist

/*
#include <stdlib.h>
#include "c10d.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/evolm/evolm/model/torch"
)

// DefaultTimeout is torch.distributed's default process-group timeout
// (default_pg_timeout): the rendezvous and every collective without a
// shorter one.
const DefaultTimeout = 30 * time.Minute

// Backends.
const (
	Gloo = "gloo" // CPU tensors (and the tests)
	NCCL = "nccl" // CUDA tensors; only in builds with TORCH_CUDA=1
)

// Options configures Init. Rank, WorldSize, MasterAddr and MasterPort mean
// what they mean to torch.distributed (FromEnv reads them as torchrun sets
// them).
type Options struct {
	Rank       int           // this process's rank, 0 ≤ Rank < WorldSize
	WorldSize  int           // number of processes
	LocalRank  int           // rank on this node: the CUDA device index for NCCL
	MasterAddr string        // host of rank 0's TCPStore (default 127.0.0.1)
	MasterPort int           // its port (default 29500)
	Backend    string        // Gloo or NCCL (default Gloo)
	Timeout    time.Duration // rendezvous and default collective timeout (default DefaultTimeout)

	// AgentStore: the TCPStore at MasterAddr:MasterPort is hosted by a
	// launcher (torchrun's elastic agent, TORCHELASTIC_USE_AGENT_STORE), so
	// every rank, rank 0 included, is a client, under the key prefix
	// /worker/attempt_<RestartCount>.
	AgentStore   bool
	RestartCount int
}

// ReduceOp is a reduction of AllReduce and ReduceScatter.
type ReduceOp int

// Reductions. Avg is c10d's sum divided by the world size afterwards (Gloo
// has no average of its own).
const (
	Sum ReduceOp = C.EVOLM_DIST_SUM
	Avg ReduceOp = C.EVOLM_DIST_AVG
	Max ReduceOp = C.EVOLM_DIST_MAX
	Min ReduceOp = C.EVOLM_DIST_MIN
)

func (op ReduceOp) String() string {
	switch op {
	case Sum:
		return "sum"
	case Avg:
		return "avg"
	case Max:
		return "max"
	case Min:
		return "min"
	}
	return fmt.Sprintf("ReduceOp(%d)", int(op))
}

// ErrClosed is returned by a collective on a closed Group.
var ErrClosed = errors.New("dist: group closed")

// NCCLBuilt reports whether this binary was built with ProcessGroupNCCL
// (TORCH_CUDA=1).
func NCCLBuilt() bool { return C.evolm_dist_nccl_built() == 1 }

// NCCLVersion is the version of the NCCL library this process loaded
// ("2.18.1": the wheel's nvidia-nccl-cu12), or "" when NCCL is not built
// in. Reading it needs no GPU.
func NCCLVersion() string {
	var buf [32]C.char
	C.evolm_dist_nccl_version(&buf[0], C.int(len(buf)))
	return C.GoString(&buf[0])
}

// Group is one c10d process group (the default group of Options.WorldSize
// ranks). Its collectives must be called in the same order on every rank, as
// in torch.distributed. They block until done and are safe to call from
// several goroutines, though concurrent calls have no defined order. After a
// collective fails (a peer died, a timeout) the group's state across ranks
// is unknown: Close it.
type Group struct {
	g       *groupState
	timeout time.Duration // per call; 0: the group's
}

type groupState struct {
	mu      sync.RWMutex // collectives hold it shared, Close exclusively
	c       *C.evolm_dist_group
	failed  atomic.Bool // a collective failed: Close must not wait for it
	rank    int
	world   int
	backend string
}

// Init joins the process group: rank 0 starts the TCPStore at
// MasterAddr:MasterPort (unless AgentStore), every rank connects and waits
// for all WorldSize ranks, then the backend connects every pair of ranks.
// Timeout (or the time to ctx's deadline, if shorter) bounds each of c10d's
// rendezvous steps, so a rank that never arrives fails Init after about
// 2·Timeout+1s (as init_process_group does) with the store's error.
func Init(ctx context.Context, o Options) (*Group, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("dist: init: %w", err)
	}
	if o.Backend == "" {
		o.Backend = Gloo
	}
	if o.MasterAddr == "" {
		o.MasterAddr = "127.0.0.1"
	}
	if o.MasterPort == 0 {
		o.MasterPort = 29500
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.WorldSize < 1 || o.Rank < 0 || o.Rank >= o.WorldSize {
		return nil, fmt.Errorf("dist: init: rank %d out of range for world size %d", o.Rank, o.WorldSize)
	}
	if o.Backend == NCCL {
		// Before the rendezvous, in one line: a build without NCCL, or a
		// rank whose GPU this process cannot use (torch.CheckDevice), fails
		// here rather than in c10d with CUDA's multi-line errors.
		if !NCCLBuilt() {
			return nil, fmt.Errorf("dist: init nccl rank %d of %d: this build has no NCCL (build with TORCH_CUDA=1 make build)", o.Rank, o.WorldSize)
		}
		if err := torch.CheckDevice(torch.CUDA(o.LocalRank)); err != nil {
			return nil, fmt.Errorf("dist: init nccl rank %d of %d (LOCAL_RANK %d): %w", o.Rank, o.WorldSize, o.LocalRank, err)
		}
	}
	timeout := o.Timeout
	if d, ok := ctx.Deadline(); ok && time.Until(d) < timeout {
		timeout = max(time.Until(d), time.Millisecond)
	}
	prefix := ""
	if o.AgentStore {
		prefix = fmt.Sprintf("/worker/attempt_%d", o.RestartCount)
	}
	server := 0
	if o.Rank == 0 && !o.AgentStore {
		server = 1
	}
	cBackend, cAddr, cPrefix := C.CString(o.Backend), C.CString(o.MasterAddr), C.CString(prefix)
	defer C.free(unsafe.Pointer(cBackend))
	defer C.free(unsafe.Pointer(cAddr))
	defer C.free(unsafe.Pointer(cPrefix))
	var c *C.evolm_dist_group
	if err := cErr(C.evolm_dist_init(cBackend, cAddr, C.int(o.MasterPort), C.int(server), cPrefix,
		C.int(o.Rank), C.int(o.WorldSize), C.int(o.LocalRank), C.int64_t(timeout.Milliseconds()), &c)); err != nil {
		return nil, fmt.Errorf("dist: init %s rank %d of %d at %s:%d (timeout %v): %w",
			o.Backend, o.Rank, o.WorldSize, o.MasterAddr, o.MasterPort, timeout, err)
	}
	g := &groupState{c: c, rank: o.Rank, world: o.WorldSize, backend: o.Backend}
	return &Group{g: g}, nil
}

// Rank is this process's rank.
func (g *Group) Rank() int { return g.g.rank }

// WorldSize is the number of ranks.
func (g *Group) WorldSize() int { return g.g.world }

// Backend is "gloo" or "nccl".
func (g *Group) Backend() string { return g.g.backend }

// WithTimeout returns g with collectives bounded by d instead of the
// group's timeout; it shares g's process group (closing either closes both).
func (g *Group) WithTimeout(d time.Duration) *Group { return &Group{g: g.g, timeout: d} }

// AllReduce reduces t elementwise over all ranks in place: afterwards every
// rank's t holds the reduction. t: any shape, same shape and dtype on every
// rank, contiguous, on the backend's device.
func (g *Group) AllReduce(t *torch.Tensor, op ReduceOp) error {
	return g.call("all-reduce "+op.String(), func(c *C.evolm_dist_group, ms C.int64_t) *C.char {
		return C.evolm_dist_all_reduce(c, handle(t), C.int(op), ms)
	})
}

// ReduceScatter reduces in over all ranks and leaves rank r's share in out:
// in is (W·N, ...) on every rank (W the world size), out is (N, ...), and
// out = op over ranks of in[r·N:(r+1)·N].
func (g *Group) ReduceScatter(out, in *torch.Tensor, op ReduceOp) error {
	return g.call("reduce-scatter "+op.String(), func(c *C.evolm_dist_group, ms C.int64_t) *C.char {
		return C.evolm_dist_reduce_scatter(c, handle(out), handle(in), C.int(op), ms)
	})
}

// AllGather concatenates every rank's in along dim 0 into out: in is
// (N, ...), out is (W·N, ...) with rank r's in at out[r·N:(r+1)·N].
func (g *Group) AllGather(out, in *torch.Tensor) error {
	return g.call("all-gather", func(c *C.evolm_dist_group, ms C.int64_t) *C.char {
		return C.evolm_dist_all_gather(c, handle(out), handle(in), ms)
	})
}

// Broadcast copies root's t into every other rank's t in place.
func (g *Group) Broadcast(t *torch.Tensor, root int) error {
	return g.call(fmt.Sprintf("broadcast from %d", root), func(c *C.evolm_dist_group, ms C.int64_t) *C.char {
		return C.evolm_dist_broadcast(c, handle(t), C.int(root), ms)
	})
}

// Barrier returns when every rank has called it.
func (g *Group) Barrier() error {
	return g.call("barrier", func(c *C.evolm_dist_group, ms C.int64_t) *C.char {
		return C.evolm_dist_barrier(c, ms)
	})
}

// Close destroys the process group (on rank 0 also the TCPStore server, so
// other ranks' next collectives fail: call Barrier first for an orderly
// shutdown). Closing twice is a no-op. After a failed collective it returns
// at once and leaves the destruction to a goroutine: a collective that timed
// out on its per-call timeout still runs in Gloo's thread until Gloo's own
// timeout (the group's), and the backend's destructor waits for it.
func (g *Group) Close() error {
	s := g.g
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c != nil {
		if c := s.c; s.failed.Load() {
			go C.evolm_dist_close(c)
		} else {
			C.evolm_dist_close(c)
		}
		s.c = nil
	}
	return nil
}

func (g *Group) call(what string, f func(*C.evolm_dist_group, C.int64_t) *C.char) error {
	s := g.g
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.c == nil {
		return fmt.Errorf("dist: %s: %w", what, ErrClosed)
	}
	if err := cErr(f(s.c, C.int64_t(g.timeout.Milliseconds()))); err != nil {
		s.failed.Store(true)
		return fmt.Errorf("dist: %s (%s rank %d of %d): %w", what, s.backend, s.rank, s.world, err)
	}
	return nil
}

// handle is t's libtorch handle (torch::Tensor*), nil for a nil tensor,
// which the shim reports as an error.
func handle(t *torch.Tensor) unsafe.Pointer { return torch.Handle(t) }

// cErr turns the shim's malloc'd message (nil: success) into an error.
func cErr(msg *C.char) error {
	if msg == nil {
		return nil
	}
	defer C.free(unsafe.Pointer(msg))
	return errors.New(C.GoString(msg))
}
