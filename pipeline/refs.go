package pipeline

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/evolm/evolm/method/rules"
	"github.com/evolm/evolm/schemas"
)

// ErrDanglingReference is wrapped by the error of `evolm inspect --verify`
// when a row of a run's table names a row of another table that the run
// does not hold (a judgment of a deleted rollout, say).
var ErrDanglingReference = errors.New("dangling reference")

// reference is one column of a table that names rows of other tables: a
// value must be one of the ids of some target (or, for pair responses, the
// id of a pair with a /chosen or /rejected suffix). A target table the run
// does not hold is not checked: a replay run holds pairs without the
// source's rollouts.
type reference struct {
	table, column string
	// phase, when set, restricts the check to rows of that phase partition.
	phase   string
	targets []refTarget
}

// refTarget is a table's id column that a reference may name.
type refTarget struct {
	table, column string
	pairResponse  bool // the value is rules.ChosenID or rules.RejectedID of the id
}

// references are the links between a run's tables that --verify checks.
var references = []reference{
	{table: schemas.Judgments.Name, column: "response_id", targets: []refTarget{
		{table: schemas.Rollouts.Name, column: "rollout_id"}, {table: schemas.Pairs.Name, column: "pair_id", pairResponse: true}}},
	{table: schemas.Judgments.Name, column: "rubric_id", targets: []refTarget{{table: schemas.Rubrics.Name, column: "rubric_id"}}},
	{table: schemas.Pairs.Name, column: "chosen_rollout_id", targets: []refTarget{{table: schemas.Rollouts.Name, column: "rollout_id"}}},
	{table: schemas.Pairs.Name, column: "rejected_rollout_id", targets: []refTarget{{table: schemas.Rollouts.Name, column: "rollout_id"}}},
	{table: schemas.Rubrics.Name, column: "rollout_id", targets: []refTarget{{table: schemas.Rollouts.Name, column: "rollout_id"}}},
	{table: schemas.Rubrics.Name, column: "item_id", phase: schemas.PhaseRubric, targets: []refTarget{{table: schemas.Pairs.Name, column: "pair_id"}}},
}

// idSet holds ids as 64-bit hashes: 8 bytes an id, whatever its length (a
// collision could hide one dangling id in 2^64, never invent one).
type idSet struct {
	seed maphash.Seed
	m    map[uint64]struct{}
}

func (s *idSet) add(id string)      { s.m[maphash.String(s.seed, id)] = struct{}{} }
func (s *idSet) has(id string) bool { _, ok := s.m[maphash.String(s.seed, id)]; return ok }

// refCheck is the outcome of one reference.
type refCheck struct {
	ref             reference
	rows, dangling  int64
	example, target string
}

// checkReferences checks every reference between the tables of run whose
// source and at least one target the run holds, reading only the id
// columns of its committed shards, and writes one line per reference. It
// returns an error wrapping ErrDanglingReference naming each table, column
// and count when any value names no row.
func checkReferences(ctx context.Context, w io.Writer, run *Run) error {
	sets := map[string]*idSet{} // "table.column" → ids
	seed := maphash.MakeSeed()
	ids := func(table, column string) (*idSet, error) {
		key := table + "." + column
		if s, ok := sets[key]; ok {
			return s, nil
		}
		shards, err := run.TableShards(table)
		if errors.Is(err, ErrMissingTable) {
			sets[key] = nil
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		s := &idSet{seed: seed, m: map[uint64]struct{}{}}
		err = eachString(ctx, shards, column, "", func(v string) { s.add(v) })
		if err != nil {
			return nil, err
		}
		sets[key] = s
		return s, nil
	}
	var checks []refCheck
	for _, ref := range references {
		type tgt struct {
			t   refTarget
			ids *idSet
		}
		var tgts []tgt
		var names []string
		for _, t := range ref.targets {
			s, err := ids(t.table, t.column)
			if err != nil {
				return err
			}
			if s != nil {
				tgts = append(tgts, tgt{t, s})
				names = append(names, t.table+"."+t.column)
			}
		}
		if len(tgts) == 0 {
			continue
		}
		shards, err := run.TableShards(ref.table)
		if errors.Is(err, ErrMissingTable) {
			continue
		}
		if err != nil {
			return err
		}
		c := refCheck{ref: ref, target: strings.Join(names, " or ")}
		err = eachString(ctx, shards, ref.column, ref.phase, func(v string) {
			c.rows++
			for _, t := range tgts {
				id := v
				if t.t.pairResponse {
					var ok bool
					if id, ok = pairOfResponse(v); !ok {
						continue
					}
				}
				if t.ids.has(id) {
					return
				}
			}
			if c.dangling++; c.example == "" {
				c.example = v
			}
		})
		if err != nil {
			return err
		}
		checks = append(checks, c)
	}
	return reportReferences(w, checks)
}

// reportReferences writes one line per checked reference and returns the
// error naming the dangling ones.
func reportReferences(w io.Writer, checks []refCheck) error {
	if len(checks) == 0 {
		return nil
	}
	fmt.Fprintln(w, "references between tables:")
	var bad []string
	for _, c := range checks {
		what := c.ref.table + "." + c.ref.column
		if c.ref.phase != "" {
			what += " (phase " + c.ref.phase + ")"
		}
		if c.dangling == 0 {
			fmt.Fprintf(w, "  %s → %s: %d rows, all found\n", what, c.target, c.rows)
			continue
		}
		fmt.Fprintf(w, "  %s → %s: %d of %d rows name no row (e.g. %q)\n", what, c.target, c.dangling, c.rows, c.example)
		bad = append(bad, fmt.Sprintf("%s: %d dangling", what, c.dangling))
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %s (a table they name was deleted or redone: rerun the stages that wrote them, with --fresh)", ErrDanglingReference, strings.Join(bad, "; "))
	}
	return nil
}

// pairOfResponse returns the pair id of a pair response id
// (rules.ChosenID, rules.RejectedID).
func pairOfResponse(id string) (string, bool) {
	for _, suffix := range []string{rules.ChosenID(""), rules.RejectedID("")} {
		if p, ok := strings.CutSuffix(id, suffix); ok {
			return p, true
		}
	}
	return "", false
}

// eachString calls f with every value of the string column of shards,
// reading that column alone; with phase set, only shards of that phase
// partition.
func eachString(ctx context.Context, shards []TableShard, column, phase string, f func(string)) error {
	schema := arrow.NewSchema([]arrow.Field{{Name: column, Type: arrow.BinaryTypes.String}}, nil)
	for _, sh := range shards {
		if phase != "" && sh.Phase != phase {
			continue
		}
		for rec, err := range ReadShard(ctx, sh.Path, ReadOptions{Schema: schema}) {
			if err != nil {
				return err
			}
			col, ok := rec.Column(0).(*array.String)
			if !ok {
				return fmt.Errorf("shard %s: column %s is %s, want utf8", sh.Path, column, rec.Column(0).DataType())
			}
			for i := range col.Len() {
				if col.IsValid(i) {
					f(col.Value(i))
				}
			}
		}
	}
	return nil
}
