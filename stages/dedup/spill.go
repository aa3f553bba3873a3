package dedup

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

type spill struct {
	dir             string
	parts           int
	exact, band     []*os.File
	exactW, bandW   []*bufio.Writer
	shData, shIdx   *os.File
	shDataW, shIdxW *bufio.Writer
	shOff           uint64
}

func newSpill(dir string, parts int) (*spill, error) {
	sp := &spill{dir: dir, parts: parts}
	create := func(name string) (*os.File, error) {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_TRUNC|os.O_RDWR, 0o644)
		if err != nil {
			return nil, fmt.Errorf("dedup spill: %w", err)
		}
		return f, nil
	}
	bufSize := 32 << 10
	for i := range parts {
		f, err := create(fmt.Sprintf("exact-%04d.bin", i))
		if err != nil {
			sp.close()
			return nil, err
		}
		sp.exact = append(sp.exact, f)
		sp.exactW = append(sp.exactW, bufio.NewWriterSize(f, bufSize))
		f, err = create(fmt.Sprintf("band-%04d.bin", i))
		if err != nil {
			sp.close()
			return nil, err
		}
		sp.band = append(sp.band, f)
		sp.bandW = append(sp.bandW, bufio.NewWriterSize(f, bufSize))
	}
	var err error
	if sp.shData, err = create("shingles.bin"); err != nil {
		sp.close()
		return nil, err
	}
	if sp.shIdx, err = create("shingles.idx"); err != nil {
		sp.close()
		return nil, err
	}
	sp.shDataW = bufio.NewWriterSize(sp.shData, 1<<20)
	sp.shIdxW = bufio.NewWriterSize(sp.shIdx, 64<<10)
	return sp, nil
}

func (sp *spill) part(key uint64) int {
	return int((key >> 32) * uint64(sp.parts) >> 32)
}

func (sp *spill) finishWrites() error {
	var errs []error
	for _, w := range append(slices.Clone(sp.exactW), sp.bandW...) {
		errs = append(errs, w.Flush())
	}
	errs = append(errs, sp.shDataW.Flush(), sp.shIdxW.Flush())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("dedup spill: %w", err)
	}
	return nil
}

func (sp *spill) close() {
	for _, f := range append(slices.Clone(sp.exact), sp.band...) {
		f.Close()
	}
	if sp.shData != nil {
		sp.shData.Close()
	}
	if sp.shIdx != nil {
		sp.shIdx.Close()
	}
}

func (sp *spill) remove() {
	for i := range sp.parts {
		os.Remove(filepath.Join(sp.dir, fmt.Sprintf("exact-%04d.bin", i)))
		os.Remove(filepath.Join(sp.dir, fmt.Sprintf("band-%04d.bin", i)))
	}
	os.Remove(filepath.Join(sp.dir, "shingles.bin"))
	os.Remove(filepath.Join(sp.dir, "shingles.idx"))
	os.Remove(sp.dir) // only if empty
}

// shingles reads row's shingle set back into buf.
func (sp *spill) shingles(row uint32, buf []uint32) ([]uint32, error) {
	var ib [16]byte
	if _, err := sp.shIdx.ReadAt(ib[:], int64(row)*8); err != nil {
		// The last row's end offset is the data file size.
		if _, err2 := sp.shIdx.ReadAt(ib[:8], int64(row)*8); err2 != nil {
			return nil, fmt.Errorf("dedup spill: shingle index row %d: %w", row, err2)
		}
		st, err3 := sp.shData.Stat()
		if err3 != nil {
			return nil, fmt.Errorf("dedup spill: %w", err3)
		}
		binary.LittleEndian.PutUint64(ib[8:], uint64(st.Size()))
	}
	start, end := binary.LittleEndian.Uint64(ib[:8]), binary.LittleEndian.Uint64(ib[8:])
	n := int(end-start) / 4
	raw := make([]byte, end-start)
	if _, err := sp.shData.ReadAt(raw, int64(start)); err != nil {
		return nil, fmt.Errorf("dedup spill: shingles of row %d: %w", row, err)
	}
	buf = slices.Grow(buf[:0], n)
	for i := range n {
		buf = append(buf, binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return buf, nil
}
