// Package lmstage holds what the model-calling stages (rollout, rubrics,
// judge) share, so that each is written once: their own config fields (n,
// seed, phase, step, checkpoint; the model roles they call are configured
// once in package roles), input discovery in the run directory, the
// derivation of per-row seeds, provenance metadata and request batching.
//
// Seeds. A row's seed is DeriveSeed(base, key…): the first 8 bytes of
// SHA-256 over the base seed and the row's key parts, as a non-negative
// int64. It depends only on its inputs, so reruns and both backends sample
// with the same seed.
//
// Inputs. A stage input is a list of files or globs from config; when the
// list is empty the stage reads the committed shards of the producing stage
// from the run's manifest, restricted to the given partitions. No input
// file at all is an error naming what was looked for.
package lmstage

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/evolm/evolm/method/prompts"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/serving/roles"
)

// Config keys shared by the model stages (their own: the role keys live in
// package roles).
const (
	KeySeed  = "seed"
	KeyStep  = "step"
	KeyPhase = "phase"
)

// Metadata keys a model stage adds to its output schema (and so to every
// shard's stored Arrow schema).
const (
	MetaBackend      = "evolm.backend"
	MetaModel        = "evolm.model"
	MetaPromptPrefix = "evolm.prompt." // + role: the role prompt's version
	// MetaPromptsFiles is a JSON list of the absolute paths of the prompts
	// files a stage read, so that a later stage (a standalone judge) finds
	// the questions of its rows without being told (PromptsFilesOf).
	MetaPromptsFiles = "evolm.prompts_files"
)

// PromptsFilesMeta returns the MetaPromptsFiles entry for files.
func PromptsFilesMeta(files []string) (map[string]string, error) {
	abs := make([]string, len(files))
	for i, f := range files {
		a, err := filepath.Abs(f)
		if err != nil {
			return nil, err
		}
		abs[i] = a
	}
	b, err := json.Marshal(abs)
	if err != nil {
		return nil, err
	}
	return map[string]string{MetaPromptsFiles: string(b)}, nil
}

// PromptsFilesOf returns the prompts files that the stage which wrote
// shards recorded (MetaPromptsFiles), those that still exist, deduplicated
// and sorted.
func PromptsFilesOf(shards []string) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	for _, sh := range shards {
		r, err := pipeline.OpenShard(sh, pipeline.ReadOptions{})
		if err != nil {
			return nil, err
		}
		raw, ok := r.Metadata()[MetaPromptsFiles]
		r.Close()
		if !ok {
			continue
		}
		var files []string
		if err := json.Unmarshal([]byte(raw), &files); err != nil {
			return nil, fmt.Errorf("%s: metadata %s: %w", sh, MetaPromptsFiles, err)
		}
		for _, f := range files {
			if _, err := os.Stat(f); err == nil && !seen[f] {
				seen[f] = true
				out = append(out, f)
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// WithMeta returns schema with kv added to its metadata.
func WithMeta(schema *arrow.Schema, kv map[string]string) *arrow.Schema {
	md := schema.Metadata()
	keys, vals := append([]string(nil), md.Keys()...), append([]string(nil), md.Values()...)
	ks := make([]string, 0, len(kv))
	for k := range kv {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	for _, k := range ks {
		keys, vals = append(keys, k), append(vals, kv[k])
	}
	m := arrow.NewMetadata(keys, vals)
	return arrow.NewSchema(schema.Fields(), &m)
}

// Provenance is the metadata of a model stage's output: the backend, the
// model and the versions of the role prompts used.
func Provenance(b *roles.Backend, set *prompts.Set, roles ...prompts.Name) map[string]string {
	kv := map[string]string{MetaBackend: b.Name, MetaModel: b.Model}
	for _, r := range roles {
		kv[MetaPromptPrefix+string(r)] = set.Template(r).Version
	}
	return kv
}

// Inputs resolves a stage input: the configured files and globs (sorted,
// deduplicated), or, when none are configured, the committed shards of
// stage under table in the run whose path has every partition in parts,
// each checked against its manifest entry (pipeline.Run.CheckShard).
func Inputs(env *pipeline.Env, configured []string, stage, table string, parts ...pipeline.Partition) ([]string, error) {
	var out []string
	if len(configured) > 0 {
		seen := map[string]bool{}
		for _, g := range configured {
			matches, err := filepath.Glob(g)
			if err != nil {
				return nil, fmt.Errorf("input %q: %w", g, err)
			}
			if len(matches) == 0 {
				return nil, fmt.Errorf("input %q: no such file", g)
			}
			for _, m := range matches {
				files, err := parquetFiles(m)
				if err != nil {
					return nil, fmt.Errorf("input %q: %w", g, err)
				}
				for _, f := range files {
					if !seen[f] {
						seen[f] = true
						out = append(out, f)
					}
				}
			}
		}
		sort.Strings(out)
		return out, nil
	}
	m, err := env.Run.Manifest(stage)
	if err != nil {
		return nil, err
	}
	for _, p := range m.Paths(table) {
		ok := true
		for _, part := range parts {
			if !part.In(p) {
				ok = false
				break
			}
		}
		if ok {
			info, _ := m.Shard(p)
			if err := env.Run.CheckShard(info); err != nil {
				return nil, fmt.Errorf("stage %s input: %w", env.Stage, err)
			}
			out = append(out, env.Run.Path(p))
		}
	}
	if len(out) == 0 {
		var ps []string
		for _, p := range parts {
			ps = append(ps, p.String())
		}
		return nil, fmt.Errorf("no %s shards committed by stage %s in run %s (partitions %s): run `evolm %s` first or set the input files",
			table, stage, env.Run.Dir, strings.Join(ps, ", "), stage)
	}
	return out, nil
}

// Chunks calls fn on consecutive [start, end) ranges of at most size out of
// n, stopping at the first error or when ctx is done.
func Chunks(ctx context.Context, n, size int, fn func(start, end int) error) error {
	for start := 0; start < n; start += size {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(start, min(start+size, n)); err != nil {
			return err
		}
	}
	return nil
}

// FailureText renders a backend row failure for an output column.
func FailureText(f *backend.RowFailure) string {
	return "backend " + f.Error()
}

// parquetFiles is p itself for a file, and for a directory every .parquet
// file below it, recursively and sorted, passing over hidden (".") and
// run-directory bookkeeping ("_") entries such as _manifests and temp
// shards. A directory without one is an error.
func parquetFiles(p string) ([]string, error) {
	st, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return []string{p}, nil
	}
	var found []string
	err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path != p && (strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_")) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.IsDir() && strings.EqualFold(filepath.Ext(d.Name()), ".parquet") {
			found = append(found, path)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(found) == 0 {
		return nil, fmt.Errorf("directory %s holds no .parquet files (searched recursively)", p)
	}
	sort.Strings(found)
	return found, nil
}
