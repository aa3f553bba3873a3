package datasets

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"unicode/utf8"
)

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
	var missing []string
	for _, name := range []string{ColID, ColPrompt, ColSource, ColChosen, ColRejected} {
		if _, ok := obj[name]; !ok && (!j.opts.PromptsOnly || name != ColChosen && name != ColRejected) {
			missing = append(missing, fmt.Sprintf("%q", name))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s %s", where, missingColumns(missing, !j.opts.PromptsOnly))
	}
	for _, c := range cols {
		raw := obj[c.name]
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
		raw := obj[m.name]
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
