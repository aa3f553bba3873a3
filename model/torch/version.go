package torch

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// WantVersion is the libtorch version gotch v0.9.1 binds, exactly: another
// version's libraries lack symbols the binary needs ("undefined symbol").
const WantVersion = "2.1.0"

// LoadedLibDir returns the directory of the libtorch_cpu.so this process
// mapped (from /proc/self/maps), or "" where that cannot be told.
func LoadedLibDir() string {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.Index(line, "/"); i >= 0 && strings.HasSuffix(line, "/libtorch_cpu.so") {
			return filepath.Dir(line[i:])
		}
	}
	return ""
}

var (
	pyVersionRE = regexp.MustCompile(`(?m)^__version__\s*=\s*['"]([^'"]+)['"]`)
	hVersionRE  = regexp.MustCompile(`(?m)^#define TORCH_VERSION\s+"([^"]+)"`)
)

// VersionAt reads the version of the libtorch whose shared libraries are in
// libDir, from the files that ship beside them: version.py of PyPI's torch
// wheel (torch/lib → torch/version.py), build-version of the official
// libtorch archive (libtorch/lib → libtorch/build-version) or the
// TORCH_VERSION macro of its headers. A local suffix ("+cu121") is kept. It
// returns "" and no error when none of them exists.
func VersionAt(libDir string) (version, source string, err error) {
	root := filepath.Dir(libDir)
	candidates := []struct {
		path string
		re   *regexp.Regexp // nil: the whole file, trimmed
	}{
		{filepath.Join(root, "version.py"), pyVersionRE},
		{filepath.Join(root, "build-version"), nil},
		{filepath.Join(root, "include", "torch", "csrc", "api", "include", "torch", "version.h"), hVersionRE},
	}
	for _, c := range candidates {
		b, err := os.ReadFile(c.path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", c.path, err
		}
		if c.re == nil {
			return strings.TrimSpace(string(b)), c.path, nil
		}
		if m := c.re.FindSubmatch(b); m != nil {
			return string(m[1]), c.path, nil
		}
		return "", c.path, fmt.Errorf("%s: no version found in it", c.path)
	}
	return "", "", nil
}

// CheckVersionAt checks that the libtorch in libDir is WantVersion (any
// local suffix such as "+cpu" or "+cu121"). An unknown layout with no
// version file passes: the check guards the known installs, it does not
// forbid others.
func CheckVersionAt(libDir string) error {
	v, src, err := VersionAt(libDir)
	if err != nil {
		return fmt.Errorf("libtorch version check: %w", err)
	}
	if v == "" {
		return nil
	}
	if base, _, _ := strings.Cut(v, "+"); base == WantVersion {
		return nil
	}
	return fmt.Errorf(`libtorch version mismatch: expected %s, found %s (%s, libraries in %s).
evolm links gotch v0.9.1, which binds libtorch %s exactly; something replaced torch, for example
a pip install of a package that wants a newer torch. Fix: put torch %s back and rebuild:
  .venv/bin/pip install -c scripts/constraints.txt torch==%s && make build
(or: rm -rf .venv && make build). Install other Python packages with -c scripts/constraints.txt`,
		WantVersion, v, src, libDir, WantVersion, WantVersion, WantVersion)
}

// CheckLoadedVersion checks the libtorch this process loaded (LoadedLibDir)
// with CheckVersionAt; where the loaded library cannot be found it passes.
func CheckLoadedVersion() error {
	dir := LoadedLibDir()
	if dir == "" {
		return nil
	}
	return CheckVersionAt(dir)
}
