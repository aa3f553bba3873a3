package grpo

import (
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Registry holds variants of one kind by name (verl's register_adv_est and
// register_policy_loss are the model): rewards and advantage estimators
// register themselves from init(), a config names one, and the config's
// enum and help come from here. Safe for concurrent use.
type Registry[F any] struct {
	kind string
	mu   sync.RWMutex
	m    map[string]variant[F]
}

type variant[F any] struct {
	help string
	f    F
}

// NewRegistry returns an empty registry of variants of kind (for errors:
// "rubric reward").
func NewRegistry[F any](kind string) *Registry[F] {
	return &Registry[F]{kind: kind, m: map[string]variant[F]{}}
}

// Register adds f under name with a one-line help. It panics on an empty
// or duplicate name: a programming error that any test linking the package
// catches.
func (r *Registry[F]) Register(name, help string, f F) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if name == "" {
		panic("grpo: " + r.kind + " registered without a name")
	}
	if _, dup := r.m[name]; dup {
		panic(fmt.Sprintf("grpo: %s %q registered twice", r.kind, name))
	}
	r.m[name] = variant[F]{help: help, f: f}
}

// Unregister removes a variant (a test's).
func (r *Registry[F]) Unregister(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m, name)
}

// Get returns the variant called name, or an error listing the known ones.
func (r *Registry[F]) Get(name string) (F, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	v, ok := r.m[name]
	if !ok {
		var zero F
		return zero, fmt.Errorf("%s %q: want one of %s", r.kind, name, strings.Join(r.namesLocked(), ", "))
	}
	return v.f, nil
}

// Names returns the registered names, sorted.
func (r *Registry[F]) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.namesLocked()
}

func (r *Registry[F]) namesLocked() []string {
	out := make([]string, 0, len(r.m))
	for n := range r.m {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Help returns "name: help; name: help" over the sorted names, for a key's
// description.
func (r *Registry[F]) Help() string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var parts []string
	for _, n := range r.namesLocked() {
		parts = append(parts, n+": "+r.m[n].help)
	}
	return strings.Join(parts, "; ")
}
