package pipeline

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

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
