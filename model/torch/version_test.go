package torch

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/evolm/evolm/internal/testutil"
)

// fakeLibtorch lays out a wheel-like torch/ directory whose version.py says
// version, and returns its lib directory.
func fakeLibtorch(t *testing.T, file, content string) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "torch")
	lib := filepath.Join(root, "lib")
	if err := os.MkdirAll(lib, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(lib, "libtorch_cpu.so"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if file != "" {
		if err := os.WriteFile(filepath.Join(root, file), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return lib
}

func TestVersionGuard(t *testing.T) {
	tests := []struct {
		name, file, content string
		wantErr             []string // substrings; nil: no error
	}{
		{"wheel 2.1.0", "version.py", "__version__ = '2.1.0'\ndebug = False\n", nil},
		{"wheel cuda 2.1.0", "version.py", "__version__ = '2.1.0+cu121'\n", nil},
		{"archive 2.1.0", "build-version", "2.1.0+cpu\n", nil},
		{"unknown layout", "", "", nil},
		{"wheel 2.6.0", "version.py", "__version__ = '2.6.0+cu124'\n",
			[]string{"expected 2.1.0, found 2.6.0+cu124", "version.py", "pip install -c scripts/constraints.txt torch==2.1.0"}},
		{"archive 1.13.1", "build-version", "1.13.1+cpu\n", []string{"expected 2.1.0, found 1.13.1+cpu", "make build"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckVersionAt(fakeLibtorch(t, tc.file, tc.content))
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("err = %v, want nil", err)
				}
				return
			}
			testutil.ErrorContains(t, err, "the version check passed", tc.wantErr...)
		})
	}
}

// The test binary links the build's libtorch, which must pass the guard and
// must be found: a guard that never finds the library guards nothing.
func TestLoadedVersion(t *testing.T) {
	dir := LoadedLibDir()
	if dir == "" {
		t.Fatal("libtorch_cpu.so not found in /proc/self/maps")
	}
	v, src, err := VersionAt(dir)
	if err != nil || v == "" {
		t.Fatalf("VersionAt(%s) = %q, %v", dir, v, err)
	}
	t.Logf("loaded libtorch %s (%s)", v, src)
	if err := CheckLoadedVersion(); err != nil {
		t.Fatal(err)
	}
}
