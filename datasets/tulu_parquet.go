package datasets

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/deprecated"
	"github.com/parquet-go/parquet-go/format"
)

// pqRow and pqPromptRow are the typed read targets. Pointers tell a null
// string from an empty one.
type pqRow struct {
	ID       *string   `parquet:"id,optional"`
	Prompt   *string   `parquet:"prompt,optional"`
	Chosen   []Message `parquet:"chosen,list"`
	Rejected []Message `parquet:"rejected,list"`
	Source   *string   `parquet:"source,optional"`
}

type pqPromptRow struct {
	ID     *string `parquet:"id,optional"`
	Prompt *string `parquet:"prompt,optional"`
	Source *string `parquet:"source,optional"`
}

type parquetFile struct {
	path  string
	f     *os.File
	full  *parquet.GenericReader[pqRow]
	slim  *parquet.GenericReader[pqPromptRow]
	fbuf  []pqRow
	sbuf  []pqPromptRow
	row   int64
	total int64
}

func openParquet(path string, opts Options) (*parquetFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("input %s: %w", path, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("input %s: %w", path, err)
	}
	pf, err := openParquetFile(f, st.Size())
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("input %s: corrupt or not a Parquet file: %w", path, err)
	}
	if err := CheckParquetSchema(pf.Schema(), !opts.PromptsOnly); err != nil {
		f.Close()
		return nil, fmt.Errorf("input %s: %w", path, err)
	}
	p := &parquetFile{path: path, f: f, total: pf.NumRows()}
	if p.total == 0 {
		return p, nil // read reports io.EOF at once
	}
	if opts.PromptsOnly {
		p.slim = parquet.NewGenericReader[pqPromptRow](pf)
		p.sbuf = make([]pqPromptRow, opts.BatchSize)
	} else {
		p.full = parquet.NewGenericReader[pqRow](pf)
		p.fbuf = make([]pqRow, opts.BatchSize)
	}
	return p, nil
}

// CountParquetRows returns the row count in a Parquet file's footer.
func CountParquetRows(path string) (int64, error) {
	if formatOf(path) != "parquet" {
		return 0, fmt.Errorf("input %s: not a Parquet file", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("input %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("input %s: %w", path, err)
	}
	pf, err := openParquetFile(f, st.Size())
	if err != nil {
		return 0, fmt.Errorf("input %s: corrupt or not a Parquet file: %w", path, err)
	}
	return pf.NumRows(), nil
}

// openParquetFile turns parquet-go panics on garbage footers into errors.
func openParquetFile(f io.ReaderAt, size int64) (pf *parquet.File, err error) {
	defer func() {
		if r := recover(); r != nil {
			pf, err = nil, fmt.Errorf("%v", r)
		}
	}()
	return parquet.OpenFile(f, size)
}

// CheckParquetSchema checks that schema has the Tulu layout's columns with
// their types: id, prompt and source as strings and, when withMessages, chosen
// and rejected as lists of struct<content: string, role: string>. Extra
// columns are allowed. The error names every missing or mistyped column at
// once and shows the file schema.
func CheckParquetSchema(schema *parquet.Schema, withMessages bool) error {
	fields := map[string]parquet.Field{}
	for _, f := range schema.Fields() {
		fields[f.Name()] = f
	}
	want := []string{ColID, ColPrompt, ColSource}
	if withMessages {
		want = append(want, ColChosen, ColRejected)
	}
	var missing, wrong []string
	for _, name := range want {
		f, ok := fields[name]
		switch {
		case !ok:
			missing = append(missing, fmt.Sprintf("%q", name))
		case (name == ColChosen || name == ColRejected) && !isMessageList(f):
			wrong = append(wrong, fmt.Sprintf("column %q: wrong type %s, want list<struct<content: string, role: string>>", name, describe(f)))
		case name != ColChosen && name != ColRejected && !isStringLeaf(f):
			wrong = append(wrong, fmt.Sprintf("column %q: wrong type %s, want string", name, describe(f)))
		}
	}
	if len(missing) > 0 {
		wrong = append([]string{missingColumns(missing, withMessages)}, wrong...)
	}
	if len(wrong) == 0 {
		return nil
	}
	return fmt.Errorf("%s (file schema:\n%s)", strings.Join(wrong, "; "), schema)
}

// missingColumns names the missing columns (quoted) in one message; when
// chosen or rejected is among them, it says how to do without.
func missingColumns(quoted []string, withMessages bool) string {
	noun := "column"
	if len(quoted) > 1 {
		noun = "columns"
	}
	msg := fmt.Sprintf("%s %s: missing", noun, strings.Join(quoted, ", "))
	if withMessages && slices.ContainsFunc(quoted, func(q string) bool { return q == `"chosen"` || q == `"rejected"` }) {
		msg += " (chosen and rejected fill the messages column; without them, keep prompts only: dedup --messages=false)"
	}
	return msg
}

func isStringLeaf(f parquet.Field) bool {
	if !f.Leaf() || f.Repeated() {
		return false
	}
	if f.Type().Kind() != parquet.ByteArray {
		return false
	}
	// Plain BYTE_ARRAY without a logical type is binary, not a string.
	if lt := f.Type().LogicalType(); lt != nil {
		_, ok := lt.Value.(*format.StringType)
		return ok
	}
	ct := f.Type().ConvertedType()
	return ct != nil && *ct == deprecated.UTF8
}

func isList(f parquet.Field) bool {
	if lt := f.Type().LogicalType(); lt != nil {
		_, ok := lt.Value.(*format.ListType)
		return ok
	}
	ct := f.Type().ConvertedType()
	return ct != nil && *ct == deprecated.List
}

func isMessageList(f parquet.Field) bool {
	if f.Leaf() {
		return false
	}
	if !isList(f) {
		return false
	}
	// Standard 3-level list: <name> (LIST) { repeated group list { element } }.
	rep := f.Fields()
	if len(rep) != 1 || !rep[0].Repeated() || rep[0].Leaf() {
		return false
	}
	elem := rep[0].Fields()
	if len(elem) != 1 || elem[0].Leaf() {
		return false
	}
	have := map[string]bool{}
	for _, c := range elem[0].Fields() {
		if isStringLeaf(c) {
			have[c.Name()] = true
		}
	}
	return have["content"] && have["role"]
}

func describe(f parquet.Field) string {
	if f.Leaf() {
		s := f.Type().String()
		if f.Repeated() {
			s = "repeated " + s
		}
		return s
	}
	if isList(f) {
		return "list"
	}
	return "group"
}

func (p *parquetFile) read(dst []TuluRow) (int, error) {
	if p.full == nil && p.slim == nil {
		return 0, io.EOF
	}
	want := len(dst)
	if p.slim != nil {
		want = min(want, len(p.sbuf))
		n, err := p.slim.Read(p.sbuf[:want])
		for i := range n {
			r := &p.sbuf[i]
			if verr := p.fill(&dst[i], p.row+int64(i), r.ID, r.Prompt, r.Source, nil, nil); verr != nil {
				return 0, verr
			}
			*r = pqPromptRow{}
		}
		p.row += int64(n)
		return n, p.wrapErr(err)
	}
	want = min(want, len(p.fbuf))
	n, err := p.full.Read(p.fbuf[:want])
	for i := range n {
		r := &p.fbuf[i]
		if verr := p.fill(&dst[i], p.row+int64(i), r.ID, r.Prompt, r.Source, r.Chosen, r.Rejected); verr != nil {
			return 0, verr
		}
		*r = pqRow{}
	}
	p.row += int64(n)
	return n, p.wrapErr(err)
}

func (p *parquetFile) seek(row int64) error {
	if p.full == nil && p.slim == nil {
		return fmt.Errorf("input %s: seek to row %d: file has no rows", p.path, row)
	}
	var err error
	if p.slim != nil {
		err = p.slim.SeekToRow(row)
	} else {
		err = p.full.SeekToRow(row)
	}
	if err != nil {
		return fmt.Errorf("input %s: seek to row %d: %w", p.path, row, err)
	}
	p.row = row
	return nil
}

func (p *parquetFile) wrapErr(err error) error {
	if err == nil || err == io.EOF {
		return err
	}
	return fmt.Errorf("input %s row %d: corrupt Parquet data: %w", p.path, p.row, err)
}

func (p *parquetFile) fill(dst *TuluRow, row int64, id, prompt, source *string, chosen, rejected []Message) error {
	cols := [...]struct {
		name string
		v    *string
		out  *string
	}{{ColID, id, &dst.ID}, {ColPrompt, prompt, &dst.Prompt}, {ColSource, source, &dst.Source}}
	for _, c := range cols {
		if c.v == nil {
			return fmt.Errorf("input %s row %d column %q: null value", p.path, row, c.name)
		}
		if !utf8.ValidString(*c.v) {
			return fmt.Errorf("input %s row %d column %q: invalid UTF-8", p.path, row, c.name)
		}
		*c.out = *c.v
	}
	for _, m := range []struct {
		name string
		msgs []Message
	}{{ColChosen, chosen}, {ColRejected, rejected}} {
		for j, msg := range m.msgs {
			if !utf8.ValidString(msg.Content) || !utf8.ValidString(msg.Role) {
				return fmt.Errorf("input %s row %d column %q message %d: invalid UTF-8", p.path, row, m.name, j)
			}
		}
	}
	dst.Chosen, dst.Rejected = chosen, rejected
	return nil
}

func (p *parquetFile) close() error {
	var errs []error
	if p.full != nil {
		errs = append(errs, p.full.Close())
	}
	if p.slim != nil {
		errs = append(errs, p.slim.Close())
	}
	errs = append(errs, p.f.Close())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("input %s: %w", p.path, err)
	}
	return nil
}
