package pipeline

import (
	"errors"
	"fmt"
)

// ErrUnset is wrapped by a constructor's error about a value that is
// required to run but not set (a model path, say). Validate tolerates it:
// a config may leave a stage it does not run unconfigured.
var ErrUnset = errors.New("not set")

// Unsetf returns an error about key wrapping ErrUnset, named like Errorf.
func (c *Config) Unsetf(key, format string, args ...any) error {
	return fmt.Errorf("config key %s%s (from %s): %s: %w", c.prefix, key, c.Source(key), fmt.Sprintf(format, args...), ErrUnset)
}

// Validate checks cfg as the stages check it when they run: every
// registered stage's constructor (Spec.New) runs on its view (its section
// and the sections it uses), and its
// errors are returned together, except those about values not set yet
// (ErrUnset), which only running that stage makes an error.
func Validate(cfg *Config) error {
	var errs []error
	for _, spec := range Specs() {
		if _, err := spec.New(StageView(cfg, spec)); err != nil && !errors.Is(err, ErrUnset) {
			errs = append(errs, fmt.Errorf("stage %s: %w", spec.Name, err))
		}
	}
	return errors.Join(errs...)
}
