package pipeline

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
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

// Field describes one config field of a stage, under stages.<stage>.<Key>,
// or of a registered section (see RegisterSection), under <section>.<Key>.
type Field struct {
	Key         string    `json:"key"`                // snake_case, e.g. "threshold"; also the flag name with _ → -
	Type        FieldType `json:"type"`               //
	Default     any       `json:"default"`            // of the Go type the accessor returns (string, int, float64, bool, time.Duration, []string)
	Enum        []string  `json:"enum,omitempty"`     // allowed values (TypeString only); empty: any
	Description string    `json:"description"`        // one line; shown in --help and `evolm stages`
	Example     any       `json:"example,omitempty"`  // optional, shown in docs
	Required    bool      `json:"required,omitempty"` // running the stage needs a non-empty value (string, strings)
	// Min and Max bound an int, float or duration (in seconds) value; nil:
	// unbounded. The loader rejects a value outside them (and NaN) with an
	// error naming the key. ExclusiveMin and ExclusiveMax make a bound strict.
	Min          *float64 `json:"min,omitempty"`
	Max          *float64 `json:"max,omitempty"`
	ExclusiveMin bool     `json:"exclusive_min,omitempty"`
	ExclusiveMax bool     `json:"exclusive_max,omitempty"`
	// Volatile marks a key of a registered section (RegisterSection) that
	// does not change what a stage computes — a thread count, a request
	// limit, a server address — so that changing it does not invalidate
	// committed shards or checkpoints: it is left out of the config hash of
	// every stage that uses the section. (A stage's own keys are volatile
	// through Spec.Volatile.)
	Volatile bool `json:"volatile,omitempty"`
}

// Bound returns a pointer to v, for Field.Min and Field.Max.
func Bound(v float64) *float64 { return &v }

// Stage is one step of the pipeline.
//
// Lifecycle: the registry's Spec.New builds a Stage from its validated
// config (and may reject it); the runner then calls Run exactly once. A Stage
// owns nothing between New and Run that needs closing.
type Stage interface {
	// Run reads the stage's inputs and writes its output shards through env
	// (env.MapShards, or env.Run.Commit for a shard written by hand),
	// returning nil only when every output shard is committed. On error or
	// cancellation it returns an error and leaves committed shards in place:
	// a rerun resumes after them. Run must stop promptly when ctx is
	// cancelled.
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
	// Dirs are the Outputs that are directories the stage owns whole rather
	// than tables (the loop's checkpoints): --fresh replaces each as a whole
	// once the stage has succeeded.
	Dirs []string `json:"dirs,omitempty"`
	// Base, when set, names a saved config file (a source run's
	// config.yaml) from the stage's view: RunStage takes from it every key
	// of the sections the stage uses (Uses) that the command left at its
	// default (Config.WithBase), and logs the keys the command changed.
	// "": no base.
	Base func(cfg *Config) string `json:"-"`
	// Replace marks a stage whose output is derived from the run (export,
	// analyze): a rerun with other settings replaces its output, through the
	// same staging as --fresh, instead of refusing.
	Replace bool    `json:"replace,omitempty"`
	Fields  []Field `json:"fields"`
	// Volatile lists field keys that may change between runs of the same run
	// directory without invalidating its committed shards (for example the
	// co-evolution loop's total steps, raised to train longer). They are left
	// out of the config hash that resume compares.
	Volatile []string `json:"volatile,omitempty"`
	// Uses lists the registered sections (RegisterSection) the stage reads
	// besides its own, e.g. "roles.policy". Their values are part of the
	// stage's config hash and of its config file (Config.FileYAML), their
	// flags are the stage command's (SectionSpec.Flag), and the stage reads
	// them through cfg.At(section).
	Uses []string `json:"uses,omitempty"`
	// Moved maps keys the stage no longer has (relative to stages.<name>) to
	// where they live now, e.g. "policy_model" → "roles.policy.model". A
	// config that still sets one fails with an error naming both.
	Moved map[string]string `json:"moved,omitempty"`
	// FieldsFunc, when set, gives the stage's fields each time its spec is
	// looked up, in place of Fields: for keys whose enums come from another
	// registry (a reward by name, a fleet backend), or that a struct's tags
	// declare (FieldsOf). Its error and its fields are checked by
	// RegistryErr.
	FieldsFunc func() ([]Field, error) `json:"-"`
	fieldsErr  error
	// New builds the stage from its config section (stages.<name>), already
	// merged and type-checked against Fields. It checks cross-field rules and
	// returns an error naming the key on a bad value.
	New func(cfg *Config) (Stage, error) `json:"-"`
}

// SectionSpec registers a config section shared by several stages, such as
// a model role (roles.policy): its keys live once under <Name>.<Key>, with
// env vars EVOLM_<NAME>_<KEY>, and every stage that lists it in Spec.Uses
// gets its flags --<Flag>-<key>.
type SectionSpec struct {
	Name    string  `json:"name"`    // dotted, lower-case, e.g. "roles.policy"
	Summary string  `json:"summary"` // one line
	Flag    string  `json:"flag"`    // flag prefix, e.g. "policy" (--policy-model)
	Fields  []Field `json:"fields"`
	// FieldsFunc, when set, gives the section's fields each time the section
	// is looked up, in place of Fields: for a section whose keys come from
	// another registry (a model role's keys from the backends registered by
	// then). Its fields are checked by RegistryErr.
	FieldsFunc func() ([]Field, error) `json:"-"`
	fieldsErr  error
}

// resolve returns sec with Fields from FieldsFunc, when it has one.
func (sec SectionSpec) resolve() SectionSpec {
	if sec.FieldsFunc != nil {
		sec.Fields, sec.fieldsErr = sec.FieldsFunc()
	}
	return sec
}

var (
	regMu    sync.RWMutex
	registry = map[string]Spec{}
	sections = map[string]SectionSpec{}
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

// RegisterSection adds a shared config section. Packages call it from
// init(); like Register, a mistake is kept and reported by RegistryErr.
func RegisterSection(sec SectionSpec) {
	regMu.Lock()
	defer regMu.Unlock()
	if err := sec.validate(); err != nil {
		regErrs = append(regErrs, fmt.Errorf("register section: %w", err))
		return
	}
	if _, dup := sections[sec.Name]; dup {
		regErrs = append(regErrs, fmt.Errorf("register section: %q registered twice", sec.Name))
		return
	}
	sections[sec.Name] = sec
}

// LookupSection returns a registered section.
func LookupSection(name string) (SectionSpec, bool) {
	sec, ok := lookupIn(sections, name)
	return sec.resolve(), ok
}

// Sections returns every registered section, sorted by name.
func Sections() []SectionSpec {
	out := sortedIn(sections)
	for i := range out {
		out[i] = out[i].resolve()
	}
	return out
}

// lookupIn returns the entry of a registry map, under the registry's lock.
func lookupIn[V any](m map[string]V, name string) (V, bool) {
	regMu.RLock()
	defer regMu.RUnlock()
	v, ok := m[name]
	return v, ok
}

// sortedIn returns the entries of a registry map sorted by name (their key),
// under the registry's lock.
func sortedIn[V any](m map[string]V) []V {
	regMu.RLock()
	defer regMu.RUnlock()
	out := make([]V, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, m[k])
	}
	return out
}

var sectionRE = regexp.MustCompile(`^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$`)

func (sec SectionSpec) validate() error {
	if !sectionRE.MatchString(sec.Name) || strings.HasPrefix(sec.Name, "stages.") {
		return fmt.Errorf("section name %q: want %s outside stages.", sec.Name, sectionRE)
	}
	if !nameRE.MatchString(sec.Flag) {
		return fmt.Errorf("section %q: flag prefix %q: want %s", sec.Name, sec.Flag, nameRE)
	}
	if sec.FieldsFunc != nil {
		return nil // checked by RegistryErr, once every registry is filled
	}
	return validateFields("section "+sec.Name, sec.Fields, nil)
}

// RegistryErr returns the errors of every rejected Register call, or nil,
// and those of a section's FieldsFunc fields.
func RegistryErr() error {
	regMu.RLock()
	errs := slices.Clone(regErrs)
	regMu.RUnlock()
	for _, sec := range Sections() {
		if sec.FieldsFunc == nil {
			continue
		}
		if sec.fieldsErr != nil {
			errs = append(errs, fmt.Errorf("register section %s: %w", sec.Name, sec.fieldsErr))
			continue
		}
		if err := validateFields("section "+sec.Name, sec.Fields, nil); err != nil {
			errs = append(errs, fmt.Errorf("register section: %w", err))
		}
	}
	for _, s := range Specs() {
		if s.FieldsFunc == nil {
			continue
		}
		if s.fieldsErr != nil {
			errs = append(errs, fmt.Errorf("register stage %q: %w", s.Name, s.fieldsErr))
			continue
		}
		if err := s.validateFields(); err != nil {
			errs = append(errs, fmt.Errorf("register stage: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Lookup returns the registered spec of a stage.
func Lookup(name string) (Spec, bool) {
	s, ok := lookupIn(registry, name)
	return s.resolve(), ok
}

// Specs returns every registered spec, sorted by name.
func Specs() []Spec {
	out := sortedIn(registry)
	for i := range out {
		out[i] = out[i].resolve()
	}
	return out
}

// resolve returns s with Fields from FieldsFunc, when it has one.
func (s Spec) resolve() Spec {
	if s.FieldsFunc != nil {
		s.Fields, s.fieldsErr = s.FieldsFunc()
	}
	return s
}

func (s Spec) validate() error {
	if !nameRE.MatchString(s.Name) {
		return fmt.Errorf("stage name %q: want %s", s.Name, nameRE)
	}
	if s.New == nil {
		return fmt.Errorf("stage %q: nil New", s.Name)
	}
	if s.FieldsFunc != nil {
		return nil // checked by RegistryErr, once every registry is filled
	}
	return s.validateFields()
}

// validateFields checks the spec's fields and the keys it names.
func (s Spec) validateFields() error {
	seen := map[string]bool{}
	if err := validateFields(fmt.Sprintf("stage %q", s.Name), s.Fields, seen); err != nil {
		return err
	}
	for _, k := range s.Volatile {
		if !seen[k] {
			return fmt.Errorf("stage %q: volatile key %q is not a field", s.Name, k)
		}
	}
	for k := range s.Moved {
		if seen[k] {
			return fmt.Errorf("stage %q: moved key %q is still a field", s.Name, k)
		}
	}
	return nil
}

// validateFields checks keys, defaults, enums and bounds; seen (if not nil)
// receives the keys.
func validateFields(what string, fields []Field, seen map[string]bool) error {
	if seen == nil {
		seen = map[string]bool{}
	}
	for _, f := range fields {
		if !keyRE.MatchString(f.Key) {
			return fmt.Errorf("%s: field key %q: want %s", what, f.Key, keyRE)
		}
		if seen[f.Key] {
			return fmt.Errorf("%s: field %q twice", what, f.Key)
		}
		seen[f.Key] = true
		if (f.Min != nil || f.Max != nil) && f.Type != TypeInt && f.Type != TypeFloat && f.Type != TypeDuration {
			return fmt.Errorf("%s: field %q: bounds on a %s", what, f.Key, f.Type)
		}
		v, err := coerce(f.Type, f.Default)
		if err == nil {
			err = f.check(v)
		}
		if err != nil {
			return fmt.Errorf("%s: field %q default: %w", what, f.Key, err)
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
