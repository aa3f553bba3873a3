// Package safetensors reads and writes the safetensors format
// (https://github.com/huggingface/safetensors) and HF's sharded checkpoints
// (model.safetensors.index.json). It is pure Go and knows nothing of torch:
// tensors are names, dtypes, shapes and raw little-endian bytes.
//
// File layout: an 8-byte little-endian header length N, N bytes of JSON
// {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__":
// {…}}, then the data buffer; offsets are relative to the buffer.
//
// Reading maps the file into memory (Open), so loading an 8B checkpoint costs
// the page cache, not a second copy on the Go heap; Data slices stay valid
// until Close. Open validates the whole header before returning: every dtype
// known, shape × dtype size equal to the byte range, ranges inside the file and
// not overlapping. Its errors name the file and what is wrong.
//
// Writing (Write) streams: the header is computed from names, dtypes and shapes,
// then each tensor's bytes are fetched and written in turn, so peak memory is
// one tensor. Keys are sorted, the header is padded with spaces to a multiple
// of 8 bytes, and the file is written to a temporary name and renamed.
package safetensors

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"unsafe"
)

// DType is a safetensors dtype name as it appears in the header.
type DType string

// The dtypes this package reads and writes.
const (
	F64  DType = "F64"
	F32  DType = "F32"
	F16  DType = "F16"
	BF16 DType = "BF16"
	I64  DType = "I64"
	I32  DType = "I32"
	I16  DType = "I16"
	I8   DType = "I8"
	U8   DType = "U8"
	Bool DType = "BOOL"
)

var dtypeSizes = map[DType]int64{F64: 8, F32: 4, F16: 2, BF16: 2, I64: 8, I32: 4, I16: 2, I8: 1, U8: 1, Bool: 1}

// Size is the byte size of one element, or 0 for an unknown dtype.
func (d DType) Size() int64 { return dtypeSizes[d] }

// MaxHeaderSize bounds the JSON header, as the reference implementation does.
const MaxHeaderSize = 100 << 20

// Info describes one tensor in a file.
type Info struct {
	Name  string
	DType DType
	Shape []int64
	// Begin and End are the byte range in the data buffer (after the header).
	Begin, End int64
}

// Numel is the number of elements.
func (i Info) Numel() int64 {
	n := int64(1)
	for _, d := range i.Shape {
		n *= d
	}
	return n
}

// Bytes is the tensor's size in bytes.
func (i Info) Bytes() int64 { return i.Numel() * i.DType.Size() }

// File is an open, validated safetensors file.
type File struct {
	Path string
	// Metadata is the header's __metadata__ (may be nil).
	Metadata map[string]string

	mm      []byte // the whole file, mapped
	dataOff int64  // start of the data buffer in mm
	infos   map[string]Info
	names   []string
}

type headerEntry struct {
	DType       DType   `json:"dtype"`
	Shape       []int64 `json:"shape"`
	DataOffsets []int64 `json:"data_offsets"`
}

// Open maps and validates a safetensors file.
func Open(path string) (*File, error) {
	fd, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	defer fd.Close()
	st, err := fd.Stat()
	if err != nil {
		return nil, fmt.Errorf("safetensors %s: %w", path, err)
	}
	size := st.Size()
	if size < 8 {
		return nil, fmt.Errorf("safetensors %s: file is %d bytes, too short for the 8-byte header length", path, size)
	}
	mm, err := syscall.Mmap(int(fd.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("safetensors %s: mmap: %w", path, err)
	}
	f := &File{Path: path, mm: mm}
	if err := f.parse(); err != nil {
		_ = syscall.Munmap(mm)
		return nil, fmt.Errorf("safetensors %s: %w", path, err)
	}
	return f, nil
}

func (f *File) parse() error {
	n := binary.LittleEndian.Uint64(f.mm[:8])
	if n > MaxHeaderSize {
		return fmt.Errorf("header length %d exceeds the %d-byte limit (not a safetensors file?)", n, MaxHeaderSize)
	}
	if int64(n) > int64(len(f.mm))-8 {
		return fmt.Errorf("header length %d runs past the end of the %d-byte file (truncated?)", n, len(f.mm))
	}
	f.dataOff = 8 + int64(n)
	dataLen := int64(len(f.mm)) - f.dataOff
	hdr := f.mm[8:f.dataOff]
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(hdr))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return fmt.Errorf("header is not a JSON object: %w", err)
	}
	f.infos = make(map[string]Info, len(raw))
	for name, msg := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(msg, &f.Metadata); err != nil {
				return fmt.Errorf("__metadata__ must map strings to strings: %w", err)
			}
			continue
		}
		var e headerEntry
		d := json.NewDecoder(bytes.NewReader(msg))
		d.DisallowUnknownFields()
		if err := d.Decode(&e); err != nil {
			return fmt.Errorf("tensor %q: bad header entry: %w", name, err)
		}
		info, err := validate(name, e, dataLen)
		if err != nil {
			return err
		}
		f.infos[name] = info
		f.names = append(f.names, name)
	}
	sort.Strings(f.names)
	// Overlaps: sort by begin and compare neighbours.
	byOff := append([]string(nil), f.names...)
	sort.Slice(byOff, func(i, j int) bool { return f.infos[byOff[i]].Begin < f.infos[byOff[j]].Begin })
	for i := 1; i < len(byOff); i++ {
		a, b := f.infos[byOff[i-1]], f.infos[byOff[i]]
		if b.Begin < a.End && b.End > b.Begin {
			return fmt.Errorf("tensors %q [%d, %d) and %q [%d, %d) overlap", a.Name, a.Begin, a.End, b.Name, b.Begin, b.End)
		}
	}
	return nil
}

func validate(name string, e headerEntry, dataLen int64) (Info, error) {
	if e.DType == "" {
		return Info{}, fmt.Errorf("tensor %q: missing dtype", name)
	}
	es := e.DType.Size()
	if es == 0 {
		return Info{}, fmt.Errorf("tensor %q: unsupported dtype %q (know F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL)", name, e.DType)
	}
	if e.Shape == nil {
		return Info{}, fmt.Errorf("tensor %q: missing shape", name)
	}
	if len(e.DataOffsets) != 2 {
		return Info{}, fmt.Errorf("tensor %q: data_offsets has %d values, want 2", name, len(e.DataOffsets))
	}
	numel := int64(1)
	for _, d := range e.Shape {
		if d < 0 {
			return Info{}, fmt.Errorf("tensor %q: negative dimension in shape %v", name, e.Shape)
		}
		if d != 0 && numel > math.MaxInt64/d/es {
			return Info{}, fmt.Errorf("tensor %q: shape %v overflows", name, e.Shape)
		}
		numel *= d
	}
	b, end := e.DataOffsets[0], e.DataOffsets[1]
	if b < 0 || end < b {
		return Info{}, fmt.Errorf("tensor %q: bad data_offsets [%d, %d]", name, b, end)
	}
	if end > dataLen {
		return Info{}, fmt.Errorf("tensor %q: data_offsets [%d, %d] beyond the %d-byte data buffer (truncated file?)", name, b, end, dataLen)
	}
	if want := numel * es; end-b != want {
		return Info{}, fmt.Errorf("tensor %q: %d bytes in data_offsets [%d, %d], but shape %v of %s needs %d", name, end-b, b, end, e.Shape, e.DType, want)
	}
	return Info{Name: name, DType: e.DType, Shape: e.Shape, Begin: b, End: end}, nil
}

// Names lists the tensors, sorted.
func (f *File) Names() []string { return f.names }

// Info describes a tensor; ok is false when the file lacks it.
func (f *File) Info(name string) (Info, bool) {
	i, ok := f.infos[name]
	return i, ok
}

// Data is a tensor's bytes, a view of the mapped file valid until Close.
func (f *File) Data(name string) ([]byte, error) {
	i, ok := f.infos[name]
	if !ok {
		return nil, fmt.Errorf("safetensors %s: no tensor %q", f.Path, name)
	}
	if f.mm == nil {
		return nil, fmt.Errorf("safetensors %s: file is closed", f.Path)
	}
	return f.mm[f.dataOff+i.Begin : f.dataOff+i.End : f.dataOff+i.End], nil
}

// Release tells the kernel that a tensor's bytes are no longer needed
// (madvise MADV_DONTNEED on its pages), so that a loader that has copied
// them drops them from its resident memory at once rather than holding the
// whole mapped file until Close; the page cache keeps them, and Data still
// works (its pages fault back in). Loading a 16 GB checkpoint thus peaks at
// the model's size, not the model's plus the file's.
func (f *File) Release(name string) error {
	i, ok := f.infos[name]
	if !ok || f.mm == nil {
		return nil
	}
	page := int64(os.Getpagesize())
	lo := (f.dataOff + i.Begin) / page * page
	hi := min((f.dataOff+i.End+page-1)/page*page, int64(len(f.mm)))
	if hi <= lo {
		return nil
	}
	if err := syscall.Madvise(f.mm[lo:hi], syscall.MADV_DONTNEED); err != nil {
		return fmt.Errorf("safetensors %s: madvise %s: %w", f.Path, name, err)
	}
	return nil
}

// DropPages drops from resident memory the pages lying wholly inside b, a
// part of a Data slice that has been copied (madvise MADV_DONTNEED; the
// bytes read back from the file if touched again). b must be memory of a
// mapped file: on other memory it would zero the pages.
func DropPages(b []byte) error {
	page := uintptr(os.Getpagesize())
	if len(b) == 0 {
		return nil
	}
	start := uintptr(unsafe.Pointer(&b[0]))
	lo := (start + page - 1) / page * page
	hi := (start + uintptr(len(b))) / page * page
	if hi <= lo {
		return nil
	}
	return syscall.Madvise(b[lo-start:hi-start], syscall.MADV_DONTNEED)
}

// Close unmaps the file; Data slices become invalid.
func (f *File) Close() error {
	if f.mm == nil {
		return nil
	}
	err := syscall.Munmap(f.mm)
	f.mm = nil
	if err != nil {
		return fmt.Errorf("safetensors %s: munmap: %w", f.Path, err)
	}
	return nil
}

// Header builds the JSON header for tensors laid out in the given order, with
// sorted keys and spaces padding it to a multiple of 8 bytes. It returns the
// header and the tensors with their offsets filled in.
func Header(tensors []Info, metadata map[string]string) ([]byte, []Info, error) {
	out := make([]Info, len(tensors))
	entries := make(map[string]any, len(tensors)+1)
	off := int64(0)
	for i, t := range tensors {
		if t.DType.Size() == 0 {
			return nil, nil, fmt.Errorf("tensor %q: unsupported dtype %q", t.Name, t.DType)
		}
		if t.Name == "__metadata__" || t.Name == "" {
			return nil, nil, fmt.Errorf("tensor name %q is reserved", t.Name)
		}
		if _, dup := entries[t.Name]; dup {
			return nil, nil, fmt.Errorf("tensor %q listed twice", t.Name)
		}
		shape := t.Shape
		if shape == nil {
			shape = []int64{}
		}
		t.Begin, t.End = off, off+t.Bytes()
		off = t.End
		out[i] = t
		entries[t.Name] = headerEntry{DType: t.DType, Shape: shape, DataOffsets: []int64{t.Begin, t.End}}
	}
	if len(metadata) > 0 {
		entries["__metadata__"] = metadata
	}
	hdr, err := json.Marshal(entries) // encoding/json sorts map keys
	if err != nil {
		return nil, nil, err
	}
	for len(hdr)%8 != 0 {
		hdr = append(hdr, ' ')
	}
	return hdr, out, nil
}

// Fetch returns the bytes of tensor t; Write calls it once per tensor, in
// order, and does not keep the slice.
type Fetch func(t Info) ([]byte, error)

// Write writes tensors (in the given order) to path, fetching each one's bytes
// as it goes. The file appears atomically.
func Write(path string, tensors []Info, metadata map[string]string, fetch Fetch) (err error) {
	hdr, laid, err := Header(tensors, metadata)
	if err != nil {
		return fmt.Errorf("safetensors %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("safetensors %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	w := bufio.NewWriterSize(tmp, 1<<20)
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(hdr)))
	w.Write(n[:])
	w.Write(hdr)
	for _, t := range laid {
		b, err := fetch(t)
		if err != nil {
			return fmt.Errorf("safetensors %s: tensor %q: %w", path, t.Name, err)
		}
		if int64(len(b)) != t.End-t.Begin {
			return fmt.Errorf("safetensors %s: tensor %q: got %d bytes, shape %v of %s needs %d", path, t.Name, len(b), t.Shape, t.DType, t.End-t.Begin)
		}
		if _, err := w.Write(b); err != nil {
			return fmt.Errorf("safetensors %s: %w", path, err)
		}
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("safetensors %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("safetensors %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("safetensors %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("safetensors %s: %w", path, err)
	}
	return nil
}
