package pipeline

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cast"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"go.yaml.in/yaml/v3"
)

//go:embed defaults.yaml
var defaultsYAML []byte

// EnvPrefix starts every config env var.
const EnvPrefix = "EVOLM_"

// LoadOptions are the sources LoadConfig merges over the embedded defaults and
// the registered stage specs' defaults, in this order of precedence (last wins):
// File, Env, Flags.
type LoadOptions struct {
	File string // YAML file (--config); "" for none
	// Env is the environment as os.Environ returns it. Only EVOLM_<KEY> vars
	// of known keys are read; an EVOLM_STAGES_* var naming no key is an error.
	Env []string
	// Flags maps config keys to flags; only flags the user set (Changed) apply.
	Flags map[string]*pflag.Flag
}

// Config is the merged, type-checked configuration, or a section of it
// (see Section). Keys are dotted and lower-case: "stages.dedup.threshold".
type Config struct {
	prefix string         // "" or "stages.dedup."
	values map[string]any // full key → typed value
	source map[string]string
	// uses are the registered sections a stage's view also covers (its
	// Spec.Uses): Hash and FileYAML include them.
	uses []string
}

// keyInfo is what LoadConfig knows about a key.
type keyInfo struct {
	typ   FieldType
	field *Field // nil for keys from defaults.yaml
}

// knownKeys returns every config key: defaults.yaml's, the registered
// sections' and the specs' fields.
func knownKeys() (map[string]keyInfo, map[string]any, error) {
	var tree map[string]any
	if err := yaml.Unmarshal(defaultsYAML, &tree); err != nil {
		return nil, nil, fmt.Errorf("embedded defaults.yaml: %w", err)
	}
	defaults := flatten("", tree)
	known := map[string]keyInfo{}
	for k, v := range defaults {
		known[k] = keyInfo{typ: typeOf(v)}
	}
	for _, sec := range Sections() {
		for i := range sec.Fields {
			f := &sec.Fields[i]
			k := sec.Name + "." + f.Key
			known[k] = keyInfo{typ: f.Type, field: f}
			defaults[k] = f.Default
		}
	}
	for _, s := range Specs() {
		for i := range s.Fields {
			f := &s.Fields[i]
			k := "stages." + s.Name + "." + f.Key
			known[k] = keyInfo{typ: f.Type, field: f}
			defaults[k] = f.Default
		}
	}
	return known, defaults, nil
}

// movedKeys maps every key a stage no longer has (stages.<name>.<key>) to
// where it lives now (Spec.Moved).
func movedKeys() map[string]string {
	out := map[string]string{}
	for _, s := range Specs() {
		for k, to := range s.Moved {
			out["stages."+s.Name+"."+k] = to
		}
	}
	return out
}

// movedError names every moved key in keys (full keys) with its new place,
// or returns nil when none moved.
func movedError(where string, keys []string, name func(string) string) error {
	moved := movedKeys()
	var errs []error
	for _, k := range keys {
		if to, ok := moved[k]; ok {
			errs = append(errs, fmt.Errorf("%s: %s has moved to %s", where, name(k), to))
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w\n(each model role is configured once, under roles.policy, roles.rubric_generator and roles.judge; `evolm config print` shows them)", errors.Join(errs...))
}

// reservedEnv reports whether an EVOLM_* var name belongs to the config
// namespace (stages and registered sections), where a var naming no key is
// an error rather than another tool's variable.
func reservedEnv(name string) bool {
	if strings.HasPrefix(name, EnvPrefix+"STAGES_") {
		return true
	}
	for _, sec := range Sections() {
		top, _, _ := strings.Cut(sec.Name, ".")
		if strings.HasPrefix(name, EnvName(top)+"_") {
			return true
		}
	}
	return false
}

func typeOf(v any) FieldType {
	switch v.(type) {
	case bool:
		return TypeBool
	case int, int64:
		return TypeInt
	case float64:
		return TypeFloat
	case []any:
		return TypeStrings
	}
	return TypeString
}

// unknownSections returns the paths of the nested maps in tree (a config
// file) that are no section of a known key: `stagez: {}` or `stages:
// {dedupp: {}}` vanish in flatten but are typos all the same.
func unknownSections(prefix string, tree map[string]any, known map[string]keyInfo) []string {
	var out []string
	for k, v := range tree {
		sub, ok := v.(map[string]any)
		if !ok {
			continue
		}
		path := strings.ToLower(prefix + k)
		isSection := false
		for kk := range known {
			if strings.HasPrefix(kk, path+".") {
				isSection = true
				break
			}
		}
		if !isSection {
			if _, leaf := known[path]; !leaf {
				out = append(out, path)
			}
			continue
		}
		out = append(out, unknownSections(path+".", sub, known)...)
	}
	return out
}

// setPath sets the dotted key in the nested map tree, creating the maps on
// its path.
func setPath(tree map[string]any, key string, val any) {
	parts := strings.Split(key, ".")
	for _, p := range parts[:len(parts)-1] {
		sub, ok := tree[p].(map[string]any)
		if !ok {
			sub = map[string]any{}
			tree[p] = sub
		}
		tree = sub
	}
	tree[parts[len(parts)-1]] = val
}

// flatten turns nested maps into dotted keys; empty maps vanish.
func flatten(prefix string, m map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		key := strings.ToLower(prefix + k)
		if sub, ok := v.(map[string]any); ok {
			for kk, vv := range flatten(key+".", sub) {
				out[kk] = vv
			}
			continue
		}
		out[key] = v
	}
	return out
}

// EnvName is the env var that sets a config key.
func EnvName(key string) string {
	return EnvPrefix + strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(key))
}

// LoadConfig merges the configuration: embedded defaults.yaml and stage spec
// defaults, then opts.File, then EVOLM_* env vars, then flags. Viper does the
// merge: the defaults are its defaults, the file and then the env vars its
// config layer, the flags the user set its flag layer. Unknown keys
// in the file are errors naming the key and the file; a value that does not
// fit its key's type or enum is an error naming the key and where the value
// came from.
func LoadConfig(opts LoadOptions) (*Config, error) {
	if err := RegistryErr(); err != nil {
		return nil, err
	}
	known, defaults, err := knownKeys()
	if err != nil {
		return nil, err
	}
	v := viper.New()
	source := map[string]string{}
	for k, d := range defaults {
		v.SetDefault(k, d)
		source[k] = "default"
	}
	if opts.File != "" {
		b, err := os.ReadFile(opts.File)
		if err != nil {
			return nil, fmt.Errorf("config %s: %w", opts.File, err)
		}
		var tree map[string]any
		if err := yaml.Unmarshal(b, &tree); err != nil {
			return nil, fmt.Errorf("config %s: %w", opts.File, err)
		}
		flat := flatten("", tree)
		var unknown []string
		for k := range flat {
			if _, ok := known[k]; !ok {
				unknown = append(unknown, k)
			}
		}
		// Sections with no key under them (`stagez:`, `stagez: {}`) vanish
		// in flatten; they are typos all the same.
	sections:
		for _, sec := range unknownSections("", tree, known) {
			for _, k := range unknown {
				if strings.HasPrefix(k, sec+".") {
					continue sections
				}
			}
			unknown = append(unknown, sec)
		}
		if len(unknown) > 0 {
			sort.Strings(unknown)
			if err := movedError("config "+opts.File, unknown, func(k string) string { return k }); err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("config %s: unknown key %s%s", opts.File, strings.Join(unknown, ", "), suggest(unknown[0], known))
		}
		v.SetConfigType("yaml")
		if err := v.MergeConfig(bytes.NewReader(b)); err != nil {
			return nil, fmt.Errorf("config %s: %w", opts.File, err)
		}
		for k := range flat {
			source[k] = "config file " + opts.File
		}
	}
	env := map[string]string{}
	for _, kv := range opts.Env {
		if name, val, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(name, EnvPrefix) {
			env[name] = val
		}
	}
	byEnv := map[string]string{}
	for k := range known {
		byEnv[EnvName(k)] = k
	}
	var envKeys []string
	for name := range env {
		envKeys = append(envKeys, name)
	}
	sort.Strings(envKeys)
	byOldEnv := map[string]string{}
	envTree := map[string]any{}
	for k := range movedKeys() {
		byOldEnv[EnvName(k)] = k
	}
	for _, name := range envKeys {
		k, ok := byEnv[name]
		if !ok {
			if old, ok := byOldEnv[name]; ok {
				return nil, movedError("env "+name, []string{old}, func(k string) string { return k })
			}
			// Other EVOLM_* vars (EVOLM_ROOT, EVOLM_PYTHON) belong to the
			// build; only the stages and sections namespaces are reserved
			// for config.
			if reservedEnv(name) {
				return nil, fmt.Errorf("env %s: no such config key", name)
			}
			continue
		}
		val := any(env[name])
		if t := known[k].typ; env[name] == "" && t != TypeString && t != TypeStrings {
			// An empty value would otherwise coerce to 0 or false.
			return nil, fmt.Errorf("env %s: empty value for config key %s (%s): set a value or unset the variable", name, k, t)
		}
		if known[k].typ == TypeStrings {
			val = splitList(env[name])
		}
		if _, isMap := v.Get(k).(map[string]any); isMap {
			// viper would keep the file's mapping over the env's value.
			return nil, fmt.Errorf("config %s: key %s: want %s, got a mapping", opts.File, k, known[k].typ)
		}
		setPath(envTree, k, val)
		source[k] = "env " + name
	}
	// Viper reads env vars from the process only (os.LookupEnv); opts.Env
	// is the environment given, so its values, checked above, join viper's
	// config layer over the file.
	if err := v.MergeConfigMap(envTree); err != nil {
		return nil, fmt.Errorf("env: %w", err)
	}
	var flagKeys []string
	for k := range opts.Flags {
		flagKeys = append(flagKeys, k)
	}
	sort.Strings(flagKeys)
	for _, k := range flagKeys {
		f := opts.Flags[k]
		if f == nil || !f.Changed {
			continue
		}
		if _, ok := known[k]; !ok {
			return nil, fmt.Errorf("flag --%s: no such config key %s", f.Name, k)
		}
		// viper's flag layer: a set flag wins over env, file and defaults.
		if err := v.BindPFlag(k, f); err != nil {
			return nil, fmt.Errorf("flag --%s: %w", f.Name, err)
		}
		source[k] = "flag --" + f.Name
	}

	c := &Config{values: map[string]any{}, source: source}
	var errs []error
	keys := slices.Sorted(maps.Keys(known))
	for _, k := range keys {
		info := known[k]
		val, err := coerce(info.typ, v.Get(k))
		if err == nil && info.field != nil {
			err = info.field.check(val)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("config key %s (from %s): %w", k, source[k], err))
			continue
		}
		c.values[k] = val
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return c, nil
}

// StageConfig returns the config view of a registered stage (its section
// and the sections it uses) with the defaults overridden by values, keys
// relative to the stage's section ("threshold") or full keys of a used
// section ("roles.policy.model"), type-checked like LoadConfig. Tests use it
// to call a stage's constructor directly.
func StageConfig(stage string, values map[string]any) (*Config, error) {
	spec, ok := Lookup(stage)
	if !ok {
		return nil, fmt.Errorf("no stage %q registered", stage)
	}
	c := &Config{prefix: "stages." + stage + ".", values: map[string]any{}, source: map[string]string{}, uses: spec.Uses}
	fields := map[string]Field{}
	for _, f := range spec.Fields {
		fields[c.prefix+f.Key] = f
	}
	for _, name := range spec.Uses {
		sec, ok := LookupSection(name)
		if !ok {
			return nil, fmt.Errorf("stage %s uses section %s, which is not registered", stage, name)
		}
		for _, f := range sec.Fields {
			fields[name+"."+f.Key] = f
		}
	}
	full := map[string]any{}
	for k, v := range values {
		fk := c.prefix + k
		if _, ok := fields[fk]; !ok {
			fk = k
		}
		if _, ok := fields[fk]; !ok {
			return nil, fmt.Errorf("config key %s%s: unknown key", c.prefix, k)
		}
		full[fk] = v
	}
	for k, f := range fields {
		raw, src := f.Default, "default"
		if v, ok := full[k]; ok {
			raw, src = v, "test value"
		}
		val, err := coerce(f.Type, raw)
		if err == nil {
			err = f.check(val)
		}
		if err != nil {
			return nil, fmt.Errorf("config key %s (from %s): %w", k, src, err)
		}
		c.values[k] = val
		c.source[k] = src
	}
	return c, nil
}

// StageView returns the view of cfg that stage spec's constructor gets: its
// section, covering the sections it uses (Spec.Uses).
func StageView(cfg *Config, spec Spec) *Config {
	v := cfg.Section("stages." + spec.Name)
	v.uses = spec.Uses
	return v
}

// checkRequired checks that every Required field of spec has a value in
// cfg (the stage's section). RunStage calls it: other commands (stages,
// config print) work without the stage's required values.
func (s Spec) checkRequired(cfg *Config) error {
	var errs []error
	for _, f := range s.Fields {
		if f.Required && isZero(cfg.Get(f.Key)) {
			errs = append(errs, fmt.Errorf("config key %s%s: required, not set (flag --%s or env %s)",
				cfg.prefix, f.Key, strings.ReplaceAll(f.Key, "_", "-"), EnvName(cfg.prefix+f.Key)))
		}
	}
	return errors.Join(errs...)
}

func suggest(key string, known map[string]keyInfo) string {
	best, bestD := "", 4
	for k := range known {
		if d := levenshtein(key, k); d < bestD {
			best, bestD = k, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %s?)", best)
}

func levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

func splitList(s string) []string {
	s = strings.TrimSpace(strings.Trim(strings.TrimSpace(s), "[]"))
	if s == "" {
		return []string{}
	}
	parts := strings.Split(s, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}

// coerce converts a raw value to the Go type of t.
func coerce(t FieldType, raw any) (any, error) {
	switch t {
	case TypeString:
		switch raw.(type) {
		case map[string]any, []any, []string:
			return nil, fmt.Errorf("want string, got %v", raw)
		}
		return cast.ToStringE(raw)
	case TypeInt:
		if f, ok := raw.(float64); ok && f != float64(int(f)) {
			return nil, fmt.Errorf("want int, got %v", raw)
		}
		n, err := cast.ToIntE(raw)
		if err != nil {
			return nil, fmt.Errorf("want int, got %q", fmt.Sprint(raw))
		}
		return n, nil
	case TypeFloat:
		f, err := cast.ToFloat64E(raw)
		if err != nil {
			return nil, fmt.Errorf("want float, got %q", fmt.Sprint(raw))
		}
		// NaN passes every range check (all comparisons are false) and
		// cannot be hashed; Inf is no setting either.
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("want a finite float, got %v", f)
		}
		// -0 prints as "-0", which YAML reads back as the integer 0: one
		// zero keeps a printed config's hash (found by FuzzLoadConfig).
		return f + 0, nil
	case TypeBool:
		b, err := cast.ToBoolE(raw)
		if err != nil {
			return nil, fmt.Errorf("want bool, got %q", fmt.Sprint(raw))
		}
		return b, nil
	case TypeDuration:
		if s, ok := raw.(string); ok {
			d, err := time.ParseDuration(s)
			if err != nil {
				return nil, fmt.Errorf("want duration (e.g. 90s), got %q", s)
			}
			return d, nil
		}
		if d, ok := raw.(time.Duration); ok {
			return d, nil
		}
		return nil, fmt.Errorf("want duration (e.g. 90s), got %v", raw)
	case TypeStrings:
		switch x := raw.(type) {
		case nil:
			return []string{}, nil
		case string:
			return splitList(x), nil
		}
		s, err := cast.ToStringSliceE(raw)
		if err != nil {
			return nil, fmt.Errorf("want list of strings, got %v", raw)
		}
		return s, nil
	}
	return nil, fmt.Errorf("unknown field type %q", t)
}

// check checks v (of f's Go type) against f's enum and bounds.
func (f Field) check(v any) error {
	if err := f.checkEnum(v); err != nil {
		return err
	}
	return f.checkBounds(v)
}

// checkBounds checks v against Min and Max. A NaN fails every bound.
func (f Field) checkBounds(v any) error {
	if f.Min == nil && f.Max == nil {
		return nil
	}
	var x float64
	switch n := v.(type) {
	case int:
		x = float64(n)
	case float64:
		x = n
	case time.Duration:
		x = n.Seconds()
	default:
		return nil
	}
	lo, hi := f.Min != nil, f.Max != nil
	ok := true
	if lo {
		ok = ok && (x > *f.Min || !f.ExclusiveMin && x == *f.Min)
	}
	if hi {
		ok = ok && (x < *f.Max || !f.ExclusiveMax && x == *f.Max)
	}
	if ok {
		return nil
	}
	return fmt.Errorf("%v, want %s", v, f.BoundsText())
}

// BoundsText renders Min and Max: "> 0", "≥ 1", "in (0, 1]"; "" when
// unbounded.
func (f Field) BoundsText() string {
	num := func(p *float64) string {
		switch f.Type {
		case TypeDuration:
			return time.Duration(*p * float64(time.Second)).String()
		case TypeInt:
			return strconv.FormatInt(int64(*p), 10)
		}
		return strconv.FormatFloat(*p, 'g', -1, 64)
	}
	switch {
	case f.Min != nil && f.Max != nil:
		l, r := "[", "]"
		if f.ExclusiveMin {
			l = "("
		}
		if f.ExclusiveMax {
			r = ")"
		}
		return "in " + l + num(f.Min) + ", " + num(f.Max) + r
	case f.Min != nil && f.ExclusiveMin:
		return "> " + num(f.Min)
	case f.Min != nil:
		return "≥ " + num(f.Min)
	case f.Max != nil && f.ExclusiveMax:
		return "< " + num(f.Max)
	case f.Max != nil:
		return "≤ " + num(f.Max)
	}
	return ""
}

func (f Field) checkEnum(v any) error {
	if len(f.Enum) == 0 {
		return nil
	}
	s, _ := v.(string)
	for _, e := range f.Enum {
		if s == e {
			return nil
		}
	}
	return fmt.Errorf("%q is not one of %s", s, strings.Join(f.Enum, ", "))
}

func isZero(v any) bool {
	switch x := v.(type) {
	case string:
		return x == ""
	case []string:
		return len(x) == 0
	}
	return false
}

// Section returns the part of c under prefix (e.g. "stages.dedup"); its
// accessors take keys relative to it.
func (c *Config) Section(prefix string) *Config {
	return &Config{prefix: c.prefix + strings.TrimSuffix(prefix, ".") + ".", values: c.values, source: c.source}
}

// At returns the section of the whole config under prefix (a full key
// prefix such as "roles.judge"), whichever section c is: a stage reads the
// sections it uses with cfg.At(name).
func (c *Config) At(prefix string) *Config {
	return &Config{prefix: strings.TrimSuffix(prefix, ".") + ".", values: c.values, source: c.source}
}

// Uses returns the sections this stage view covers besides its own.
func (c *Config) Uses() []string { return c.uses }

// Get returns the typed value of key (relative to the section), or nil.
func (c *Config) Get(key string) any { return c.values[c.prefix+key] }

// Has reports whether key exists.
func (c *Config) Has(key string) bool { _, ok := c.values[c.prefix+key]; return ok }

// Source says where key's value came from: "default", "config file X",
// "env EVOLM_X" or "flag --x".
func (c *Config) Source(key string) string { return c.source[c.prefix+key] }

// String returns a string key's value ("" if absent or of another type).
func (c *Config) String(key string) string { s, _ := c.Get(key).(string); return s }

// Int returns an int key's value.
func (c *Config) Int(key string) int { n, _ := c.Get(key).(int); return n }

// Float returns a float key's value.
func (c *Config) Float(key string) float64 { f, _ := c.Get(key).(float64); return f }

// Bool returns a bool key's value.
func (c *Config) Bool(key string) bool { b, _ := c.Get(key).(bool); return b }

// Duration returns a duration key's value.
func (c *Config) Duration(key string) time.Duration { d, _ := c.Get(key).(time.Duration); return d }

// Strings returns a list key's value.
func (c *Config) Strings(key string) []string { s, _ := c.Get(key).([]string); return s }

// Errorf returns an error about key that names it in full, for constructors'
// cross-field checks: cfg.Errorf("bands", "must divide num_perm").
func (c *Config) Errorf(key, format string, args ...any) error {
	return fmt.Errorf("config key %s%s (from %s): %s", c.prefix, key, c.Source(key), fmt.Sprintf(format, args...))
}

// Keys returns the section's keys (relative), sorted.
func (c *Config) Keys() []string {
	var out []string
	for k := range c.values {
		if strings.HasPrefix(k, c.prefix) {
			out = append(out, strings.TrimPrefix(k, c.prefix))
		}
	}
	sort.Strings(out)
	return out
}

// Map returns the section as a nested map of typed values (durations as
// strings), as YAML and JSON print it.
func (c *Config) Map() map[string]any {
	root := map[string]any{}
	for _, k := range c.Keys() {
		val := c.Get(k)
		if d, ok := val.(time.Duration); ok {
			val = d.String()
		}
		setPath(root, k, val)
	}
	return root
}

// YAML renders the section (keys sorted).
func (c *Config) YAML() ([]byte, error) {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(c.Map()); err != nil {
		return nil, err
	}
	return b.Bytes(), enc.Close()
}

// FileYAML renders the section (and the sections a stage view uses) as a
// config file: keys nested under their prefix (stages.run.lr → stages:
// {run: {lr: …}}), so that --config FILE reproduces exactly these sections
// and nothing else.
func (c *Config) FileYAML() ([]byte, error) {
	doc := map[string]any{}
	for _, sec := range append([]*Config{c}, c.used()...) {
		m := sec.Map()
		key := strings.TrimSuffix(sec.prefix, ".")
		if key == "" {
			doc = m
			continue
		}
		setPath(doc, key, m)
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	return b.Bytes(), enc.Close()
}

// used returns the views of the sections c uses.
func (c *Config) used() []*Config {
	out := make([]*Config, len(c.uses))
	for i, u := range c.uses {
		out[i] = c.At(u)
	}
	return out
}

// Hash identifies the section's values (and those of the sections a stage
// view uses): "sha256:" and 16 hex digits of their canonical JSON. Shards
// record their stage's config hash.
func (c *Config) Hash() string { return c.HashExcept() }

// HashExcept is Hash over every key but the given ones (relative to the
// section) and the Volatile keys of the sections it uses, for settings that
// may change without invalidating what was computed (see Spec.Volatile and
// Field.Volatile).
func (c *Config) HashExcept(keys ...string) string {
	m := c.Map()
	for _, k := range keys {
		delete(m, k)
	}
	for _, u := range c.used() {
		name := strings.TrimSuffix(u.prefix, ".")
		um := u.Map()
		if sec, ok := LookupSection(name); ok {
			for _, f := range sec.Fields {
				if f.Volatile {
					delete(um, f.Key)
				}
			}
		}
		m[name] = um
	}
	// LoadConfig and StageConfig refuse non-finite floats; should one get
	// here anyway it is hashed as its name, never as the empty input that a
	// failed Marshal would leave.
	b, err := json.Marshal(hashable(m)) // map keys are sorted by encoding/json
	if err != nil {
		b = []byte("unhashable config: " + err.Error() + fmt.Sprintf("%v", m))
	}
	h := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(h[:8])
}

// hashable returns v with non-finite floats replaced by their names, which
// encoding/json cannot encode.
func hashable(v any) any {
	switch x := v.(type) {
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return "float:" + fmt.Sprint(x)
		}
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, vv := range x {
			out[k] = hashable(vv)
		}
		return out
	}
	return v
}
