// Package failpoint lets crash tests kill the process at a named point (in
// the middle of writing a shard, between a checkpoint's files), which random
// SIGKILL timing hits only by luck. A point fires when the environment
// variable EVOLM_FAILPOINT names it as "name" (first hit) or "name@N" (N-th
// hit, 1-based); firing sends SIGKILL to the process itself, exactly what an
// OOM kill or a pre-empted node does. With the variable unset, Hit is a
// no-op costing one map lookup.
package failpoint

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

var (
	once   sync.Once
	points map[string]int // name → hit number that fires
	mu     sync.Mutex
	hits   = map[string]int{}
)

func load() {
	points = map[string]int{}
	for _, p := range strings.Split(os.Getenv("EVOLM_FAILPOINT"), ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		name, n := p, 1
		if i := strings.LastIndexByte(p, '@'); i > 0 {
			if v, err := strconv.Atoi(p[i+1:]); err == nil && v > 0 {
				name, n = p[:i], v
			}
		}
		points[name] = n
	}
}

// Hit marks that execution reached the named point.
func Hit(name string) {
	once.Do(load)
	want, ok := points[name]
	if !ok {
		return
	}
	mu.Lock()
	hits[name]++
	fire := hits[name] == want
	mu.Unlock()
	if fire {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}

// Active reports whether the named fault is on at this hit, for faults that
// are injected rather than killed: EVOLM_FAILPOINT="name" turns it on at
// every hit, "name@N" from the N-th hit on. Unlike Hit it never kills; the
// caller injects the fault (train-nan-loss: a NaN loss).
func Active(name string) bool {
	once.Do(load)
	from, ok := points[name]
	if !ok {
		return false
	}
	mu.Lock()
	defer mu.Unlock()
	hits[name]++
	return hits[name] >= from
}
