// Package testutil holds helpers shared by tests: where the project's Python
// references live and how to run them, building the evolm binary and hashing
// a directory tree. Tests never skip when a reference is missing: `make
// test` installs every one, so a missing tool is a failure.
package testutil

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
)

// Root returns the repository root.
func Root(t testing.TB) string {
	t.Helper()
	if r := os.Getenv("EVOLM_ROOT"); r != "" {
		return r
	}
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Python returns the venv interpreter that `make venv` provisions.
func Python(t testing.TB) string {
	t.Helper()
	p := os.Getenv("EVOLM_PYTHON")
	if p == "" {
		p = filepath.Join(Root(t), ".venv", "bin", "python")
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("python reference interpreter %s not found: run `make venv` (or `make test`, which provisions it)", p)
	}
	return p
}

// RunPython runs a script from scripts/ (or an absolute path) with args and
// returns its stdout; stderr is shown on failure.
func RunPython(t testing.TB, script string, args ...string) []byte {
	t.Helper()
	return RunPythonInput(t, script, nil, args...)
}

// RunPythonInput is RunPython with stdin (nil: none) as the script's input.
func RunPythonInput(t testing.TB, script string, stdin []byte, args ...string) []byte {
	t.Helper()
	if !filepath.IsAbs(script) {
		script = filepath.Join(Root(t), "scripts", script)
	}
	cmd := exec.Command(Python(t), append([]string{script}, args...)...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("python %s %v: %v\nstderr:\n%s", script, args, err, stderr.String())
	}
	return stdout.Bytes()
}

// Golden is a temporary directory of references that a script from scripts/
// writes once per test binary; the script prints the JSON list of the names
// it wrote there. A package keeps one in a variable and removes it in TestMain.
type Golden struct {
	Prefix string   // os.MkdirTemp pattern of the directory
	Script string   // the script, run as RunPython does
	Args   []string // its arguments before the directory, its last one

	once  sync.Once
	dir   string
	names []string
	err   error
}

// Get runs the script the first time it is called and returns the directory
// and the names; when the script failed, every test that asks fails.
func (g *Golden) Get(t testing.TB) (dir string, names []string) {
	t.Helper()
	g.once.Do(func() {
		dir, err := os.MkdirTemp("", g.Prefix)
		if err != nil {
			g.err = err
			return
		}
		g.dir = dir
		g.err = errors.New("the script failed") // kept if RunPython stops the test
		g.err = json.Unmarshal(RunPython(t, g.Script, append(g.Args[:len(g.Args):len(g.Args)], dir)...), &g.names)
	})
	if g.err != nil {
		t.Fatalf("%s goldens: %v", g.Script, g.err)
	}
	return g.dir, g.names
}

// Remove deletes the directory, if Get made one.
func (g *Golden) Remove() {
	if g.dir != "" {
		os.RemoveAll(g.dir)
	}
}

// PostJSON posts body as application/json to url with the headers given as
// name, value pairs, and returns the response's status, headers and body.
func PostJSON(ctx context.Context, url string, body io.Reader, hdr ...string) (int, http.Header, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, body)
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, data, err
}

// BuildEvolm builds the evolm command into dir and returns the binary's path.
func BuildEvolm(t testing.TB, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "evolm")
	build := exec.Command("go", "build", "-o", bin, "./cmd/evolm")
	build.Dir = Root(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TreeHash is a hex SHA-256 of the tree below dir: every entry's path and
// mode, and every regular file's content. Directories named in skip (the
// run directory's _locks, say) are left out.
func TreeHash(t testing.TB, dir string, skip ...string) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && slices.Contains(skip, d.Name()) {
			return filepath.SkipDir
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fmt.Fprintf(h, "%s|%s\n", rel, info.Mode())
		if d.Type().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			h.Write(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// ErrorContains fails t unless err's text contains each of wants; a nil err
// ends the test, what saying what should have failed ("LoadConfig
// succeeded").
func ErrorContains(t testing.TB, err error, what string, wants ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s, want an error", what)
	}
	for _, w := range wants {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q\ndoes not contain %q", err, w)
		}
	}
}
