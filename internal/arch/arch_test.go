package arch

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/evolm/evolm/internal/testutil"
)

// goList runs `go list` over the module with args, in the repository root.
func goList(t *testing.T, env []string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = testutil.Root(t)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v\n%s", args, err, stderr.String())
	}
	return out
}

// graph reads the module's packages from `go list -json`.
func graph(t *testing.T) []Package {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(goList(t, nil, "-tags", "e2e", "-json=ImportPath,Imports,TestImports,XTestImports,CgoFiles", "./...")))
	var out []Package
	for {
		var p struct {
			ImportPath                         string
			Imports, TestImports, XTestImports []string
			CgoFiles                           []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		out = append(out, Package{Path: p.ImportPath, Imports: p.Imports, TestImports: append(p.TestImports, p.XTestImports...), Cgo: len(p.CgoFiles) > 0})
	}
	return out
}

// cgoDeps returns, for each method package, its non-standard transitive
// dependencies that have cgo files.
func cgoDeps(t *testing.T, pkgs []Package) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, p := range pkgs {
		if l, _ := LayerOf(p.Path); l != Method {
			continue
		}
		lines := goList(t, nil, "-deps", "-f", "{{.ImportPath}} {{.Standard}} {{len .CgoFiles}}", p.Path)
		for _, line := range strings.Split(strings.TrimSpace(string(lines)), "\n") {
			f := strings.Fields(line)
			if len(f) == 3 && f[1] == "false" && f[2] != "0" {
				out[p.Path] = append(out[p.Path], f[0])
			}
		}
	}
	return out
}

// TestLayers: the import graph keeps the layers of the package doc.
func TestLayers(t *testing.T) {
	pkgs := graph(t)
	if len(pkgs) < 40 {
		t.Fatalf("go list found %d packages; want the whole module", len(pkgs))
	}
	for _, v := range Check(pkgs, cgoDeps(t, pkgs)) {
		t.Error(v)
	}
}

// TestCheckCatchesUpwardImports: the check itself reports what it must, on
// a graph made for the test: an engine package importing a stage, a method
// package importing the engine or depending on cgo, the engine and the data
// plane importing each other, test support in non-test code and an
// unplaced package.
func TestCheckCatchesUpwardImports(t *testing.T) {
	m := func(rel string) string { return Module + "/" + rel }
	pkgs := []Package{
		{Path: m("model/llama"), Imports: []string{m("stages/run"), m("model/torch")}},
		{Path: m("method/grpo"), Imports: []string{m("model/torch"), m("schemas")}},
		{Path: m("pipeline"), Imports: []string{m("model/torch")}},
		{Path: m("stages/judge"), Imports: []string{m("internal/testutil"), m("serving/roles"), m("method/prompts")}},
		{Path: m("newroom/x")},
		{Path: m("cmd/evolm"), Imports: []string{m("stages/run"), m("serving/torchbe"), m("model/torch")}},
	}
	got := Check(pkgs, map[string][]string{m("method/grpo"): {"github.com/DataDog/zstd"}})
	want := []string{
		"method/grpo (method) depends on github.com/DataDog/zstd, which uses cgo",
		"method/grpo (method) imports model/torch (engine): a layer above its own",
		"model/llama (engine) imports stages/run (stages): a layer above its own",
		"newroom/x: no layer (add a rule to internal/arch)",
		"pipeline (data) imports model/torch (engine): rooms of one layer do not import each other",
		"stages/judge (stages) imports test support internal/testutil outside its tests",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("Check:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// Size limits: no non-test Go file over maxFileLines and no function over
// maxFuncLines, except the files and functions listed here, each with the
// reason its package doc gives too.
const (
	maxFileLines = 600
	maxFuncLines = 120
)

var sizeExceptions = map[string]string{}

// TestSizes lists every non-test Go file over 600 lines and every function
// over 120 lines (its declaration to its closing brace).
func TestSizes(t *testing.T) {
	root := testutil.Root(t)
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if name := d.Name(); rel != "." && (strings.HasPrefix(name, ".") || name == "build" || name == "node_modules" || name == "testdata" || name == "runs" || name == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if n := fset.Position(f.End()).Line; n > maxFileLines && sizeExceptions[rel] == "" {
			t.Errorf("%s: %d lines (at most %d): split it at its seams", rel, n, maxFileLines)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			var body *ast.BlockStmt
			name := "a function literal"
			switch x := n.(type) {
			case *ast.FuncDecl:
				body, name = x.Body, x.Name.Name
			case *ast.FuncLit:
				body = x.Body
			}
			if body == nil {
				return true
			}
			lines := fset.Position(body.End()).Line - fset.Position(n.Pos()).Line + 1
			key := rel + ":" + name
			if lines > maxFuncLines && sizeExceptions[key] == "" {
				t.Errorf("%s:%d: %s is %d lines (at most %d)", rel, fset.Position(n.Pos()).Line, name, lines, maxFuncLines)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
