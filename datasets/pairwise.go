package datasets

// # Benchmark loaders
//
// RewardBench-2 (rewardbench2.go), JudgeBench (judgebench.go) and generic
// pairwise preference files (this file) are read in their published layouts,
// Parquet or JSONL, through one small reader shared by the three:
// Parquet through the pipeline's shard reader (pqarrow), after the file's
// Arrow schema is checked column by column; JSONL line by line, each column decoded on its own. A
// missing column, a column of the wrong type, a null in a required column and
// invalid UTF-8 are errors naming the file, the column and (for values) the
// row. Benchmarks are small (a few thousand items), so the loaders return
// every item at once.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/evolm/evolm/pipeline"
)

// PairwiseItem is one item of a pairwise preference file: a prompt, the
// preferred response and the dispreferred one.
type PairwiseItem struct {
	ID       string // the file's id column; "<file>:<row>" when it has none
	Prompt   string
	Chosen   string
	Rejected string
	Subset   string // the file's subset column, else its source column, else "all"
}

// Pairwise layout columns. chosen and rejected are either strings or
// conversations (list<struct<content: string, role: string>>, Tulu style);
// a conversation stands for its last message's content. prompt is required
// unless chosen and rejected are conversations, which then carry it (the
// content of their last user turn).
const (
	ColSubset = "subset"
)

// LoadPairwise reads pairwise preference files (Parquet or JSONL; see
// ResolveInputs for directories), allocating Arrow memory from mem (nil: the
// default allocator).
func LoadPairwise(mem memory.Allocator, paths []string) ([]PairwiseItem, error) {
	return loadBench(mem, paths, pairwiseCols, func(f string, i int, r benchRow) (PairwiseItem, error) {
		it := PairwiseItem{ID: r.str(ColID), Prompt: r.str(ColPrompt), Subset: r.str(ColSubset)}
		if it.ID == "" {
			it.ID = f + ":" + strconv.Itoa(i)
		}
		if it.Subset == "" {
			it.Subset = r.str(ColSource)
		}
		if it.Subset == "" {
			it.Subset = "all"
		}
		var chosenPrompt, rejectedPrompt string
		it.Chosen, chosenPrompt = r.text(ColChosen)
		it.Rejected, rejectedPrompt = r.text(ColRejected)
		if it.Prompt == "" {
			it.Prompt = chosenPrompt
		}
		if it.Prompt == "" {
			it.Prompt = rejectedPrompt
		}
		if !r.has(ColPrompt) && it.Prompt == "" {
			return it, fmt.Errorf("input %s row %d: no prompt column and no user turn in %q", f, i, ColChosen)
		}
		return it, nil
	})
}

// loadBench reads the files of paths (ResolveInputs) in the layout cols and
// makes row i of file f an item with item, whose error ends the load. No
// item at all is ErrEmptyInput.
func loadBench[T any](mem memory.Allocator, paths []string, cols []benchCol, item func(f string, i int, r benchRow) (T, error)) ([]T, error) {
	files, err := ResolveInputs(paths)
	if err != nil {
		return nil, err
	}
	var out []T
	for _, f := range files {
		rows, err := readBench(mem, f, cols)
		if err != nil {
			return nil, err
		}
		for i, r := range rows {
			it, err := item(f, i, r)
			if err != nil {
				return nil, err
			}
			out = append(out, it)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("input %s: %w", strings.Join(files, ", "), ErrEmptyInput)
	}
	return out, nil
}

var pairwiseCols = []benchCol{
	{name: ColID, kind: kindStringOrInt, optional: true},
	{name: ColPrompt, kind: kindString, optional: true},
	{name: ColChosen, kind: kindText},
	{name: ColRejected, kind: kindText},
	{name: ColSubset, kind: kindString, optional: true},
	{name: ColSource, kind: kindString, optional: true},
}

// --- shared benchmark machinery ------------------------------------------

// benchKind is the type a benchmark column must have.
type benchKind int

const (
	kindString      benchKind = iota // string
	kindInt                          // int32 or int64
	kindStringList                   // list<string>
	kindStringOrInt                  // string or integer, read as its decimal string
	kindText                         // string, or list<struct<content, role>> read as its last content
)

func (k benchKind) String() string {
	switch k {
	case kindString:
		return "string"
	case kindInt:
		return "integer"
	case kindStringList:
		return "list<string>"
	case kindStringOrInt:
		return "string or integer"
	case kindText:
		return "string or list<struct<content: string, role: string>>"
	}
	return "?"
}

// benchCol is one column a loader reads.
type benchCol struct {
	name     string
	kind     benchKind
	optional bool // may be missing from the file (never null when present)
}

// benchRow holds one decoded row: the value of each present column.
type benchRow struct {
	vals map[string]any // string, int64, []string or textVal
}

// textVal is a kindText value: the response text and, when it came from a
// conversation, the content of its last user turn.
type textVal struct{ text, prompt string }

func (r benchRow) has(col string) bool { _, ok := r.vals[col]; return ok }
func (r benchRow) str(col string) string {
	s, _ := r.vals[col].(string)
	return s
}
func (r benchRow) int(col string) int64 {
	n, _ := r.vals[col].(int64)
	return n
}
func (r benchRow) strs(col string) []string {
	s, _ := r.vals[col].([]string)
	return s
}
func (r benchRow) text(col string) (string, string) {
	t, _ := r.vals[col].(textVal)
	return t.text, t.prompt
}

// readBench reads every row of one Parquet or JSONL file; Parquet decoding
// allocates from mem (nil: the default allocator) and releases it all.
func readBench(mem memory.Allocator, path string, cols []benchCol) ([]benchRow, error) {
	switch formatOf(path) {
	case "parquet":
		return readBenchParquet(mem, path, cols)
	case "jsonl":
		return readBenchJSONL(path, cols)
	}
	return nil, fmt.Errorf("input %s: unknown format (want .parquet or .jsonl)", path)
}

// --- JSONL ---

func readBenchJSONL(path string, cols []benchCol) ([]benchRow, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("input %s: %w", path, err)
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<20)
	var out []benchRow
	for line := 1; ; line++ {
		b, err := br.ReadBytes('\n')
		if t := bytes.TrimSpace(b); len(t) > 0 {
			row, perr := parseBenchLine(t, cols)
			if perr != nil {
				return nil, fmt.Errorf("input %s row %d (line %d): %w", path, len(out), line, perr)
			}
			out = append(out, row)
		}
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("input %s line %d: %w", path, line, err)
		}
	}
}

func parseBenchLine(line []byte, cols []benchCol) (benchRow, error) {
	if !utf8.Valid(line) {
		return benchRow{}, errors.New("invalid UTF-8")
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(line, &obj); err != nil {
		return benchRow{}, fmt.Errorf("malformed JSON: %w", err)
	}
	row := benchRow{vals: map[string]any{}}
	for _, c := range cols {
		raw, ok := obj[c.name]
		if !ok {
			if c.optional {
				continue
			}
			return benchRow{}, fmt.Errorf("column %q: missing", c.name)
		}
		if bytes.Equal(raw, []byte("null")) {
			if c.optional {
				continue
			}
			return benchRow{}, fmt.Errorf("column %q: null value", c.name)
		}
		v, err := decodeJSONValue(raw, c.kind)
		if err != nil {
			return benchRow{}, fmt.Errorf("column %q: wrong type, want %s: %w", c.name, c.kind, err)
		}
		row.vals[c.name] = v
	}
	return row, nil
}

func decodeJSONValue(raw json.RawMessage, k benchKind) (any, error) {
	switch k {
	case kindString:
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	case kindInt:
		var n int64
		err := json.Unmarshal(raw, &n)
		return n, err
	case kindStringList:
		var s []string
		err := json.Unmarshal(raw, &s)
		if s == nil {
			s = []string{}
		}
		return s, err
	case kindStringOrInt:
		var s string
		if err := json.Unmarshal(raw, &s); err == nil {
			return s, nil
		}
		var n int64
		if err := json.Unmarshal(raw, &n); err != nil {
			return nil, err
		}
		return strconv.FormatInt(n, 10), nil
	case kindText:
		var s string
		if err := json.Unmarshal(raw, &s); err == nil {
			return textVal{text: s}, nil
		}
		var msgs []Message
		if err := json.Unmarshal(raw, &msgs); err != nil {
			return nil, err
		}
		return conversationText(msgs)
	}
	return nil, fmt.Errorf("unknown kind %d", k)
}

// conversationText turns a conversation into its last message's content and
// the content of the last user turn before it.
func conversationText(msgs []Message) (textVal, error) {
	if len(msgs) == 0 {
		return textVal{}, errors.New("empty conversation")
	}
	t := textVal{text: msgs[len(msgs)-1].Content}
	for i := len(msgs) - 2; i >= 0; i-- {
		if msgs[i].Role == "user" {
			t.prompt = msgs[i].Content
			break
		}
	}
	return t, nil
}

// --- Parquet ---

// readBenchParquet reads a Parquet file through the pipeline's shard reader
// (pqarrow), checks each column's Arrow type against cols and decodes the
// rows. Arrow types make the alternatives a benchmark layout allows (string
// or integer ids, string or conversation responses) simple to tell apart.
func readBenchParquet(mem memory.Allocator, path string, cols []benchCol) ([]benchRow, error) {
	r, err := pipeline.OpenShard(path, pipeline.ReadOptions{Mem: mem})
	if err != nil {
		return nil, fmt.Errorf("input %s: %w", path, err)
	}
	defer r.Close()
	sc := r.Schema()
	for _, c := range cols {
		idx := sc.FieldIndices(c.name)
		if len(idx) == 0 {
			if c.optional {
				continue
			}
			return nil, fmt.Errorf("input %s: column %q: missing (want %s; file schema:\n%s)", path, c.name, c.kind, sc)
		}
		if !arrowKindOK(sc.Field(idx[0]).Type, c.kind) {
			return nil, fmt.Errorf("input %s: column %q: wrong type %s, want %s (file schema:\n%s)", path, c.name, sc.Field(idx[0]).Type, c.kind, sc)
		}
	}
	var out []benchRow
	for rec, err := range r.Batches(context.Background()) {
		if err != nil {
			return nil, fmt.Errorf("input %s: %w", path, err)
		}
		base := len(out)
		for i := 0; i < int(rec.NumRows()); i++ {
			out = append(out, benchRow{vals: map[string]any{}})
		}
		for _, c := range cols {
			idx := rec.Schema().FieldIndices(c.name)
			if len(idx) == 0 {
				continue
			}
			a := rec.Column(idx[0])
			for i := 0; i < a.Len(); i++ {
				if a.IsNull(i) {
					if c.optional {
						continue
					}
					return nil, fmt.Errorf("input %s row %d column %q: null value", path, base+i, c.name)
				}
				v, err := arrowValue(a, i, c.kind)
				if err != nil {
					return nil, fmt.Errorf("input %s row %d column %q: %w", path, base+i, c.name, err)
				}
				out[base+i].vals[c.name] = v
			}
		}
	}
	return out, nil
}

func isArrowString(t arrow.DataType) bool {
	return t.ID() == arrow.STRING || t.ID() == arrow.LARGE_STRING
}

func isArrowInt(t arrow.DataType) bool {
	switch t.ID() {
	case arrow.INT8, arrow.INT16, arrow.INT32, arrow.INT64, arrow.UINT8, arrow.UINT16, arrow.UINT32:
		return true
	}
	return false
}

func listElem(t arrow.DataType) (arrow.DataType, bool) {
	switch lt := t.(type) {
	case *arrow.ListType:
		return lt.Elem(), true
	case *arrow.LargeListType:
		return lt.Elem(), true
	}
	return nil, false
}

func isArrowMessages(t arrow.DataType) bool {
	e, ok := listElem(t)
	if !ok {
		return false
	}
	st, ok := e.(*arrow.StructType)
	if !ok {
		return false
	}
	c, ok1 := st.FieldByName("content")
	r, ok2 := st.FieldByName("role")
	return ok1 && ok2 && isArrowString(c.Type) && isArrowString(r.Type)
}

func arrowKindOK(t arrow.DataType, k benchKind) bool {
	switch k {
	case kindString:
		return isArrowString(t)
	case kindInt:
		return isArrowInt(t)
	case kindStringList:
		e, ok := listElem(t)
		return ok && isArrowString(e)
	case kindStringOrInt:
		return isArrowString(t) || isArrowInt(t)
	case kindText:
		return isArrowString(t) || isArrowMessages(t)
	}
	return false
}

// arrowString returns element i of a string array (a non-null value).
func arrowString(a arrow.Array, i int) (string, error) {
	var s string
	switch a := a.(type) {
	case *array.String:
		s = a.Value(i)
	case *array.LargeString:
		s = a.Value(i)
	default:
		return "", fmt.Errorf("type %s, want string", a.DataType())
	}
	if !utf8.ValidString(s) {
		return "", errors.New("invalid UTF-8")
	}
	return s, nil
}

func arrowInt(a arrow.Array, i int) int64 {
	switch a := a.(type) {
	case *array.Int8:
		return int64(a.Value(i))
	case *array.Int16:
		return int64(a.Value(i))
	case *array.Int32:
		return int64(a.Value(i))
	case *array.Int64:
		return a.Value(i)
	case *array.Uint8:
		return int64(a.Value(i))
	case *array.Uint16:
		return int64(a.Value(i))
	case *array.Uint32:
		return int64(a.Value(i))
	}
	return 0
}

// listRange returns the values array and element range of list element i.
func listRange(a arrow.Array, i int) (arrow.Array, int, int) {
	switch l := a.(type) {
	case *array.List:
		s, e := l.ValueOffsets(i)
		return l.ListValues(), int(s), int(e)
	case *array.LargeList:
		s, e := l.ValueOffsets(i)
		return l.ListValues(), int(s), int(e)
	}
	return nil, 0, 0
}

func arrowValue(a arrow.Array, i int, k benchKind) (any, error) {
	switch k {
	case kindString:
		return arrowString(a, i)
	case kindInt:
		return arrowInt(a, i), nil
	case kindStringOrInt:
		if isArrowInt(a.DataType()) {
			return strconv.FormatInt(arrowInt(a, i), 10), nil
		}
		return arrowString(a, i)
	case kindStringList:
		vals, s, e := listRange(a, i)
		out := make([]string, 0, e-s)
		for j := s; j < e; j++ {
			if vals.IsNull(j) {
				return nil, fmt.Errorf("element %d: null value", j-s)
			}
			v, err := arrowString(vals, j)
			if err != nil {
				return nil, fmt.Errorf("element %d: %w", j-s, err)
			}
			out = append(out, v)
		}
		return out, nil
	case kindText:
		if isArrowString(a.DataType()) {
			s, err := arrowString(a, i)
			return textVal{text: s}, err
		}
		vals, s, e := listRange(a, i)
		st := vals.(*array.Struct)
		stt := st.DataType().(*arrow.StructType)
		ci, _ := stt.FieldIdx("content")
		ri, _ := stt.FieldIdx("role")
		msgs := make([]Message, 0, e-s)
		for j := s; j < e; j++ {
			if st.IsNull(j) || st.Field(ci).IsNull(j) || st.Field(ri).IsNull(j) {
				return nil, fmt.Errorf("message %d: null value", j-s)
			}
			c, err := arrowString(st.Field(ci), j)
			if err != nil {
				return nil, fmt.Errorf("message %d: %w", j-s, err)
			}
			r, err := arrowString(st.Field(ri), j)
			if err != nil {
				return nil, fmt.Errorf("message %d: %w", j-s, err)
			}
			msgs = append(msgs, Message{Content: c, Role: r})
		}
		return conversationText(msgs)
	}
	return nil, fmt.Errorf("unknown kind %d", k)
}
