package pipeline

import (
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Hive partitioning. A shard at .../rollouts/phase=policy/step=123/part-00000.parquet
// belongs to the partition phase=policy, step=123. As in Hive, Spark and
// pyarrow's write_dataset, a column named like a partition key is not stored
// in the file: its value is the path's. So DuckDB (hive_partitioning=true),
// polars and pyarrow datasets see each such column exactly once.
//
// ShardWriter drops those columns after checking that every row holds the
// partition's value; ShardReader, given a ReadOptions.Schema that asks for
// them, adds them back as constant columns parsed from the path.

var hiveKeyRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// PathPartitions returns the Hive partitions in the directories of path.
func PathPartitions(path string) []Partition {
	var out []Partition
	for _, c := range strings.Split(filepath.ToSlash(filepath.Dir(path)), "/") {
		if k, v, ok := strings.Cut(c, "="); ok && hiveKeyRE.MatchString(k) {
			out = append(out, Partition{k, v})
		}
	}
	return out
}

func partitionMap(parts []Partition) map[string]string {
	m := make(map[string]string, len(parts))
	for _, p := range parts {
		m[p.Key] = p.Value // the deepest wins, as in Hive
	}
	return m
}

// partitionValueOK reports whether row i of a holds the partition value v.
func partitionValueOK(a arrow.Array, i int, v string) bool {
	if a.IsNull(i) {
		return false
	}
	switch a := a.(type) {
	case *array.String:
		return a.Value(i) == v
	case *array.Int64:
		n, err := strconv.ParseInt(v, 10, 64)
		return err == nil && a.Value(i) == n
	case *array.Int32:
		n, err := strconv.ParseInt(v, 10, 32)
		return err == nil && int64(a.Value(i)) == n
	}
	return false
}

// partitionTypeOK reports whether a column of type t can be a partition key.
func partitionTypeOK(t arrow.DataType) bool {
	switch t.ID() {
	case arrow.STRING, arrow.INT64, arrow.INT32:
		return true
	}
	return false
}

// checkPartitionValue checks that v parses as type t.
func checkPartitionValue(t arrow.DataType, v string) error {
	switch t.ID() {
	case arrow.STRING:
		return nil
	case arrow.INT64, arrow.INT32:
		if _, err := strconv.ParseInt(v, 10, 64); err != nil {
			return fmt.Errorf("partition value %q is not an integer", v)
		}
		return nil
	}
	return fmt.Errorf("type %s cannot be a partition key (want utf8, int64 or int32)", t)
}

// constColumn returns an array of n copies of the partition value v as type t.
func constColumn(mem memory.Allocator, t arrow.DataType, v string, n int) (arrow.Array, error) {
	switch t.ID() {
	case arrow.STRING:
		b := array.NewStringBuilder(mem)
		defer b.Release()
		b.Reserve(n)
		b.ReserveData(n * len(v))
		for range n {
			b.Append(v)
		}
		return b.NewArray(), nil
	case arrow.INT64, arrow.INT32:
		x, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("partition value %q is not an integer", v)
		}
		if t.ID() == arrow.INT32 {
			b := array.NewInt32Builder(mem)
			defer b.Release()
			b.Reserve(n)
			for range n {
				b.UnsafeAppend(int32(x))
			}
			return b.NewArray(), nil
		}
		b := array.NewInt64Builder(mem)
		defer b.Release()
		b.Reserve(n)
		for range n {
			b.UnsafeAppend(x)
		}
		return b.NewArray(), nil
	}
	return nil, fmt.Errorf("type %s cannot be a partition key (want utf8, int64 or int32)", t)
}

// fileSchema splits schema into what the file stores, given the shard's
// partitions: it returns the stored schema and, for each dropped column, its
// index in schema and the partition value.
func fileSchema(schema *arrow.Schema, parts map[string]string) (*arrow.Schema, []int, []string, error) {
	var keep []arrow.Field
	var dropped []int
	var values []string
	for i, f := range schema.Fields() {
		v, ok := parts[f.Name]
		if !ok {
			keep = append(keep, f)
			continue
		}
		if !partitionTypeOK(f.Type) {
			return nil, nil, nil, fmt.Errorf("column %q is a partition key but has type %s (want utf8, int64 or int32)", f.Name, f.Type)
		}
		if err := checkPartitionValue(f.Type, v); err != nil {
			return nil, nil, nil, fmt.Errorf("partition %s=%s: column %q: %w", f.Name, v, f.Name, err)
		}
		dropped = append(dropped, i)
		values = append(values, v)
	}
	if len(dropped) == 0 {
		return schema, nil, nil, nil
	}
	md := schema.Metadata()
	return arrow.NewSchema(keep, &md), dropped, values, nil
}

// In reports whether the directories of the run-relative path rel hold
// partition p (an integer value matches its zero-padded form, step=000012,
// which runs made before the step was written in plain decimal have).
func (p Partition) In(rel string) bool {
	for _, q := range PathPartitions(rel) {
		if q.Key == p.Key && samePartitionValue(q.Value, p.Value) {
			return true
		}
	}
	return false
}

// samePartitionValue reports whether two partition values are the same
// value: equal strings, or equal integers (step=12 and an older run's
// zero-padded step=000012).
func samePartitionValue(a, b string) bool {
	if a == b {
		return true
	}
	x, errA := strconv.ParseInt(a, 10, 64)
	y, errB := strconv.ParseInt(b, 10, 64)
	return errA == nil && errB == nil && x == y
}

// checkWrittenPartitions compares the partition values a shard recorded
// when it was written (metadata MetaPartitions) with those of the path it
// is found under: a file copied or moved to another partition would give
// its rows that partition's values.
func checkWrittenPartitions(md map[string]string, path string) error {
	js, ok := md[MetaPartitions]
	if !ok {
		return nil
	}
	var written map[string]string
	if err := json.Unmarshal([]byte(js), &written); err != nil {
		return fmt.Errorf("metadata %s: %w", MetaPartitions, err)
	}
	parts := partitionMap(PathPartitions(path))
	for _, k := range slices.Sorted(maps.Keys(written)) {
		w := written[k]
		v, ok := parts[k]
		if !ok {
			return fmt.Errorf("written as partition %s=%s, found outside any %s=… folder: the file was copied or moved", k, w, k)
		}
		if !samePartitionValue(w, v) {
			return fmt.Errorf("written as partition %s=%s, found under %s=%s: the file was copied or moved; its rows belong to %s=%s", k, w, k, v, k, w)
		}
	}
	return nil
}
