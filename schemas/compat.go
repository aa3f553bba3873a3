package schemas

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
)

// Schema compatibility: the rules by which a table schema, a record batch's
// schema and a shard file's schema are found to agree. Table.Check applies
// them to batches; pipeline's shard reader and writer apply them to files.

// Schema metadata keys carried by every table schema (and so by every shard).
const (
	MetaTable = "evolm.table"
	// MetaVersion, in a schema's metadata, is the version of the table the
	// schema belongs to (Table sets it).
	MetaVersion = "evolm.schema_version"
	// MetaAddedIn, in a field's metadata, is the table version that added the
	// field. A reader that asks for such a (nullable) field gets a column of
	// nulls from a file of an older version, which cannot have it.
	MetaAddedIn = "evolm.added_in"
)

// SchemaVersion is the table version sc declares (MetaVersion); 0 when it
// declares none, or not a positive number.
func SchemaVersion(sc *arrow.Schema) int {
	v, ok := sc.Metadata().GetValue(MetaVersion)
	if !ok {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0
	}
	return n
}

// AddedIn is the table version that added f (MetaAddedIn); 0 when absent.
func AddedIn(f arrow.Field) int {
	if !f.HasMetadata() {
		return 0
	}
	v, ok := f.Metadata.GetValue(MetaAddedIn)
	if !ok {
		return 0
	}
	n, _ := strconv.Atoi(v)
	return n
}

// SchemaError reports a schema mismatch and shows both schemas.
type SchemaError struct {
	Where    string // e.g. "shard runs/x/prompts/part-00000.parquet"
	Problems []string
	Want     *arrow.Schema
	Got      *arrow.Schema
}

func (e *SchemaError) Error() string {
	var b strings.Builder
	if e.Where != "" {
		b.WriteString(e.Where + ": ")
	}
	b.WriteString("schema mismatch: " + strings.Join(e.Problems, "; "))
	b.WriteString("\nwant schema:\n" + indent(e.Want.String()))
	b.WriteString("\ngot schema:\n" + indent(e.Got.String()))
	return b.String()
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n  ")
}

// CheckSchema checks that got has every field of want, in the same order,
// with compatible types. It returns a *SchemaError naming each bad column.
func CheckSchema(want, got *arrow.Schema) error {
	var problems []string
	if want.NumFields() != got.NumFields() {
		problems = append(problems, fmt.Sprintf("%d columns, want %d", got.NumFields(), want.NumFields()))
	}
	for i, wf := range want.Fields() {
		if i >= got.NumFields() {
			problems = append(problems, fmt.Sprintf("missing column %q (want %s)", wf.Name, wf.Type))
			continue
		}
		gf := got.Field(i)
		if gf.Name != wf.Name {
			problems = append(problems, fmt.Sprintf("column %d is %q, want %q", i, gf.Name, wf.Name))
			continue
		}
		if !TypesCompatible(wf.Type, gf.Type) {
			problems = append(problems, fmt.Sprintf("column %q has type %s, want %s", wf.Name, gf.Type, wf.Type))
		}
	}
	if len(problems) > 0 {
		return &SchemaError{Problems: problems, Want: want, Got: got}
	}
	return nil
}

// TypesCompatible reports whether data of type got can be used where want is
// expected: equal types, ignoring list element names, nullability and
// metadata (Parquet writers disagree on "item" vs "element").
func TypesCompatible(want, got arrow.DataType) bool {
	if want.ID() != got.ID() {
		return false
	}
	switch w := want.(type) {
	case *arrow.ListType:
		return TypesCompatible(w.Elem(), got.(*arrow.ListType).Elem())
	case *arrow.LargeListType:
		return TypesCompatible(w.Elem(), got.(*arrow.LargeListType).Elem())
	case *arrow.FixedSizeListType:
		g := got.(*arrow.FixedSizeListType)
		return w.Len() == g.Len() && TypesCompatible(w.Elem(), g.Elem())
	case *arrow.StructType:
		// Same field names and types in any order: pyarrow writes chat
		// messages as struct<content, role>, we as struct<role, content>.
		// Readers look struct children up by name.
		g := got.(*arrow.StructType)
		if w.NumFields() != g.NumFields() {
			return false
		}
		for _, wf := range w.Fields() {
			gf, ok := g.FieldByName(wf.Name)
			if !ok || !TypesCompatible(wf.Type, gf.Type) {
				return false
			}
		}
		return true
	case *arrow.MapType:
		g := got.(*arrow.MapType)
		return TypesCompatible(w.KeyType(), g.KeyType()) && TypesCompatible(w.ItemType(), g.ItemType())
	}
	return arrow.TypeEqual(want, got)
}
