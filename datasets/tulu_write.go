package datasets

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"

	"github.com/parquet-go/parquet-go"
)

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
