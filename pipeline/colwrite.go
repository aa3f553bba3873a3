package pipeline

import (
	"context"
	"encoding/base64"
	"fmt"
	"runtime"
	"slices"
	"sort"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"golang.org/x/sync/errgroup"
)

// columnWriter writes record batches into buffered row groups, encoding
// (levels, dictionary, statistics, pages, zstd) the leaf columns of each
// batch in parallel. pqarrow.FileWriter encodes them one after another;
// since a buffered row group keeps each column chunk's pages apart until it
// closes, the column chunks of one batch are independent work.
//
// The output is byte for byte pqarrow's WriteBuffered with the same batches
// (TestColumnWriterMatchesPqarrow): the same file.Writer, the same
// ToParquet schema, the stored ARROW:schema, and each leaf written through
// pqarrow.WriteArrowToColumn, pqarrow's own leaf writer. What pqarrow keeps
// unexported is the Dremel level builder that feeds it; leafLevels is ours,
// for the nested types evolm's tables use: structs and lists over any
// primitive, string or binary leaf. parallelWritable says whether a schema
// has only those; CreateShard uses pqarrow.FileWriter for any other.
//
// Where a write's time goes (pprof, bench/parquet: 1M rollouts, 8 row
// groups, 2 cores): zstd 30-35% (libzstd; 42% with arrow-go's klauspost
// encoder), copying in arrow-go's page buffers 10-20% (a buffered column
// chunk grows by reallocation), dictionary hashing 15% (the token ids'
// memo table regrows in every row group), levels 5-10%, statistics, RLE and
// the file's sha256 the rest. The columns are unequal: the token ids take
// 40% of the CPU and bound the wall time on 2 cores; tasks start largest
// first. The measured throughput against pyarrow is in docs/benchmarks.md
// ("Parquet writes").
type columnWriter struct {
	w        *file.Writer
	schema   *arrow.Schema
	props    *parquet.WriterProperties
	arrProps pqarrow.ArrowWriterProperties
	leaves   []leafPlan // one per Parquet leaf column, in column order
	rgw      file.BufferedRowGroupWriter
	scratch  []levelScratch // per leaf: its level buffers, reused batch after batch
	workers  int
	closed   bool
}

// step is one node on the way from a top-level field to a leaf: a value of
// the node's type, nullable or not.
type step struct {
	kind     byte // 's' struct, 'l' list, 'p' leaf
	nullable bool
	child    int // struct: the field on the path
}

type leafPlan struct {
	field          int    // top-level field
	path           []step // path[0] is the field itself
	maxDef, maxRep int16  // the leaf's maximum definition and repetition levels
}

// parallelWritable reports whether columnWriter can write every field of
// sc: structs and lists (not large, fixed-size, map, view or union types)
// over leaves that are neither nested nor dictionary-encoded.
func parallelWritable(sc *arrow.Schema) bool {
	var ok func(arrow.DataType) bool
	ok = func(dt arrow.DataType) bool {
		switch t := dt.(type) {
		case *arrow.StructType:
			for _, f := range t.Fields() {
				if !ok(f.Type) {
					return false
				}
			}
			return true
		case *arrow.ListType:
			return ok(t.Elem())
		case arrow.NestedType, *arrow.DictionaryType, arrow.ExtensionType:
			return false
		}
		return true
	}
	for _, f := range sc.Fields() {
		if !ok(f.Type) {
			return false
		}
	}
	return true
}

func leafPlans(sc *arrow.Schema) []leafPlan {
	var out []leafPlan
	var walk func(fi int, f arrow.Field, path []step)
	walk = func(fi int, f arrow.Field, path []step) {
		switch t := f.Type.(type) {
		case *arrow.StructType:
			for ci, c := range t.Fields() {
				walk(fi, c, append(append([]step{}, path...), step{kind: 's', nullable: f.Nullable, child: ci}))
			}
		case *arrow.ListType:
			walk(fi, t.ElemField(), append(append([]step{}, path...), step{kind: 'l', nullable: f.Nullable}))
		default:
			l := leafPlan{field: fi, path: append(append([]step{}, path...), step{kind: 'p', nullable: f.Nullable})}
			for _, s := range l.path {
				if s.nullable {
					l.maxDef++
				}
				if s.kind == 'l' {
					l.maxDef++
					l.maxRep++
				}
			}
			out = append(out, l)
		}
	}
	for fi, f := range sc.Fields() {
		walk(fi, f, nil)
	}
	return out
}

// newColumnWriter starts a file on sink as pqarrow.NewFileWriter with
// pqarrow.WithStoreSchema does. workers <= 0: GOMAXPROCS.
func newColumnWriter(sc *arrow.Schema, sink interface{ Write([]byte) (int, error) }, props *parquet.WriterProperties, arrProps pqarrow.ArrowWriterProperties, workers int) (*columnWriter, error) {
	pqschema, err := pqarrow.ToParquet(sc, props, arrProps)
	if err != nil {
		return nil, err
	}
	meta := make(metadata.KeyValueMetadata, 0)
	for i, k := range sc.Metadata().Keys() {
		meta.Append(k, sc.Metadata().Values()[i])
	}
	stored, err := parquetListNames(sc)
	if err != nil {
		return nil, err
	}
	meta.Append("ARROW:schema", base64.StdEncoding.EncodeToString(flight.SerializeSchema(stored, props.Allocator())))
	leaves := leafPlans(sc)
	if len(leaves) != pqschema.NumColumns() {
		return nil, fmt.Errorf("%d leaf columns in the Arrow schema, %d in its Parquet schema", len(leaves), pqschema.NumColumns())
	}
	for i, l := range leaves {
		if c := pqschema.Column(i); c.MaxDefinitionLevel() != l.maxDef || c.MaxRepetitionLevel() != l.maxRep {
			return nil, fmt.Errorf("column %s: levels %d/%d, Parquet schema says %d/%d", c.Path(), l.maxDef, l.maxRep, c.MaxDefinitionLevel(), c.MaxRepetitionLevel())
		}
	}
	w, err := file.NewParquetWriterWithError(sink, pqschema.Root(), file.WithWriterProps(props), file.WithWriteMetadata(meta))
	if err != nil {
		return nil, err
	}
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	return &columnWriter{w: w, schema: sc, props: props, arrProps: arrProps, leaves: leaves,
		scratch: make([]levelScratch, len(leaves)), workers: workers}, nil
}

// parquetListNames is sc with every list's element field named "element",
// the name of its Parquet group, as pqarrow stores the schema.
func parquetListNames(sc *arrow.Schema) (*arrow.Schema, error) {
	var norm func(f arrow.Field) arrow.Field
	norm = func(f arrow.Field) arrow.Field {
		switch t := f.Type.(type) {
		case *arrow.ListType:
			e := norm(t.ElemField())
			e.Name = "element"
			f.Type = arrow.ListOfField(e)
		case *arrow.StructType:
			fs := make([]arrow.Field, t.NumFields())
			for i, c := range t.Fields() {
				fs[i] = norm(c)
			}
			f.Type = arrow.StructOf(fs...)
		}
		return f
	}
	fs := make([]arrow.Field, sc.NumFields())
	for i, f := range sc.Fields() {
		fs[i] = norm(f)
	}
	md := sc.Metadata()
	return arrow.NewSchema(fs, &md), nil
}

func (cw *columnWriter) AppendKeyValueMetadata(k, v string) error {
	return cw.w.AppendKeyValueMetadata(k, v)
}

// WriteBuffered appends rec to the current row group, starting new ones at
// the writer's row-group length, as pqarrow's WriteBuffered does.
func (cw *columnWriter) WriteBuffered(rec arrow.RecordBatch) error {
	if cw.closed {
		return fmt.Errorf("write to a closed Parquet writer")
	}
	maxRows := cw.props.MaxRowGroupLength()
	n := rec.NumRows()
	for off := int64(0); ; {
		if cw.rgw == nil {
			rgw, err := cw.w.AppendBufferedRowGroupChecked()
			if err != nil {
				return err
			}
			cw.rgw = rgw
		}
		cur, err := cw.rgw.NumRows()
		if err != nil {
			return err
		}
		size := min(maxRows-int64(cur), n-off)
		if err := cw.writeRange(rec, off, size); err != nil {
			return err
		}
		off += size
		if off >= n {
			return nil
		}
		if err := cw.rgw.Close(); err != nil {
			return err
		}
		cw.rgw = nil
	}
}

// writeRange encodes rows [off, off+size) of rec into the row group, one
// task per leaf column, the largest first.
func (cw *columnWriter) writeRange(rec arrow.RecordBatch, off, size int64) error {
	if size == 0 {
		return nil
	}
	cols := make([]arrow.Array, rec.NumCols())
	for i, c := range rec.Columns() {
		cols[i] = array.NewSlice(c, off, off+size)
		defer cols[i].Release()
	}
	order := make([]int, len(cw.leaves))
	cost := make([]int, len(cw.leaves))
	for i, l := range cw.leaves {
		order[i] = i
		cost[i] = dataBytes(cols[l.field].Data())
	}
	sort.SliceStable(order, func(a, b int) bool { return cost[order[a]] > cost[order[b]] })
	var g errgroup.Group
	g.SetLimit(cw.workers)
	for _, i := range order {
		g.Go(func() error {
			c, err := cw.rgw.Column(i)
			if err != nil {
				return err
			}
			lv := leafLevels(cols[cw.leaves[i].field], cw.leaves[i], cw.props.Allocator(), &cw.scratch[i])
			defer lv.release()
			ctx := pqarrow.NewArrowWriteContext(context.Background(), &cw.arrProps)
			if err := pqarrow.WriteArrowToColumn(ctx, c, lv.values, lv.def, lv.rep, lv.leafNullable); err != nil {
				return fmt.Errorf("column %s: %w", c.Descr().Path(), err)
			}
			return nil
		})
	}
	return g.Wait()
}

// dataBytes is the size of d's buffers and its children's (a list's values
// included): the column's encoding work, roughly.
func dataBytes(d arrow.ArrayData) int {
	n := 0
	for _, b := range d.Buffers() {
		if b != nil {
			n += b.Len()
		}
	}
	for _, c := range d.Children() {
		n += dataBytes(c)
	}
	return n
}

// Close finishes the last row group and writes the footer.
func (cw *columnWriter) Close() error {
	if cw.closed {
		return nil
	}
	cw.closed = true
	var rgErr error
	if cw.rgw != nil {
		rgErr = cw.rgw.Close()
	}
	err := cw.w.Close()
	if rgErr != nil {
		return rgErr
	}
	return err
}

// levels are one leaf column's definition and repetition levels for a run
// of rows, and the leaf values they cover (one per level at or above the
// leaf's innermost list: present values and nulls below it).
type levels struct {
	def, rep     []int16
	values       arrow.Array
	leafNullable bool
}

func (l *levels) release() {
	if l.values != nil {
		l.values.Release()
	}
}

// levelScratch holds a leaf's level slices between batches (the column
// writer copies levels into its pages, keeping none).
type levelScratch struct{ def, rep []int16 }

// reuse is buf emptied, or a new slice when buf holds fewer than capacity.
func reuse(buf []int16, capacity int) []int16 {
	if cap(buf) < capacity {
		return make([]int16, 0, capacity)
	}
	return buf[:0]
}

// leafLevels computes the Dremel levels of plan's leaf, at the end of its
// path, for every row of arr, the top-level column (path[0] its own node):
// a null at a node emits the levels so far; a list emits its elements at
// one more repetition level, an empty one a single level; each level
// reaching the leaf or a null struct below the innermost list takes the
// leaf slot at its index. As pqarrow, levels are nil for a column whose
// maximum is 0.
func leafLevels(arr arrow.Array, plan leafPlan, mem memory.Allocator, scratch *levelScratch) levels {
	path, maxDef, maxRep := plan.path, plan.maxDef, plan.maxRep
	// The leaf's storage (struct children are aligned with their struct,
	// list values are indexed by absolute offsets), and the span of it the
	// rows reach: about as many levels as there will be.
	leaf, lo, hi := arr, 0, arr.Len()
	for _, s := range path[:len(path)-1] {
		switch s.kind {
		case 's':
			leaf = leaf.(*array.Struct).Field(s.child)
		case 'l':
			l := leaf.(*array.List)
			if hi > lo {
				a, _ := l.ValueOffsets(lo)
				_, z := l.ValueOffsets(hi - 1)
				lo, hi = int(a), int(z)
			}
			leaf = l.ListValues()
		}
	}
	capacity := arr.Len() + max(hi-lo, 0)
	b := levelBuilder{path: path, leafNoNulls: leaf.NullN() == 0}
	if maxDef > 0 || maxRep > 0 {
		b.def = reuse(scratch.def, capacity)
	}
	if maxRep > 0 {
		b.rep = reuse(scratch.rep, capacity)
	}
	b.listAt = make([]bool, len(path)) // a list at path[i] or below it
	for i := len(path) - 1; i >= 0; i-- {
		b.listAt[i] = path[i].kind == 'l' || i+1 < len(path) && b.listAt[i+1]
	}
	switch {
	case maxDef == 0 && maxRep == 0:
		b.addSlot(0, arr.Len())
	case len(path) == 1: // a nullable primitive column
		for i := range arr.Len() {
			if arr.IsValid(i) {
				b.def = append(b.def, 1)
			} else {
				b.def = append(b.def, 0)
			}
		}
		b.addSlot(0, arr.Len())
	default:
		for i := range arr.Len() {
			b.visit(arr, i, 0, 0, 0, 0)
		}
	}
	scratch.def, scratch.rep = b.def, b.rep // keep what append grew
	out := levels{def: b.def, rep: b.rep, leafNullable: path[len(path)-1].nullable}
	if maxDef == 0 {
		out.def = nil
	}
	switch len(b.ranges) {
	case 0:
		out.values = array.NewSlice(leaf, 0, 0)
	case 1:
		out.values = array.NewSlice(leaf, int64(b.ranges[0][0]), int64(b.ranges[0][1]))
	default:
		parts := make([]arrow.Array, len(b.ranges))
		for i, r := range b.ranges {
			parts[i] = array.NewSlice(leaf, int64(r[0]), int64(r[1]))
			defer parts[i].Release()
		}
		v, err := array.Concatenate(parts, mem)
		if err != nil {
			panic(err) // same-typed slices of one array
		}
		out.values = v
	}
	return out
}

type levelBuilder struct {
	path        []step
	listAt      []bool
	leafNoNulls bool // the leaf storage has no nulls
	def, rep    []int16
	ranges      [][2]int // leaf slots taken, as runs
}

func (b *levelBuilder) addSlot(i, n int) {
	if k := len(b.ranges); k > 0 && b.ranges[k-1][1] == i {
		b.ranges[k-1][1] = i + n
		return
	}
	b.ranges = append(b.ranges, [2]int{i, i + n})
}

func (b *levelBuilder) emit(def, rep int16) {
	if b.def != nil {
		b.def = append(b.def, def)
	}
	if b.rep != nil {
		b.rep = append(b.rep, rep)
	}
}

// visit emits the levels of value i of arr, a value of node path[d], whose
// levels above it are def and rep; depth is the number of lists above.
func (b *levelBuilder) visit(arr arrow.Array, i, d int, def, rep, depth int16) {
	s := b.path[d]
	if s.nullable {
		if arr.IsNull(i) {
			b.emit(def, rep)
			if !b.listAt[d] { // a null struct or leaf keeps its slot; a null list has none
				b.addSlot(i, 1)
			}
			return
		}
		def++
	}
	switch s.kind {
	case 'p':
		b.emit(def, rep)
		b.addSlot(i, 1)
	case 's':
		b.visit(arr.(*array.Struct).Field(s.child), i, d+1, def, rep, depth)
	case 'l':
		l := arr.(*array.List)
		start, end := l.ValueOffsets(i)
		if start == end {
			b.emit(def, rep)
			return
		}
		vals := l.ListValues()
		// Fast path: a list of non-null leaves.
		if next := b.path[d+1]; next.kind == 'p' && (!next.nullable || b.leafNoNulls) {
			ld := def + 1
			if next.nullable {
				ld++
			}
			n := int(end - start)
			b.def = fill(b.def, n, ld, ld)
			b.rep = fill(b.rep, n, rep, depth+1)
			b.addSlot(int(start), n)
			return
		}
		for k := start; k < end; k++ {
			r := rep
			if k > start {
				r = depth + 1
			}
			b.visit(vals, int(k), d+1, def+1, r, depth+1)
		}
	}
}

// fill appends first and then n-1 times rest to s.
func fill(s []int16, n int, first, rest int16) []int16 {
	k := len(s)
	s = slices.Grow(s, n)[:k+n]
	s[k] = first
	for i := k + 1; i < k+n; i++ {
		s[i] = rest
	}
	return s
}
