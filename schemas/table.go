package schemas

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Table is one table's schema plus its typed codec: rows of T to record
// batches and back. Each column is declared once, with an accessor that
// returns a pointer to the row's field, so the schema, the builder and the
// reader cannot drift apart.
type Table[T any] struct {
	Name    string // directory name in a run: runs/<run>/<Name>/...
	Version int    // bumped on any incompatible change
	cols    []column[T]
	schema  *arrow.Schema
}

// column is one column of a table of rows T.
type column[T any] struct {
	field arrow.Field
	// since is the table version that added the column (0: the first). A
	// batch of an older version lacks it and reads as the zero value.
	since int
	put   func(b array.Builder, r *T)
	// get sets r's field from row i of a; it returns an error for a value the
	// Go type cannot hold (null where not nullable, invalid UTF-8).
	get func(a arrow.Array, i int, r *T) error
}

func newTable[T any](name string, version int, cols ...column[T]) *Table[T] {
	fields := make([]arrow.Field, len(cols))
	for i, c := range cols {
		fields[i] = c.field
	}
	md := arrow.NewMetadata([]string{MetaTable, MetaVersion}, []string{name, strconv.Itoa(version)})
	return &Table[T]{Name: name, Version: version, cols: cols, schema: arrow.NewSchema(fields, &md)}
}

// Schema is the table's Arrow schema; its metadata holds the table name and
// schema version.
func (t *Table[T]) Schema() *arrow.Schema { return t.schema }

// Builder accumulates rows into a record batch.
type Builder[T any] struct {
	t *Table[T]
	b *array.RecordBuilder
}

// NewBuilder returns a builder allocating from mem. Release it when done.
func (t *Table[T]) NewBuilder(mem memory.Allocator) *Builder[T] {
	return &Builder[T]{t: t, b: array.NewRecordBuilder(mem, t.schema)}
}

// Append adds one row.
func (b *Builder[T]) Append(r *T) {
	for i, c := range b.t.cols {
		c.put(b.b.Field(i), r)
	}
}

// Len is the number of rows appended since the last NewRecordBatch.
func (b *Builder[T]) Len() int { return b.b.Field(0).Len() }

// NewRecordBatch returns the rows appended so far as a batch (the caller
// releases it) and resets the builder.
func (b *Builder[T]) NewRecordBatch() arrow.RecordBatch { return b.b.NewRecordBatch() }

// Flush writes the rows appended since the last NewRecordBatch to w as one
// batch, unless there are none, and resets the builder.
func (b *Builder[T]) Flush(w interface{ Write(arrow.RecordBatch) error }) error {
	if b.Len() == 0 {
		return nil
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	return w.Write(rec)
}

// Release frees the builder's buffers.
func (b *Builder[T]) Release() { b.b.Release() }

// Build turns rows into one record batch; the caller releases it.
func (t *Table[T]) Build(mem memory.Allocator, rows []T) arrow.RecordBatch {
	b := t.NewBuilder(mem)
	defer b.Release()
	for i := range rows {
		b.Append(&rows[i])
	}
	return b.NewRecordBatch()
}

// Check verifies that sc has every column of the table with a compatible type
// (extra columns and column order do not matter). The error names each bad
// column with its expected type and shows both schemas.
func (t *Table[T]) Check(sc *arrow.Schema) error {
	_, err := t.index(sc)
	return err
}

func (t *Table[T]) index(sc *arrow.Schema) ([]int, error) {
	idx := make([]int, len(t.cols))
	var problems []string
	version := batchVersion(sc)
	for i, c := range t.cols {
		fi := sc.FieldIndices(c.field.Name)
		switch {
		case len(fi) == 0 && c.since > version:
			idx[i] = -1 // the batch predates the column
		case len(fi) == 0:
			problems = append(problems, fmt.Sprintf("missing column %q (want %s)", c.field.Name, c.field.Type))
		case !TypesCompatible(c.field.Type, sc.Field(fi[0]).Type):
			problems = append(problems, fmt.Sprintf("column %q has type %s, want %s", c.field.Name, sc.Field(fi[0]).Type, c.field.Type))
		default:
			idx[i] = fi[0]
		}
	}
	if len(problems) > 0 {
		return nil, &SchemaError{Where: "table " + t.Name, Problems: problems, Want: t.schema, Got: sc}
	}
	return idx, nil
}

// Read decodes a record batch into rows, after checking its schema with
// Check. Errors name the column and row.
func (t *Table[T]) Read(rec arrow.RecordBatch) ([]T, error) {
	rows := make([]T, rec.NumRows())
	return rows, t.ReadInto(rec, rows)
}

// ReadInto is Read into a caller-provided slice of len rec.NumRows().
func (t *Table[T]) ReadInto(rec arrow.RecordBatch, rows []T) error {
	idx, err := t.index(rec.Schema())
	if err != nil {
		return err
	}
	if len(rows) != int(rec.NumRows()) {
		return fmt.Errorf("table %s: %d rows for a batch of %d", t.Name, len(rows), rec.NumRows())
	}
	for ci, c := range t.cols {
		if idx[ci] < 0 {
			continue
		}
		a := rec.Column(idx[ci])
		for i := range rows {
			if err := c.get(a, i, &rows[i]); err != nil {
				return fmt.Errorf("table %s: column %q row %d: %w", t.Name, c.field.Name, i, err)
			}
		}
	}
	return nil
}

// batchVersion is the table version a batch's schema declares; a schema with
// no version (written by hand or by another tool) counts as version 1.
func batchVersion(sc *arrow.Schema) int { return max(SchemaVersion(sc), 1) }

// added marks c as added in table version v: its field carries
// MetaAddedIn, so that shard readers fill it with nulls from files of
// older versions, and Table.Read leaves the field of rows from older batches
// as it is (the zero value in a fresh row). The field becomes nullable, so c
// should read a null as absent: an optional column, or use addedNumCol.
func added[T any](v int, c column[T]) column[T] {
	c.field.Nullable = true
	c.since = v
	c.field.Metadata = arrow.NewMetadata([]string{MetaAddedIn}, []string{strconv.Itoa(v)})
	return c
}

// addedNumCol is a numeric column added in table version v: written non-null,
// stored nullable so that files of older versions read as 0.
func addedNumCol[T any, V number](v int, name string, f func(*T) *V) column[T] {
	c := numCol(name, f)
	c.field.Nullable = true
	get := c.get
	c.get = func(a arrow.Array, i int, r *T) error {
		if a.IsNull(i) {
			*f(r) = 0
			return nil
		}
		return get(a, i, r)
	}
	return added(v, c)
}

// --- column kinds ---------------------------------------------------------

var (
	errNull = fmt.Errorf("null in a non-nullable column")
	errUTF8 = errors.New("invalid UTF-8")
)

// number is a Go type of a numeric column.
type number interface {
	int32 | int64 | float32 | float64
}

// scalar is how values of Go type V are stored: the arrow type, how a
// builder appends one and how row i of an array (not null) is read, with an
// error for a value V cannot hold (invalid UTF-8).
type scalar[V any] struct {
	dt  arrow.DataType
	put func(b array.Builder, v V)
	at  func(a arrow.Array, i int) (V, error)
}

// read passes row i of a (not null) to set, unless it is an error.
func (s scalar[V]) read(a arrow.Array, i int, set func(V)) error {
	v, err := s.at(a, i)
	if err != nil {
		return err
	}
	set(v)
	return nil
}

var strScalar = scalar[string]{
	dt:  arrow.BinaryTypes.String,
	put: func(b array.Builder, v string) { b.(*array.StringBuilder).Append(v) },
	at: func(a arrow.Array, i int) (string, error) {
		s := a.(*array.String).Value(i)
		if !utf8.ValidString(s) {
			return "", errUTF8
		}
		return s, nil
	},
}

var boolScalar = scalar[bool]{
	dt:  arrow.FixedWidthTypes.Boolean,
	put: func(b array.Builder, v bool) { b.(*array.BooleanBuilder).Append(v) },
	at:  func(a arrow.Array, i int) (bool, error) { return a.(*array.Boolean).Value(i), nil },
}

// numScalar stores V as the arrow type of the same name.
func numScalar[V number]() scalar[V] {
	var dt arrow.DataType
	switch any(V(0)).(type) {
	case int32:
		dt = arrow.PrimitiveTypes.Int32
	case int64:
		dt = arrow.PrimitiveTypes.Int64
	case float32:
		dt = arrow.PrimitiveTypes.Float32
	case float64:
		dt = arrow.PrimitiveTypes.Float64
	}
	return scalar[V]{
		dt:  dt,
		put: appendNum[V],
		at:  func(a arrow.Array, i int) (V, error) { return numAt[V](a, i), nil },
	}
}

// valueCol is a non-nullable column of s's values.
func valueCol[T, V any](name string, s scalar[V], f func(*T) *V) column[T] {
	return column[T]{
		field: arrow.Field{Name: name, Type: s.dt},
		put:   func(b array.Builder, r *T) { s.put(b, *f(r)) },
		get: func(a arrow.Array, i int, r *T) error {
			if a.IsNull(i) {
				return errNull
			}
			return s.read(a, i, func(v V) { *f(r) = v })
		},
	}
}

// optCol is a nullable column of s's values; a nil pointer is a null.
func optCol[T, V any](name string, s scalar[V], f func(*T) **V) column[T] {
	return column[T]{
		field: arrow.Field{Name: name, Type: s.dt, Nullable: true},
		put: func(b array.Builder, r *T) {
			if p := *f(r); p != nil {
				s.put(b, *p)
			} else {
				b.AppendNull()
			}
		},
		get: func(a arrow.Array, i int, r *T) error {
			if a.IsNull(i) {
				*f(r) = nil
				return nil
			}
			return s.read(a, i, func(v V) { *f(r) = &v })
		},
	}
}

// listCol is a non-nullable list column of s's values, none null (nil
// slices are written as empty lists).
func listCol[T, V any](name string, s scalar[V], f func(*T) *[]V) column[T] {
	return column[T]{
		field: arrow.Field{Name: name, Type: arrow.ListOf(s.dt)},
		put: func(b array.Builder, r *T) {
			lb := b.(*array.ListBuilder)
			lb.Append(true)
			vb := lb.ValueBuilder()
			for _, v := range *f(r) {
				s.put(vb, v)
			}
		},
		get: func(a arrow.Array, i int, r *T) error {
			if a.IsNull(i) {
				return errNull
			}
			l := a.(*array.List)
			start, end := l.ValueOffsets(i)
			vals := l.ListValues()
			out := make([]V, 0, end-start)
			for j := start; j < end; j++ {
				if vals.IsNull(int(j)) {
					return fmt.Errorf("element %d: %w", j-start, errNull)
				}
				v, err := s.at(vals, int(j))
				if err != nil {
					return fmt.Errorf("element %d: %w", j-start, err)
				}
				out = append(out, v)
			}
			*f(r) = out
			return nil
		},
	}
}

func strCol[T any](name string, f func(*T) *string) column[T] {
	return valueCol(name, strScalar, f)
}

func optStrCol[T any](name string, f func(*T) **string) column[T] {
	return optCol(name, strScalar, f)
}

func strListCol[T any](name string, f func(*T) *[]string) column[T] {
	return listCol(name, strScalar, f)
}

func boolCol[T any](name string, f func(*T) *bool) column[T] {
	return valueCol(name, boolScalar, f)
}

// numCol is a non-nullable numeric column of Go type V stored as the arrow
// type of the same name.
func numCol[T any, V number](name string, f func(*T) *V) column[T] {
	return valueCol(name, numScalar[V](), f)
}

// optI64Col is a nullable int64 column.
func optI64Col[T any](name string, f func(*T) **int64) column[T] {
	return optCol(name, numScalar[int64](), f)
}

// optF64Col is a nullable float64 column.
func optF64Col[T any](name string, f func(*T) **float64) column[T] {
	return optCol(name, numScalar[float64](), f)
}

// numListCol is a non-nullable list<V> column (nil slices are written as
// empty lists).
func numListCol[T any, V int64 | float32 | float64](name string, f func(*T) *[]V) column[T] {
	return listCol(name, numScalar[V](), f)
}

func appendNum[V number](b array.Builder, v V) {
	switch b := b.(type) {
	case *array.Int32Builder:
		b.Append(int32(v))
	case *array.Int64Builder:
		b.Append(int64(v))
	case *array.Float32Builder:
		b.Append(float32(v))
	case *array.Float64Builder:
		b.Append(float64(v))
	}
}

func numAt[V number](a arrow.Array, i int) V {
	switch a := a.(type) {
	case *array.Int32:
		return V(a.Value(i))
	case *array.Int64:
		return V(a.Value(i))
	case *array.Float32:
		return V(a.Value(i))
	case *array.Float64:
		return V(a.Value(i))
	}
	return 0
}

// structListCol is a non-nullable list<struct<...>> column whose struct
// fields are (name, type) pairs; put and get move one element. Struct
// children are looked up by name, so files with another field order read.
func structListCol[T any, E any](name string, fields []arrow.Field, list func(*T) *[]E,
	put func(sb *array.StructBuilder, e *E), get func(children []arrow.Array, j int, e *E) error) column[T] {
	st := arrow.StructOf(fields...)
	return column[T]{
		field: arrow.Field{Name: name, Type: arrow.ListOf(st)},
		put: func(b array.Builder, r *T) {
			lb := b.(*array.ListBuilder)
			lb.Append(true)
			sb := lb.ValueBuilder().(*array.StructBuilder)
			for k := range *list(r) {
				sb.Append(true)
				put(sb, &(*list(r))[k])
			}
		},
		get: func(a arrow.Array, i int, r *T) error {
			if a.IsNull(i) {
				return errNull
			}
			l := a.(*array.List)
			start, end := l.ValueOffsets(i)
			sa := l.ListValues().(*array.Struct)
			stt := sa.DataType().(*arrow.StructType)
			children := make([]arrow.Array, len(fields))
			for k, f := range fields {
				fi, _ := stt.FieldIdx(f.Name)
				children[k] = sa.Field(fi)
			}
			out := make([]E, end-start)
			for j := start; j < end; j++ {
				if sa.IsNull(int(j)) {
					return fmt.Errorf("element %d: %w", j-start, errNull)
				}
				if err := get(children, int(j), &out[j-start]); err != nil {
					return fmt.Errorf("element %d: %w", j-start, err)
				}
			}
			*list(r) = out
			return nil
		},
	}
}

func childString(a arrow.Array, j int, name string) (string, error) {
	if a.IsNull(j) {
		return "", fmt.Errorf("%s: %w", name, errNull)
	}
	s, err := strScalar.at(a, j)
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	return s, nil
}
