package pipeline

import (
	"errors"
	"fmt"
	"strings"
)

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
