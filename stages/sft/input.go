package sft

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/evolm/evolm/datasets"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/serving/backend"
)

// eachExample streams the examples of the input files (Parquet or JSONL)
// in file order to fn, with where each comes from ("<file> line N", "<file>
// row N") for its errors; it holds one Parquet batch or one JSONL line at a
// time. Errors name the file, the row and the column. No example at all is
// an error.
func eachExample(ctx context.Context, paths []string, opts pipeline.ReadOptions, fn func(where string, ex backend.SFTExample) error) error {
	files, err := datasets.ResolveInputs(paths)
	if err != nil {
		return err
	}
	n := 0
	count := func(where string, ex backend.SFTExample) error {
		n++
		return fn(where, ex)
	}
	for _, f := range files {
		switch strings.ToLower(filepath.Ext(f)) {
		case ".jsonl", ".json":
			err = eachJSONL(f, count)
		default:
			err = eachParquet(ctx, f, opts, count)
		}
		if err != nil {
			return err
		}
	}
	if n == 0 {
		return fmt.Errorf("input %s: no examples", strings.Join(files, ", "))
	}
	return nil
}

type jsonExample struct {
	Messages   []backend.Message `json:"messages"`
	Prompt     *string           `json:"prompt"`
	Completion *string           `json:"completion"`
}

func eachJSONL(path string, fn func(where string, ex backend.SFTExample) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	for line := 0; sc.Scan(); line++ {
		b := sc.Bytes()
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		where := fmt.Sprintf("%s line %d", path, line+1)
		var j jsonExample
		if err := json.Unmarshal(b, &j); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		ex, err := example(j)
		if err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		if err := fn(where, ex); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func example(j jsonExample) (backend.SFTExample, error) {
	switch {
	case len(j.Messages) > 0 && (j.Prompt != nil || j.Completion != nil):
		return backend.SFTExample{}, fmt.Errorf("both messages and prompt/completion: want one layout")
	case len(j.Messages) > 0:
		for i, m := range j.Messages {
			if m.Role == "" {
				return backend.SFTExample{}, fmt.Errorf("messages[%d]: no role", i)
			}
		}
		return backend.SFTExample{Messages: j.Messages}, nil
	case j.Prompt != nil && j.Completion != nil:
		return backend.SFTExample{Prompt: *j.Prompt, Completion: *j.Completion}, nil
	}
	return backend.SFTExample{}, fmt.Errorf("no messages and no prompt and completion")
}

// eachParquet streams a Parquet file's messages column (list<struct<role,
// content>>) or its prompt and completion columns (strings), a batch at a
// time.
func eachParquet(ctx context.Context, path string, opts pipeline.ReadOptions, fn func(where string, ex backend.SFTExample) error) error {
	row := 0
	for rec, err := range pipeline.ReadShard(ctx, path, opts) {
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		sc := rec.Schema()
		col := func(name string) arrow.Array {
			if idx := sc.FieldIndices(name); len(idx) > 0 {
				return rec.Column(idx[0])
			}
			return nil
		}
		msgs, prompt, completion := col("messages"), col("prompt"), col("completion")
		for i := 0; i < int(rec.NumRows()); i++ {
			var j jsonExample
			var err error
			switch {
			case msgs != nil:
				j.Messages, err = messagesAt(msgs, i)
			case prompt != nil && completion != nil:
				var p, c string
				if p, err = stringAt(prompt, i, "prompt"); err == nil {
					c, err = stringAt(completion, i, "completion")
				}
				j.Prompt, j.Completion = &p, &c
			default:
				err = fmt.Errorf("no messages column and no prompt and completion columns (have %s)", sc)
			}
			var ex backend.SFTExample
			if err == nil {
				ex, err = example(j)
			}
			where := fmt.Sprintf("%s row %d", path, row)
			if err != nil {
				return fmt.Errorf("%s: %w", where, err)
			}
			if err := fn(where, ex); err != nil {
				return err
			}
			row++
		}
	}
	return nil
}

func stringAt(a arrow.Array, i int, name string) (string, error) {
	switch s := a.(type) {
	case *array.String:
		if s.IsNull(i) {
			return "", fmt.Errorf("column %s: null", name)
		}
		return s.Value(i), nil
	case *array.LargeString:
		if s.IsNull(i) {
			return "", fmt.Errorf("column %s: null", name)
		}
		return s.Value(i), nil
	}
	return "", fmt.Errorf("column %s has type %s, want string", name, a.DataType())
}

func messagesAt(a arrow.Array, i int) ([]backend.Message, error) {
	l, ok := a.(*array.List)
	if !ok {
		return nil, fmt.Errorf("column messages has type %s, want list<struct<role: string, content: string>>", a.DataType())
	}
	if l.IsNull(i) {
		return nil, fmt.Errorf("column messages: null")
	}
	st, ok := l.ListValues().(*array.Struct)
	if !ok {
		return nil, fmt.Errorf("column messages has type %s, want list<struct<role: string, content: string>>", a.DataType())
	}
	fields := st.DataType().(*arrow.StructType)
	ri, okr := fields.FieldIdx("role")
	ci, okc := fields.FieldIdx("content")
	if !okr || !okc {
		return nil, fmt.Errorf("column messages has type %s, want list<struct<role: string, content: string>>", a.DataType())
	}
	start, end := l.ValueOffsets(i)
	var out []backend.Message
	for k := int(start); k < int(end); k++ {
		role, err := stringAt(st.Field(ri), k, "messages.role")
		if err != nil {
			return nil, err
		}
		content, err := stringAt(st.Field(ci), k, "messages.content")
		if err != nil {
			return nil, err
		}
		out = append(out, backend.Message{Role: role, Content: content})
	}
	return out, nil
}
