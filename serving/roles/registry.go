package roles

import (
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Registry holds openers of type O by backend name, safe for concurrent use;
// engine packages register theirs from init(). The zero value is empty.
type Registry[O any] struct {
	mu sync.RWMutex
	m  map[string]O
}

// Register makes open the opener of backend name.
func (r *Registry[O]) Register(name string, open O) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]O{}
	}
	r.m[name] = open
}

// Unregister removes backend name's opener (a test's fake, say).
func (r *Registry[O]) Unregister(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m, name)
}

// Get returns the opener of c's backend. Without one, the error names c's
// role and says that the torch backend is not linked into this program, or
// for another backend what missing says given its name and the registered
// names (sorted, comma-separated).
func (r *Registry[O]) Get(c Config, missing func(backend, have string) string) (O, error) {
	r.mu.RLock()
	open, ok := r.m[c.Backend]
	var names []string
	for n := range r.m {
		names = append(names, n)
	}
	r.mu.RUnlock()
	if ok {
		return open, nil
	}
	if c.Backend == BackendTorch {
		return open, fmt.Errorf("%s: the torch backend is not linked into this program (import github.com/evolm/evolm/serving/roles/torchrole)", c.Role)
	}
	sort.Strings(names)
	return open, fmt.Errorf("%s: %s", c.Role, missing(c.Backend, strings.Join(names, ", ")))
}
