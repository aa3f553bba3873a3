// Package datasets loads the prompt datasets evolm trains on and holds the
// small sample set the project writes itself.
//
// # Tulu 3 preference mixture
//
// The Tulu 3 loader reads the layout of allenai/llama-3.1-tulu-3-8b-preference-mixture
// as published on the Hub (271,409 rows in 4 Parquet shards):
//
//	id       string
//	prompt   string
//	chosen   list<struct<content: string, role: string>>
//	rejected list<struct<content: string, role: string>>
//	source   string
//
// and JSONL files with one object of the same shape per line. Parquet is read
// with parquet-go's typed row IO (GenericReader into TuluRow-like structs),
// streaming a batch of rows at a time; nothing holds a whole file. JSONL is
// decoded line by line.
//
// Every file's schema is checked before its first row is read, and every row
// is checked as it streams by. Errors name the file, the row (0-based, within
// the file; JSONL rows are also lines-1) and the column: a missing column, a
// column of the wrong type, a null id/prompt/source, invalid UTF-8 in a string
// column, a corrupt file, and an input with no rows at all.
package datasets

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/deprecated"
	"github.com/parquet-go/parquet-go/format"
)

// Message is one chat turn of a chosen or rejected conversation.
type Message struct {
	Content string `parquet:"content" json:"content"`
	Role    string `parquet:"role" json:"role"`
}

// TuluRow is one row of the Tulu 3 preference-mixture layout.
type TuluRow struct {
	ID       string    `parquet:"id" json:"id"`
	Prompt   string    `parquet:"prompt" json:"prompt"`
	Chosen   []Message `parquet:"chosen,list" json:"chosen"`
	Rejected []Message `parquet:"rejected,list" json:"rejected"`
	Source   string    `parquet:"source" json:"source"`
}

// Column names of the layout.
const (
	ColID       = "id"
	ColPrompt   = "prompt"
	ColChosen   = "chosen"
	ColRejected = "rejected"
	ColSource   = "source"
)

// ErrEmptyInput is returned (wrapped, naming the inputs) when the input files
// hold no rows at all.
var ErrEmptyInput = errors.New("empty input: no rows")

// Options configure a Reader. The zero value reads every column.
type Options struct {
	// PromptsOnly skips the chosen and rejected conversations: they are
	// neither required nor decoded, and TuluRow.Chosen/Rejected stay nil.
	// Dedup uses this; it only needs id, prompt and source.
	PromptsOnly bool
	// BatchSize is the number of Parquet rows decoded per batch; 0: 1024.
	BatchSize int
}

// Reader streams TuluRows from a list of Parquet and JSONL files, in the
// order given. It is not safe for concurrent use.
type Reader struct {
	files []string
	opts  Options
	next  int // index into files of the next file to open
	cur   fileReader
	rows  int64 // rows returned so far, all files
}

// fileReader streams one file.
type fileReader interface {
	read(dst []TuluRow) (int, error) // io.EOF at the end of the file
	seek(row int64) error            // next read starts at data row row
	close() error
}

// ResolveInputs expands paths into the list of data files they name: a file
// stands for itself; a directory stands for its *.parquet, *.jsonl and
// *.json files (not recursive, sorted by name). Hidden files are skipped.
func ResolveInputs(paths []string) ([]string, error) {
	var out []string
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("input %s: %w", p, err)
		}
		if !st.IsDir() {
			out = append(out, p)
			continue
		}
		ents, err := os.ReadDir(p)
		if err != nil {
			return nil, fmt.Errorf("input %s: %w", p, err)
		}
		var found []string
		for _, e := range ents {
			name := e.Name()
			if e.IsDir() || strings.HasPrefix(name, ".") {
				continue
			}
			switch formatOf(name) {
			case "parquet", "jsonl":
				found = append(found, filepath.Join(p, name))
			}
		}
		slices.Sort(found)
		if len(found) == 0 {
			return nil, fmt.Errorf("input %s: directory holds no .parquet or .jsonl files: %w", p, ErrEmptyInput)
		}
		out = append(out, found...)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no input files: %w", ErrEmptyInput)
	}
	return out, nil
}

func formatOf(name string) string {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".parquet", ".pq":
		return "parquet"
	case ".jsonl", ".json", ".ndjson":
		return "jsonl"
	}
	return ""
}

// Open returns a Reader over the files paths resolve to (see ResolveInputs).
// Files are opened lazily, one at a time.
func Open(paths []string, opts Options) (*Reader, error) {
	files, err := ResolveInputs(paths)
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		if formatOf(f) == "" {
			return nil, fmt.Errorf("input %s: unknown format (want .parquet or .jsonl)", f)
		}
	}
	if opts.BatchSize <= 0 {
		opts.BatchSize = 1024
	}
	return &Reader{files: files, opts: opts}, nil
}

// Files returns the data files the reader streams, in order.
func (r *Reader) Files() []string { return slices.Clone(r.files) }

// Read fills dst with the next rows and returns how many it wrote. At the end
// of the last file it returns 0, io.EOF; if no file held any row it returns
// an error wrapping ErrEmptyInput instead.
func (r *Reader) Read(dst []TuluRow) (int, error) {
	if len(dst) == 0 {
		return 0, nil
	}
	for {
		if r.cur == nil {
			if r.next >= len(r.files) {
				if r.rows == 0 {
					return 0, fmt.Errorf("input %s: %w", strings.Join(r.files, ", "), ErrEmptyInput)
				}
				return 0, io.EOF
			}
			fr, err := openFile(r.files[r.next], r.opts)
			if err != nil {
				return 0, err
			}
			r.cur = fr
			r.next++
		}
		n, err := r.cur.read(dst)
		r.rows += int64(n)
		if err == io.EOF {
			cerr := r.cur.close()
			r.cur = nil
			if cerr != nil {
				return n, cerr
			}
			if n > 0 {
				return n, nil
			}
			continue
		}
		return n, err
	}
}

// Close releases the open file, if any.
func (r *Reader) Close() error {
	if r.cur == nil {
		return nil
	}
	err := r.cur.close()
	r.cur = nil
	return err
}

// RangeReader streams rows [start, start+count) of one file.
type RangeReader struct {
	path string
	fr   fileReader
	left int64
}

// OpenRange opens one Parquet or JSONL file and positions it at data row
// start (0-based); Read then returns at most count rows. Parquet seeks
// through the page index; JSONL skips lines. Rows skipped are not validated.
func OpenRange(path string, opts Options, start, count int64) (*RangeReader, error) {
	if opts.BatchSize <= 0 {
		opts.BatchSize = 1024
	}
	fr, err := openFile(path, opts)
	if err != nil {
		return nil, err
	}
	if start > 0 {
		if err := fr.seek(start); err != nil {
			fr.close()
			return nil, err
		}
	}
	return &RangeReader{path: path, fr: fr, left: count}, nil
}

// Read fills dst with the next rows of the range; 0, io.EOF at its end (or
// at the end of the file, whichever comes first).
func (r *RangeReader) Read(dst []TuluRow) (int, error) {
	if r.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(dst)) > r.left {
		dst = dst[:r.left]
	}
	n, err := r.fr.read(dst)
	r.left -= int64(n)
	if err == io.EOF && n > 0 {
		err = nil
	}
	return n, err
}

// Close closes the file.
func (r *RangeReader) Close() error { return r.fr.close() }

// ReadAll reads every row of paths into memory. Only for small inputs (the
// sample set, tests).
func ReadAll(paths []string, opts Options) ([]TuluRow, error) {
	r, err := Open(paths, opts)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var out []TuluRow
	buf := make([]TuluRow, 256)
	for {
		n, err := r.Read(buf)
		out = append(out, buf[:n]...)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

func openFile(path string, opts Options) (fileReader, error) {
	switch formatOf(path) {
	case "parquet":
		return openParquet(path, opts)
	case "jsonl":
		return openJSONL(path, opts)
	}
	return nil, fmt.Errorf("input %s: unknown format (want .parquet or .jsonl)", path)
}

// --- Parquet ---------------------------------------------------------------

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
// columns are allowed. The error names the column and shows the file schema.
func CheckParquetSchema(schema *parquet.Schema, withMessages bool) error {
	fields := map[string]parquet.Field{}
	for _, f := range schema.Fields() {
		fields[f.Name()] = f
	}
	for _, name := range []string{ColID, ColPrompt, ColSource} {
		f, ok := fields[name]
		if !ok {
			return fmt.Errorf("column %q: missing (file schema:\n%s)", name, schema)
		}
		if !isStringLeaf(f) {
			return fmt.Errorf("column %q: wrong type %s, want string (file schema:\n%s)", name, describe(f), schema)
		}
	}
	if !withMessages {
		return nil
	}
	for _, name := range []string{ColChosen, ColRejected} {
		f, ok := fields[name]
		if !ok {
			return fmt.Errorf("column %q: missing (file schema:\n%s)", name, schema)
		}
		if !isMessageList(f) {
			return fmt.Errorf("column %q: wrong type %s, want list<struct<content: string, role: string>> (file schema:\n%s)", name, describe(f), schema)
		}
	}
	return nil
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

// --- JSONL -----------------------------------------------------------------

type jsonlFile struct {
	path string
	f    *os.File
	br   *bufio.Reader
	opts Options
	row  int64 // 0-based data row; blank lines are skipped but counted in line
	line int64
}

func openJSONL(path string, opts Options) (*jsonlFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("input %s: %w", path, err)
	}
	return &jsonlFile{path: path, f: f, br: bufio.NewReaderSize(f, 1<<20), opts: opts}, nil
}

func (j *jsonlFile) read(dst []TuluRow) (int, error) {
	n := 0
	for n < len(dst) {
		line, err := j.br.ReadBytes('\n')
		if len(line) > 0 {
			j.line++
			if t := bytes.TrimSpace(line); len(t) > 0 {
				if perr := j.parse(t, &dst[n]); perr != nil {
					return 0, perr
				}
				j.row++
				n++
			}
		}
		if err == io.EOF {
			if n == 0 {
				return 0, io.EOF
			}
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("input %s line %d: %w", j.path, j.line+1, err)
		}
	}
	return n, nil
}

func (j *jsonlFile) seek(row int64) error {
	for j.row < row {
		line, err := j.br.ReadSlice('\n')
		for err == bufio.ErrBufferFull {
			_, err = j.br.ReadSlice('\n')
		}
		if len(line) > 0 || err == nil {
			j.line++
			if len(bytes.TrimSpace(line)) > 0 {
				j.row++
			}
		}
		if err == io.EOF {
			return fmt.Errorf("input %s: seek to row %d: file has %d rows", j.path, row, j.row)
		}
		if err != nil {
			return fmt.Errorf("input %s line %d: %w", j.path, j.line+1, err)
		}
	}
	return nil
}

func (j *jsonlFile) parse(line []byte, dst *TuluRow) error {
	where := fmt.Sprintf("input %s row %d (line %d)", j.path, j.row, j.line)
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(line, &obj); err != nil {
		if !utf8.Valid(line) {
			return fmt.Errorf("%s: invalid UTF-8", where)
		}
		return fmt.Errorf("%s: malformed JSON: %w", where, err)
	}
	// encoding/json silently replaces invalid UTF-8 with U+FFFD; check the
	// raw bytes of each column first so the error can name it.
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		if !utf8.Valid(obj[k]) {
			return fmt.Errorf("%s column %q: invalid UTF-8", where, k)
		}
	}
	cols := [...]struct {
		name string
		out  *string
	}{{ColID, &dst.ID}, {ColPrompt, &dst.Prompt}, {ColSource, &dst.Source}}
	for _, c := range cols {
		raw, ok := obj[c.name]
		if !ok {
			return fmt.Errorf("%s column %q: missing", where, c.name)
		}
		if bytes.Equal(raw, []byte("null")) {
			return fmt.Errorf("%s column %q: null value", where, c.name)
		}
		if err := json.Unmarshal(raw, c.out); err != nil {
			return fmt.Errorf("%s column %q: wrong type, want string: %w", where, c.name, err)
		}
	}
	dst.Chosen, dst.Rejected = nil, nil
	if j.opts.PromptsOnly {
		return nil
	}
	for _, m := range []struct {
		name string
		out  *[]Message
	}{{ColChosen, &dst.Chosen}, {ColRejected, &dst.Rejected}} {
		raw, ok := obj[m.name]
		if !ok {
			return fmt.Errorf("%s column %q: missing", where, m.name)
		}
		if bytes.Equal(raw, []byte("null")) {
			continue
		}
		if err := json.Unmarshal(raw, m.out); err != nil {
			return fmt.Errorf("%s column %q: wrong type, want list<struct<content: string, role: string>>: %w", where, m.name, err)
		}
	}
	return nil
}

func (j *jsonlFile) close() error {
	if err := j.f.Close(); err != nil {
		return fmt.Errorf("input %s: %w", j.path, err)
	}
	return nil
}

// --- writing ---------------------------------------------------------------

// pqWriteRow mirrors the published files: every column nullable.
type pqWriteRow struct {
	ID       *string      `parquet:"id,optional"`
	Prompt   *string      `parquet:"prompt,optional"`
	Chosen   []pqWriteMsg `parquet:"chosen,optional,list"`
	Rejected []pqWriteMsg `parquet:"rejected,optional,list"`
	Source   *string      `parquet:"source,optional"`
}

type pqWriteMsg struct {
	Content *string `parquet:"content,optional"`
	Role    *string `parquet:"role,optional"`
}

func writeMsgs(ms []Message) []pqWriteMsg {
	out := make([]pqWriteMsg, len(ms))
	for i := range ms {
		out[i] = pqWriteMsg{Content: &ms[i].Content, Role: &ms[i].Role}
	}
	return out
}

// ParquetWriter streams rows in the Tulu layout (all columns nullable, as
// in the published files; zstd).
type ParquetWriter struct {
	pw    *parquet.GenericWriter[pqWriteRow]
	batch []pqWriteRow
}

// NewParquetWriter starts a Tulu-layout Parquet file on w with row groups of
// rowGroupRows rows (0: 64Ki). Readers buffer about a row group.
func NewParquetWriter(w io.Writer, rowGroupRows int64) *ParquetWriter {
	if rowGroupRows <= 0 {
		rowGroupRows = 64 * 1024
	}
	return &ParquetWriter{pw: parquet.NewGenericWriter[pqWriteRow](w,
		parquet.Compression(&parquet.Zstd),
		parquet.MaxRowsPerRowGroup(rowGroupRows),
		parquet.CreatedBy("evolm", "datasets", ""),
	), batch: make([]pqWriteRow, 0, 1024)}
}

// Write appends rows.
func (w *ParquetWriter) Write(rows []TuluRow) error {
	for len(rows) > 0 {
		w.batch = w.batch[:0]
		for _, r := range rows[:min(len(rows), cap(w.batch))] {
			w.batch = append(w.batch, pqWriteRow{ID: &r.ID, Prompt: &r.Prompt, Chosen: writeMsgs(r.Chosen), Rejected: writeMsgs(r.Rejected), Source: &r.Source})
		}
		if _, err := w.pw.Write(w.batch); err != nil {
			return fmt.Errorf("write parquet: %w", err)
		}
		rows = rows[len(w.batch):]
	}
	return nil
}

// Close flushes the last row group and writes the footer.
func (w *ParquetWriter) Close() error {
	if err := w.pw.Close(); err != nil {
		return fmt.Errorf("write parquet: %w", err)
	}
	return nil
}

// WriteParquet writes rows in the Tulu layout to w, 64Ki rows per row group.
func WriteParquet(w io.Writer, rows []TuluRow) error {
	pw := NewParquetWriter(w, 0)
	if err := pw.Write(rows); err != nil {
		return err
	}
	return pw.Close()
}

// WriteJSONL writes rows in the Tulu layout, one JSON object per line.
func WriteJSONL(w io.Writer, rows []TuluRow) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	for i, r := range rows {
		if r.Chosen == nil {
			r.Chosen = []Message{}
		}
		if r.Rejected == nil {
			r.Rejected = []Message{}
		}
		if err := enc.Encode(r); err != nil {
			return fmt.Errorf("write jsonl row %d: %w", i, err)
		}
	}
	return bw.Flush()
}
