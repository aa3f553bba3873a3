// Package choice parses a config value that must be one of a few names.
package choice

import (
	"fmt"
	"slices"
	"strings"
)

// Parse returns s as a C when it is one of choices; otherwise an error that
// names what is parsed, the value and the choices, as in
// `advantage std "x": want population or sample`.
func Parse[C ~string](what, s string, choices ...C) (C, error) {
	if c := C(s); slices.Contains(choices, c) {
		return c, nil
	}
	return "", fmt.Errorf("%s %q: want %s", what, s, list(choices))
}

// list joins choices as "a, b or c".
func list[C ~string](choices []C) string {
	names := make([]string, len(choices))
	for i, c := range choices {
		names[i] = string(c)
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}
