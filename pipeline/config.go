package pipeline

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"

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
	l := &loader{v: viper.New(), known: known, source: map[string]string{}, file: opts.File}
	for k, d := range defaults {
		l.v.SetDefault(k, d)
		l.source[k] = "default"
	}
	if opts.File != "" {
		if err := l.mergeFile(opts.File); err != nil {
			return nil, err
		}
	}
	if err := l.mergeEnv(opts.Env); err != nil {
		return nil, err
	}
	if err := l.bindFlags(opts.Flags); err != nil {
		return nil, err
	}
	return l.config()
}

// loader is one LoadConfig: viper's layers and where each key's value came
// from.
type loader struct {
	v      *viper.Viper
	known  map[string]keyInfo
	source map[string]string
	file   string
}

// mergeFile merges the YAML config file at path, refusing a key (or a
// section) that no key lives under.
func (l *loader) mergeFile(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	var tree map[string]any
	if err := yaml.Unmarshal(b, &tree); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	flat := flatten("", tree)
	var unknown []string
	for k := range flat {
		if _, ok := l.known[k]; !ok {
			unknown = append(unknown, k)
		}
	}
	// Sections with no key under them (`stagez:`, `stagez: {}`) vanish
	// in flatten; they are typos all the same.
sections:
	for _, sec := range unknownSections("", tree, l.known) {
		for _, k := range unknown {
			if strings.HasPrefix(k, sec+".") {
				continue sections
			}
		}
		unknown = append(unknown, sec)
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		if err := movedError("config "+path, unknown, func(k string) string { return k }); err != nil {
			return err
		}
		return fmt.Errorf("config %s: unknown key %s%s", path, strings.Join(unknown, ", "), suggest(unknown[0], l.known))
	}
	l.v.SetConfigType("yaml")
	if err := l.v.MergeConfig(bytes.NewReader(b)); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	for k := range flat {
		l.source[k] = "config file " + path
	}
	return nil
}

// mergeEnv merges the EVOLM_* vars of environ (as os.Environ gives it) that
// name a key; one in the config namespace that names none is an error.
func (l *loader) mergeEnv(environ []string) error {
	env := map[string]string{}
	for _, kv := range environ {
		if name, val, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(name, EnvPrefix) {
			env[name] = val
		}
	}
	byEnv := map[string]string{}
	for k := range l.known {
		byEnv[EnvName(k)] = k
	}
	byOldEnv := map[string]string{}
	for k := range movedKeys() {
		byOldEnv[EnvName(k)] = k
	}
	envTree := map[string]any{}
	for _, name := range slices.Sorted(maps.Keys(env)) {
		k, ok := byEnv[name]
		if !ok {
			if old, ok := byOldEnv[name]; ok {
				return movedError("env "+name, []string{old}, func(k string) string { return k })
			}
			// Other EVOLM_* vars (EVOLM_ROOT, EVOLM_PYTHON) belong to the
			// build; only the stages and sections namespaces are reserved
			// for config.
			if reservedEnv(name) {
				return fmt.Errorf("env %s: no such config key", name)
			}
			continue
		}
		val := any(env[name])
		if t := l.known[k].typ; env[name] == "" && t != TypeString && t != TypeStrings {
			// An empty value would otherwise coerce to 0 or false.
			return fmt.Errorf("env %s: empty value for config key %s (%s): set a value or unset the variable", name, k, t)
		}
		if l.known[k].typ == TypeStrings {
			val = splitList(env[name])
		}
		if _, isMap := l.v.Get(k).(map[string]any); isMap {
			// viper would keep the file's mapping over the env's value.
			return fmt.Errorf("config %s: key %s: want %s, got a mapping", l.file, k, l.known[k].typ)
		}
		setPath(envTree, k, val)
		l.source[k] = "env " + name
	}
	// Viper reads env vars from the process only (os.LookupEnv); opts.Env
	// is the environment given, so its values, checked above, join viper's
	// config layer over the file.
	if err := l.v.MergeConfigMap(envTree); err != nil {
		return fmt.Errorf("env: %w", err)
	}
	return nil
}

// bindFlags binds the flags the user set (Changed): viper's flag layer wins
// over env, file and defaults.
func (l *loader) bindFlags(flags map[string]*pflag.Flag) error {
	for _, k := range slices.Sorted(maps.Keys(flags)) {
		f := flags[k]
		if f == nil || !f.Changed {
			continue
		}
		if _, ok := l.known[k]; !ok {
			return fmt.Errorf("flag --%s: no such config key %s", f.Name, k)
		}
		if err := l.v.BindPFlag(k, f); err != nil {
			return fmt.Errorf("flag --%s: %w", f.Name, err)
		}
		l.source[k] = "flag --" + f.Name
	}
	return nil
}

// config reads every key's merged value, coerced to its type and checked
// against its field; every bad value is reported.
func (l *loader) config() (*Config, error) {
	c := &Config{values: map[string]any{}, source: l.source}
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(l.known)) {
		info := l.known[k]
		val, err := coerce(info.typ, l.v.Get(k))
		if err == nil && info.field != nil {
			err = info.field.check(val)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("config key %s (from %s): %w", k, l.source[k], err))
			continue
		}
		c.values[k] = val
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return c, nil
}
