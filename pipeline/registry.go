package pipeline

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"sync"
)

// FieldType is the type of a stage config field.
type FieldType string

// Config field types. Values in YAML, env vars and flags are coerced to them
// when the config loads; a value that does not coerce is an error naming the key.
const (
	TypeString   FieldType = "string"
	TypeInt      FieldType = "int"
	TypeFloat    FieldType = "float"
	TypeBool     FieldType = "bool"
	TypeDuration FieldType = "duration" // Go syntax: "90s", "1h30m"
	TypeStrings  FieldType = "strings"  // list of strings; comma-separated in env vars and flags
)

// Field describes one config field of a stage, under stages.<stage>.<Key>.
type Field struct {
	Key         string    `json:"key"`                // snake_case, e.g. "threshold"; also the flag name with _ → -
	Type        FieldType `json:"type"`               //
	Default     any       `json:"default"`            // of the Go type the accessor returns (string, int, float64, bool, time.Duration, []string)
	Enum        []string  `json:"enum,omitempty"`     // allowed values (TypeString only); empty: any
	Description string    `json:"description"`        // one line; shown in --help and `evolm stages`
	Example     any       `json:"example,omitempty"`  // optional, shown in docs
	Required    bool      `json:"required,omitempty"` // running the stage needs a non-empty value (string, strings)
}

// Stage is one step of the pipeline.
//
// Lifecycle: the registry's Spec.New builds a Stage from its validated
// config (and may reject it); the runner then calls Run exactly once. A Stage
// owns nothing between New and Run that needs closing.
type Stage interface {
	// Run reads the stage's inputs and writes its output shards through env
	// (env.MapShards or env.CommitShard), returning nil only when every output
	// shard is committed. On error or cancellation it returns an error and
	// leaves committed shards in place: a rerun resumes after them. Run must
	// stop promptly when ctx is cancelled.
	Run(ctx context.Context, env *Env) error
}

// StageFunc adapts a function to a Stage.
type StageFunc func(ctx context.Context, env *Env) error

// Run calls f.
func (f StageFunc) Run(ctx context.Context, env *Env) error { return f(ctx, env) }

// Spec registers a stage: its documentation, its config fields and its
// constructor. The CLI generates `evolm <name>`, its flags and its --help
// from the spec.
type Spec struct {
	Name        string   `json:"name"`        // lower-case command name, e.g. "dedup"
	Summary     string   `json:"summary"`     // one line
	Description string   `json:"description"` // paragraphs for --help
	Inputs      []string `json:"inputs"`      // tables (or "external") it reads
	Outputs     []string `json:"outputs"`     // tables it writes
	Fields      []Field  `json:"fields"`
	// Volatile lists field keys that may change between runs of the same run
	// directory without invalidating its committed shards (for example the
	// co-evolution loop's total steps, raised to train longer). They are left
	// out of the config hash that resume compares.
	Volatile []string `json:"volatile,omitempty"`
	// New builds the stage from its config section (stages.<name>), already
	// merged and type-checked against Fields. It checks cross-field rules and
	// returns an error naming the key on a bad value.
	New func(cfg *Config) (Stage, error) `json:"-"`
}

var (
	regMu    sync.RWMutex
	registry = map[string]Spec{}
	regErrs  []error
	nameRE   = regexp.MustCompile(`^[a-z][a-z0-9_-]*$`)
	keyRE    = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
)

// Register adds a stage to the registry. Stage packages call it from init().
// A duplicate name or an invalid spec is not registered; the error is kept
// and reported by RegistryErr, which the CLI and LoadConfig check first, so
// the mistake surfaces on any command rather than as a missing stage.
func Register(spec Spec) {
	regMu.Lock()
	defer regMu.Unlock()
	if err := spec.validate(); err != nil {
		regErrs = append(regErrs, fmt.Errorf("register stage: %w", err))
		return
	}
	if _, dup := registry[spec.Name]; dup {
		regErrs = append(regErrs, fmt.Errorf("register stage: %q registered twice", spec.Name))
		return
	}
	registry[spec.Name] = spec
}

// RegistryErr returns the errors of every rejected Register call, or nil.
func RegistryErr() error {
	regMu.RLock()
	defer regMu.RUnlock()
	return errors.Join(regErrs...)
}

// Lookup returns the registered spec of a stage.
func Lookup(name string) (Spec, bool) {
	regMu.RLock()
	defer regMu.RUnlock()
	s, ok := registry[name]
	return s, ok
}

// Specs returns every registered spec, sorted by name.
func Specs() []Spec {
	regMu.RLock()
	defer regMu.RUnlock()
	out := make([]Spec, 0, len(registry))
	for _, s := range registry {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (s Spec) validate() error {
	if !nameRE.MatchString(s.Name) {
		return fmt.Errorf("stage name %q: want %s", s.Name, nameRE)
	}
	if s.New == nil {
		return fmt.Errorf("stage %q: nil New", s.Name)
	}
	seen := map[string]bool{}
	for _, f := range s.Fields {
		if !keyRE.MatchString(f.Key) {
			return fmt.Errorf("stage %q: field key %q: want %s", s.Name, f.Key, keyRE)
		}
		if seen[f.Key] {
			return fmt.Errorf("stage %q: field %q twice", s.Name, f.Key)
		}
		seen[f.Key] = true
		v, err := coerce(f.Type, f.Default)
		if err != nil {
			return fmt.Errorf("stage %q: field %q default: %w", s.Name, f.Key, err)
		}
		if err := f.checkEnum(v); err != nil {
			return fmt.Errorf("stage %q: field %q default: %w", s.Name, f.Key, err)
		}
	}
	for _, k := range s.Volatile {
		if !seen[k] {
			return fmt.Errorf("stage %q: volatile key %q is not a field", s.Name, k)
		}
	}
	return nil
}

// Field returns the spec's field with the given key.
func (s Spec) Field(key string) (Field, bool) {
	for _, f := range s.Fields {
		if f.Key == key {
			return f, true
		}
	}
	return Field{}, false
}
