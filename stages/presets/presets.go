// Package presets holds evolm's named configurations as config files for
// `evolm --config`: paper (the paper's models and defaults: Qwen3-8B policy
// and rubric generator, Qwen3-1.7B generative judge, n = 8, temperatures 1.0
// / 0.6 / 0.6) and demo (tiny random checkpoints from `evolm model init`, a
// yes/no judge, n = 2 and 16 new tokens). They set the keys of the stages
// they name only; the test loads each with every stage registered and
// builds every stage from it.
package presets

import (
	"embed"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

//go:embed *.yaml
var files embed.FS

// Names lists the presets.
func Names() []string {
	ents, _ := files.ReadDir(".")
	var out []string
	for _, e := range ents {
		out = append(out, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	sort.Strings(out)
	return out
}

// YAML returns a preset's config file.
func YAML(name string) ([]byte, error) {
	b, err := files.ReadFile(name + ".yaml")
	if err != nil {
		return nil, fmt.Errorf("no preset %q (have %s)", name, strings.Join(Names(), ", "))
	}
	return b, nil
}

// WriteFile writes a preset to dir/<name>.yaml and returns the path, for
// LoadOptions.File.
func WriteFile(name, dir string) (string, error) {
	b, err := YAML(name)
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		return "", fmt.Errorf("preset %s: %w", name, err)
	}
	return p, nil
}
