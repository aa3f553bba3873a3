// Package arch states evolm's layers and checks that the import graph keeps
// them (docs/design.md, "Layers"). Its test runs the check over `go list`
// of the whole module in `make test`, so an upward import fails the build.
//
// Every package sits in one layer; a package imports only from its own
// layer or the layers below it, and two rooms of one layer (the engine and
// the data plane) do not import each other. From the bottom:
//
//	base      internal/{choice,failpoint,jsonobj,modelprint,thinking}, schemas
//	contracts serving/backend: the interfaces every room calls models through
//	method    method/...: the EVOLM method in pure Go (no cgo: checked too)
//	engine    model/...            data      pipeline/..., datasets/...
//	serving   serving/...: backends, their registry, the HTTP server, the planner
//	stagekit  internal/lmstage: what the model stages share
//	stages    stages/...: one registered stage a package, plus presets
//	top       cmd/..., bench/..., notebooks
//
// Test support (internal/testutil/..., and the …test packages beside what
// they support) may import anything, and only test files and the top layer
// (benchmarks reuse its data generators) may import it.
package arch

import (
	"fmt"
	"slices"
	"strings"
)

// Module is evolm's module path.
const Module = "github.com/evolm/evolm"

// Layer is one layer of the house; Rank orders them (higher may import
// lower) and Room tells apart the rooms of one rank.
type Layer struct {
	Name string
	Rank int
	Room string
}

// Layers, in the order of the package doc.
var (
	Base      = Layer{"base", 0, "base"}
	Contracts = Layer{"contracts", 1, "contracts"}
	Method    = Layer{"method", 2, "method"}
	Engine    = Layer{"engine", 3, "engine"}
	Data      = Layer{"data", 3, "data"}
	Serving   = Layer{"serving", 4, "serving"}
	Stagekit  = Layer{"stagekit", 5, "stagekit"}
	Stages    = Layer{"stages", 6, "stages"}
	Top       = Layer{"top", 7, "top"}
	TestOnly  = Layer{"test support", 99, "test"}
)

// rules map a module-relative path prefix to its layer; the longest
// matching prefix wins.
var rules = []struct {
	prefix string
	layer  Layer
}{
	{"internal/choice", Base}, {"internal/failpoint", Base}, {"internal/jsonobj", Base}, {"internal/thinking", Base},
	{"internal/modelprint", Base},
	{"internal/arch", Base},
	{"schemas", Base},
	{"serving/backend", Contracts},
	{"method", Method},
	{"model", Engine},
	{"pipeline", Data}, {"datasets", Data},
	{"serving", Serving},
	{"internal/lmstage", Stagekit},
	{"stages", Stages},
	{"cmd", Top}, {"bench", Top}, {"notebooks", Top},
	{"internal/testutil", TestOnly},
	{"schemas/schematest", TestOnly}, {"pipeline/pipelinetest", TestOnly}, {"model/modeltest", TestOnly},
	{"serving/server/servertest", TestOnly},
}

// LayerOf returns the layer of a module package (its import path), or false
// when no rule places it: a new top-level folder must be given a layer.
func LayerOf(pkg string) (Layer, bool) {
	rel := strings.TrimPrefix(strings.TrimPrefix(pkg, Module), "/")
	best, bestLen := Layer{}, -1
	for _, r := range rules {
		if (rel == r.prefix || strings.HasPrefix(rel, r.prefix+"/")) && len(r.prefix) > bestLen {
			best, bestLen = r.layer, len(r.prefix)
		}
	}
	return best, bestLen >= 0
}

// Package is one package of the graph: its import path, its non-test
// imports, its test files' imports, and whether it has cgo files.
type Package struct {
	Path        string
	Imports     []string
	TestImports []string
	Cgo         bool
}

// Check returns every broken rule of the graph, sorted: unplaced packages,
// upward or cross-room imports, test support imported by non-test code,
// and a method package that depends, directly or not, on a cgo package of
// the module or of a dependency (deps maps a package to its transitive
// dependencies with cgo files, from `go list -deps`).
func Check(pkgs []Package, cgoDeps map[string][]string) []string {
	var out []string
	for _, p := range pkgs {
		if !strings.HasPrefix(p.Path, Module) {
			continue
		}
		from, ok := LayerOf(p.Path)
		if !ok {
			out = append(out, fmt.Sprintf("%s: no layer (add a rule to internal/arch)", rel(p.Path)))
			continue
		}
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, Module) {
				continue
			}
			to, ok := LayerOf(imp)
			if !ok {
				continue // reported as that package's own violation
			}
			switch {
			case to == TestOnly && from != TestOnly && from != Top:
				out = append(out, fmt.Sprintf("%s (%s) imports test support %s outside its tests", rel(p.Path), from.Name, rel(imp)))
			case from == TestOnly || to == TestOnly:
			case to.Rank > from.Rank:
				out = append(out, fmt.Sprintf("%s (%s) imports %s (%s): a layer above its own", rel(p.Path), from.Name, rel(imp), to.Name))
			case to.Rank == from.Rank && to.Room != from.Room:
				out = append(out, fmt.Sprintf("%s (%s) imports %s (%s): rooms of one layer do not import each other", rel(p.Path), from.Name, rel(imp), to.Name))
			}
		}
		if from == Method {
			for _, d := range cgoDeps[p.Path] {
				out = append(out, fmt.Sprintf("%s (method) depends on %s, which uses cgo", rel(p.Path), d))
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func rel(pkg string) string { return strings.TrimPrefix(strings.TrimPrefix(pkg, Module), "/") }
