package roles

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/serving/backend"
)

// BackendSpec registers a backend: an engine that a role can run on
// (roles.<role>.backend). A backend package registers its spec from init(),
// and a program links it with one blank import (cmd/evolm's backends.go);
// the role sections' keys, the `backend` enum, the flags, --help, the memory
// planner and `evolm run` all read the registry, so adding a backend edits
// no list elsewhere.
type BackendSpec struct {
	// Name is the value of roles.<role>.backend.
	Name string
	// Summary is one line for --help.
	Summary string
	// Fields returns the keys this backend reads in a role's section besides
	// the common ones (model, sampling, prompts); a key another backend also
	// declares must be declared the same way. Each key's description should
	// start with the backend's name ("torch: …").
	Fields func(role string) []pipeline.Field
	// Check validates a role on this backend once Read has filled c; sec is
	// the section that holds the role's engine keys. Errors name the key
	// (sec.Errorf). nil: nothing to check.
	Check func(c Config, sec *pipeline.Config) error
	// Open opens a role for sampling and scoring.
	Open Opener
	// Train, when set, opens a role for training in process (`evolm run`
	// trains the policy and a rubric generator of its own on it).
	Train TrainOpener
	// Learner, when set, checks and normalises a learner config for this
	// backend's learner when the run's config is read, before any model is
	// loaded (LoRA target names, say). nil: taken as is.
	Learner func(backend.LearnerConfig) (backend.LearnerConfig, error)
	// Fleet, when set, makes this backend able to generate for a trained
	// role on servers whose weights follow the learner's
	// (stages.run.generation_backend).
	Fleet FleetOpener
	// Group, when set, joins the data-parallel group that the environment
	// names (torchrun's variables) for a run whose trained roles are on this
	// backend (`evolm run --nproc N`).
	Group GroupOpener
	// Placement says where a role on this backend keeps its weights: the
	// device and true when they are in this process (the memory plan counts
	// them there), or false for a served model. nil: served.
	Placement func(c Config) (device string, inProcess bool)
}

// Opener opens a role's engine.
type Opener func(c Config, log *slog.Logger) (*Backend, error)

// TrainOpener opens a trained role on one engine (see TrainOptions).
type TrainOpener func(c Config, opt TrainOptions, log *slog.Logger) (*Trained, error)

// FleetOpener opens a fleet generating for a trained role.
type FleetOpener func(o FleetOptions) (Fleet, error)

// GroupOpener joins the data-parallel group; o.Roles are the run's roles,
// which it may place on this rank's device (a role on plain "cuda" runs on
// cuda:LOCAL_RANK, as torchrun lays GPUs out).
type GroupOpener func(ctx context.Context, o GroupOptions) (backend.Group, error)

// GroupOptions configure GroupOpener.
type GroupOptions struct {
	Timeout time.Duration // of each collective
	Roles   []*Config     // the policy first
}

var (
	regMu    sync.RWMutex
	backends = map[string]BackendSpec{}
)

// Register adds a backend. It panics on a spec without a name or opener,
// or on a name registered twice: both are programming errors caught by any
// test that links the package.
func Register(spec BackendSpec) {
	if spec.Name == "" || spec.Open == nil {
		panic(fmt.Sprintf("roles.Register: backend %q needs a name and an opener", spec.Name))
	}
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := backends[spec.Name]; dup {
		panic(fmt.Sprintf("roles.Register: backend %q registered twice", spec.Name))
	}
	backends[spec.Name] = spec
}

// Unregister removes a backend (a test's double).
func Unregister(name string) {
	regMu.Lock()
	defer regMu.Unlock()
	delete(backends, name)
}

// Lookup returns a registered backend.
func Lookup(name string) (BackendSpec, bool) {
	regMu.RLock()
	defer regMu.RUnlock()
	s, ok := backends[name]
	return s, ok
}

// Backends returns the registered backends, sorted by name.
func Backends() []BackendSpec {
	regMu.RLock()
	defer regMu.RUnlock()
	out := make([]BackendSpec, 0, len(backends))
	for _, s := range backends {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// BackendNames returns the registered backends' names, sorted, with the
// default backend among them whether or not this program links it (so that
// a config naming it loads, and opening it says what to import).
func BackendNames() []string {
	names := []string{BackendTorch}
	for _, s := range Backends() {
		if s.Name != BackendTorch {
			names = append(names, s.Name)
		}
	}
	slices.Sort(names)
	return names
}

// spec returns c's backend, or an error naming the role and what to do.
func spec(c Config) (BackendSpec, error) {
	s, ok := Lookup(c.Backend)
	if ok {
		return s, nil
	}
	if c.Backend == BackendTorch {
		return s, fmt.Errorf("%s: the torch backend is not linked into this program (import github.com/evolm/evolm/serving/torchbe)", c.Role)
	}
	return s, fmt.Errorf("%s: unknown backend %q (have %s)", c.Role, c.Backend, strings.Join(BackendNames(), ", "))
}

// Open opens the role's engine.
func Open(c Config, log *slog.Logger) (*Backend, error) {
	s, err := spec(c)
	if err != nil {
		return nil, err
	}
	b, err := s.Open(c, log)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.Role, err)
	}
	return b, nil
}

// Placement returns where role c keeps its weights (BackendSpec.Placement):
// its device and true in process, false when served or unknown.
func Placement(c Config) (device string, inProcess bool) {
	s, ok := Lookup(c.Backend)
	if !ok || s.Placement == nil {
		return "", false
	}
	return s.Placement(c)
}

// Trainable returns the names of the backends that can train a role in
// process, sorted.
func Trainable() []string {
	var out []string
	for _, s := range Backends() {
		if s.Train != nil {
			out = append(out, s.Name)
		}
	}
	return out
}

// FleetBackends returns the names of the backends that can generate for a
// trained role on servers (BackendSpec.Fleet), sorted.
func FleetBackends() []string {
	var out []string
	for _, s := range Backends() {
		if s.Fleet != nil {
			out = append(out, s.Name)
		}
	}
	return out
}

// OpenGroup joins the data-parallel group through the policy's backend
// (o.Roles[0]).
func OpenGroup(ctx context.Context, o GroupOptions) (backend.Group, error) {
	if len(o.Roles) == 0 {
		return nil, fmt.Errorf("data parallelism: no roles")
	}
	s, err := spec(*o.Roles[0])
	if err != nil {
		return nil, err
	}
	if s.Group == nil {
		return nil, fmt.Errorf("data parallelism: the %s backend of the %s has no process group", s.Name, o.Roles[0].Role)
	}
	return s.Group(ctx, o)
}

// OpenFleet opens the fleet of backend name.
func OpenFleet(name string, o FleetOptions) (Fleet, error) {
	s, ok := Lookup(name)
	if !ok || s.Fleet == nil {
		return nil, fmt.Errorf("generation backend %q cannot generate for a trained role (fleet backends: %s)", name, strings.Join(FleetBackends(), ", "))
	}
	return s.Fleet(o)
}

// CheckLearner checks lc against the learner of c's backend
// (BackendSpec.Learner) and returns it normalised.
func CheckLearner(c Config, lc backend.LearnerConfig) (backend.LearnerConfig, error) {
	s, ok := Lookup(c.Backend)
	if !ok || s.Learner == nil {
		return lc, nil // an unlinked backend fails when the role is opened
	}
	return s.Learner(lc)
}
