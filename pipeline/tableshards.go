package pipeline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/evolm/evolm/schemas"
)

// TableShard is one committed shard of a run table with the Hive partitions
// its path carries.
type TableShard struct {
	Path  string // file path (run directory joined)
	Rel   string // run-relative, slash-separated
	Phase string // the phase=… partition; "" when the path has none
	Step  int64  // the step=… partition; -1 when the path has none
}

// ErrMissingTable is returned (wrapped, naming the run and the table) when a
// run directory holds no committed shard of a table.
var ErrMissingTable = errors.New("missing table")

// TableShards lists the committed shards of table in r, whichever stage
// committed them: the union over every stage manifest in _manifests/ (a shard
// is committed when a manifest lists it), sorted by step, phase and path. A
// listed shard whose file is gone, or is not the file its manifest recorded
// (CheckShard: size, tail sha256, row count), is an error naming it. No shard
// at all is an error wrapping ErrMissingTable.
func (r *Run) TableShards(table string) ([]TableShard, error) {
	ms, err := r.manifests()
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []TableShard
	for _, m := range ms {
		for _, rel := range m.Paths(table) {
			if seen[rel] {
				continue
			}
			seen[rel] = true
			info, _ := m.Shard(rel)
			if err := r.CheckShard(info); err != nil {
				return nil, fmt.Errorf("run %s: table %s: %w", r.Dir, table, err)
			}
			sh := TableShard{Path: r.Path(rel), Rel: rel, Step: -1}
			parts := partitionMap(PathPartitions(rel))
			sh.Phase = parts["phase"]
			if v, ok := parts["step"]; ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("run %s: shard %s: bad step partition %q", r.Dir, rel, v)
				}
				sh.Step = n
			}
			out = append(out, sh)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("run %s: no committed shards of table %q (%w): run the stage that writes it first", r.Dir, table, ErrMissingTable)
	}
	slices.SortFunc(out, func(a, b TableShard) int {
		if a.Step != b.Step {
			return cmp.Compare(a.Step, b.Step)
		}
		if a.Phase != b.Phase {
			return strings.Compare(a.Phase, b.Phase)
		}
		return strings.Compare(a.Rel, b.Rel)
	})
	return out, nil
}

// ReadRows reads every row of table t in shards, in order: for one step's
// worth of rows or a small table. Errors name the shard.
func ReadRows[T any](ctx context.Context, env *Env, t *schemas.Table[T], shards []TableShard) ([]T, error) {
	paths := make([]string, len(shards))
	for i, sh := range shards {
		paths[i] = sh.Path
	}
	var out []T
	err := ReadEach(ctx, env, t, paths, func(_ string, rows []T) error {
		out = append(out, rows...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ReadEach streams the shards at paths, in order, batch by batch, as rows of
// table t to f with the shard's path; f's error ends it. A batch t cannot
// read is an error naming the shard.
func ReadEach[T any](ctx context.Context, env *Env, t *schemas.Table[T], paths []string, f func(path string, rows []T) error) error {
	for _, p := range paths {
		for rec, err := range ReadShard(ctx, p, env.ReadOptions(t.Schema())) {
			if err != nil {
				return err
			}
			rows, err := t.Read(rec)
			if err != nil {
				return fmt.Errorf("shard %s: %w", p, err)
			}
			if err := f(p, rows); err != nil {
				return err
			}
		}
	}
	return nil
}
