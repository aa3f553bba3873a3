package pipeline

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// BaseChange is a key whose value differs from the base config's (see
// Config.WithBase): the command set it.
type BaseChange struct {
	Key        string // full key, e.g. "roles.judge.model"
	Base, Now  any    // the base file's value and the value in effect
	NowSource  string // where the value in effect came from ("flag --judge-model")
	BaseSource string // the base file
}

func (c BaseChange) String() string {
	return fmt.Sprintf("%s: %s (%s), was %s in %s", c.Key, fmtValue(c.Now), c.NowSource, fmtValue(c.Base), c.BaseSource)
}

// WithBase returns a copy of c (the whole config) in which every key of the
// registered sections named in sections that still has its default value
// takes the value of the YAML config file at path (a run's saved
// config.yaml): the file is a base under what the command set (a --config
// file, env vars, flags), which still wins. Keys of the file outside those
// sections, or that no longer exist, are left out. It also returns the keys
// of those sections whose value in effect differs from the file's.
func (c *Config) WithBase(path string, sections []string) (*Config, []BaseChange, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("base config %s: %w", path, err)
	}
	var tree map[string]any
	if err := yaml.Unmarshal(b, &tree); err != nil {
		return nil, nil, fmt.Errorf("base config %s: %w", path, err)
	}
	flat := flatten("", tree)
	out := &Config{prefix: c.prefix, values: maps.Clone(c.values), source: maps.Clone(c.source), uses: c.uses}
	var changes []BaseChange
	for _, name := range sections {
		sec, ok := LookupSection(name)
		if !ok {
			return nil, nil, fmt.Errorf("base config %s: no section %s registered", path, name)
		}
		for _, f := range sec.Fields {
			k := name + "." + f.Key
			raw, ok := flat[k]
			if !ok {
				continue
			}
			v, err := coerce(f.Type, raw)
			if err == nil {
				err = f.check(v)
			}
			if err != nil {
				return nil, nil, fmt.Errorf("base config %s: key %s: %w", path, k, err)
			}
			if src := out.source[k]; src == "default" || src == "" {
				out.values[k], out.source[k] = v, "base config "+path
				continue
			}
			if fmt.Sprint(out.values[k]) != fmt.Sprint(v) {
				changes = append(changes, BaseChange{Key: k, Base: v, Now: out.values[k], NowSource: out.source[k], BaseSource: path})
			}
		}
	}
	slices.SortFunc(changes, func(a, b BaseChange) int { return strings.Compare(a.Key, b.Key) })
	return out, changes, nil
}
