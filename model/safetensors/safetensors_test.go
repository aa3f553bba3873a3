package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/internal/testutil"
)

func f32bytes(xs ...float32) []byte {
	b := make([]byte, 4*len(xs))
	for i, x := range xs {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

type memTensor struct {
	info Info
	data []byte
}

func fetchFrom(ts []memTensor) Fetch {
	m := map[string][]byte{}
	for _, t := range ts {
		m[t.info.Name] = t.data
	}
	return func(i Info) ([]byte, error) { return m[i.Name], nil }
}

func infos(ts []memTensor) []Info {
	var out []Info
	for _, t := range ts {
		out = append(out, t.info)
	}
	return out
}

var sample = []memTensor{
	{Info{Name: "b.weight", DType: F32, Shape: []int64{2, 2}}, f32bytes(1, 2, 3, 4)},
	{Info{Name: "a.bias", DType: BF16, Shape: []int64{3}}, []byte{0x80, 0x3f, 0x00, 0x40, 0x40, 0x40}},
	{Info{Name: "ids", DType: I64, Shape: []int64{1}}, []byte{7, 0, 0, 0, 0, 0, 0, 0}},
	{Info{Name: "empty", DType: F16, Shape: []int64{0, 4}}, nil},
	{Info{Name: "scalar", DType: F32, Shape: []int64{}}, f32bytes(2.5)},
}

func TestRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.safetensors")
	if err := Write(path, infos(sample), map[string]string{"format": "pt"}, fetchFrom(sample)); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(path)
	if n := binary.LittleEndian.Uint64(raw); n%8 != 0 {
		t.Errorf("header length %d is not 8-byte aligned", n)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if diff := cmp.Diff([]string{"a.bias", "b.weight", "empty", "ids", "scalar"}, f.Names()); diff != "" {
		t.Errorf("names (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"format": "pt"}, f.Metadata); diff != "" {
		t.Errorf("metadata (-want +got):\n%s", diff)
	}
	for _, want := range sample {
		got, err := f.Data(want.info.Name)
		if err != nil {
			t.Fatal(err)
		}
		if len(want.data) == 0 && len(got) == 0 {
			continue
		}
		if diff := cmp.Diff(want.data, got); diff != "" {
			t.Errorf("%s bytes (-want +got):\n%s", want.info.Name, diff)
		}
		info, _ := f.Info(want.info.Name)
		if diff := cmp.Diff(want.info.Shape, info.Shape); diff != "" {
			t.Errorf("%s shape (-want +got):\n%s", want.info.Name, diff)
		}
	}
}

// rawFile writes an 8-byte length, header and data as given, for corrupt files.
func rawFile(t *testing.T, n uint64, header string, data []byte) string {
	t.Helper()
	var b []byte
	b = binary.LittleEndian.AppendUint64(b, n)
	b = append(b, header...)
	b = append(b, data...)
	p := filepath.Join(t.TempDir(), "bad.safetensors")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCorruptHeaders(t *testing.T) {
	ok := `{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`
	tests := []struct {
		name   string
		n      uint64
		header string
		data   []byte
		want   string
	}{
		{"too short", 0, "", nil, "too short"},
		{"truncated header", uint64(len(ok)) + 50, ok, make([]byte, 8), "runs past the end"},
		{"huge header length", 1 << 40, ok, nil, "exceeds"},
		{"bad json", 0, `{"w": {"dty`, nil, "not a JSON object"},
		{"not an object", 0, `[1] `, nil, "not a JSON object"},
		{"truncated data", uint64(len(ok)), ok, make([]byte, 4), `tensor "w": data_offsets [0, 8] beyond the 4-byte data buffer`},
		{"offsets out of range", 0, `{"w":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}`, make([]byte, 8), "beyond"},
		{"unknown dtype", 0, `{"w":{"dtype":"F8X","shape":[2],"data_offsets":[0,8]}} `, make([]byte, 8), `unsupported dtype "F8X"`},
		{"size mismatch", 0, `{"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, make([]byte, 12), "needs 12"},
		{"reversed offsets", 0, `{"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}}`, make([]byte, 8), "bad data_offsets"},
		{"negative dim", 0, `{"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}`, make([]byte, 8), "negative dimension"},
		{"missing offsets", 0, `{"w":{"dtype":"F32","shape":[2]}}   `, make([]byte, 8), "data_offsets has 0 values"},
		{"unknown field", 0, `{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}}   `, make([]byte, 8), "bad header entry"},
		{"overlap", 0, `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, make([]byte, 12), "overlap"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var p string
			if tc.name == "too short" {
				p = filepath.Join(t.TempDir(), "short.safetensors")
				os.WriteFile(p, []byte{1, 2, 3}, 0o644)
			} else {
				if tc.n == 0 {
					tc.n = uint64(len(tc.header))
				}
				p = rawFile(t, tc.n, tc.header, tc.data)
			}
			f, err := Open(p)
			if err == nil {
				f.Close()
				t.Fatalf("Open succeeded, want an error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), p) {
				t.Errorf("error %q: want it to contain %q and the file name", err, tc.want)
			}
		})
	}
}

func TestShardedRoundTrip(t *testing.T) {
	dir := t.TempDir()
	// 16+6+8+0+4 bytes; a 12-byte limit forces several shards.
	if err := WriteDir(dir, infos(sample), map[string]string{"format": "pt"}, 12, fetchFrom(sample)); err != nil {
		t.Fatal(err)
	}
	var idx Index
	raw, err := os.ReadFile(filepath.Join(dir, IndexFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &idx); err != nil {
		t.Fatal(err)
	}
	if got := idx.Metadata["total_size"]; got != float64(34) {
		t.Errorf("total_size = %v, want 34", got)
	}
	c, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if len(c.files) < 3 {
		t.Errorf("%d shards, want at least 3", len(c.files))
	}
	for _, want := range sample {
		got, err := c.Data(want.info.Name)
		if err != nil {
			t.Fatal(err)
		}
		if len(want.data)+len(got) > 0 {
			if diff := cmp.Diff(want.data, got); diff != "" {
				t.Errorf("%s (-want +got):\n%s", want.info.Name, diff)
			}
		}
	}

	// An index naming a tensor its shard lacks is an error naming both.
	idx.WeightMap["ghost"] = idx.WeightMap["ids"]
	b, _ := json.Marshal(idx)
	os.WriteFile(filepath.Join(dir, IndexFile), b, 0o644)
	if _, err := OpenDir(dir); err == nil || !strings.Contains(err.Error(), `"ghost"`) {
		t.Errorf("OpenDir with a bad index: err = %v, want one naming \"ghost\"", err)
	}
}

func TestOpenDirMissing(t *testing.T) {
	_, err := OpenDir(t.TempDir())
	if err == nil || !strings.Contains(err.Error(), SingleFile) {
		t.Errorf("err = %v, want one naming %s", err, SingleFile)
	}
}

// TestPythonInterop: files the reference safetensors library writes read back
// here, and files written here load there, with equal values.
func TestPythonInterop(t *testing.T) {
	dir := t.TempDir()
	ours := filepath.Join(dir, "ours.safetensors")
	if err := Write(ours, infos(sample), nil, fetchFrom(sample)); err != nil {
		t.Fatal(err)
	}
	theirs := filepath.Join(dir, "theirs.safetensors")
	out := testutil.RunPython(t, "hf_safetensors_interop.py", ours, theirs)
	var got struct {
		Ours   map[string][]float64 `json:"ours"`
		Theirs map[string][]float64 `json:"theirs"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	wantOurs := map[string][]float64{"b.weight": {1, 2, 3, 4}, "a.bias": {1, 2, 3}, "ids": {7}, "empty": {}, "scalar": {2.5}}
	if diff := cmp.Diff(wantOurs, got.Ours); diff != "" {
		t.Errorf("python read of our file (-want +got):\n%s", diff)
	}
	f, err := Open(theirs)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for name, want := range got.Theirs {
		info, _ := f.Info(name)
		data, err := f.Data(name)
		if err != nil {
			t.Fatal(err)
		}
		vals := decode(t, info.DType, data)
		if diff := cmp.Diff(want, vals); diff != "" {
			t.Errorf("%s %s (-python +ours):\n%s", name, info.DType, diff)
		}
	}
}

func decode(t *testing.T, d DType, b []byte) []float64 {
	out := []float64{}
	for i := 0; i < len(b); i += int(d.Size()) {
		switch d {
		case F32:
			out = append(out, float64(math.Float32frombits(binary.LittleEndian.Uint32(b[i:]))))
		case BF16:
			out = append(out, float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[i:]))<<16)))
		case F64:
			out = append(out, math.Float64frombits(binary.LittleEndian.Uint64(b[i:])))
		case I64:
			out = append(out, float64(int64(binary.LittleEndian.Uint64(b[i:]))))
		case I32:
			out = append(out, float64(int32(binary.LittleEndian.Uint32(b[i:]))))
		case U8, Bool:
			out = append(out, float64(b[i]))
		default:
			t.Fatalf("decode: no decoder for %s", d)
		}
	}
	return out
}

// TestWriteDirReplacesStaleFiles: saving a small checkpoint over a sharded one
// (and back) leaves only the new files, so the old index cannot shadow them.
func TestWriteDirReplacesStaleFiles(t *testing.T) {
	dir := t.TempDir()
	list := func() []string {
		ents, _ := os.ReadDir(dir)
		var out []string
		for _, e := range ents {
			out = append(out, e.Name())
		}
		return out
	}
	os.WriteFile(filepath.Join(dir, "config.json"), []byte("{}"), 0o644)
	if err := WriteDir(dir, infos(sample), nil, 12, fetchFrom(sample)); err != nil {
		t.Fatal(err)
	}
	if err := WriteDir(dir, infos(sample), nil, 0, fetchFrom(sample)); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"config.json", SingleFile}, list()); diff != "" {
		t.Errorf("after single save (-want +got):\n%s", diff)
	}
	if err := WriteDir(dir, infos(sample), nil, 20, fetchFrom(sample)); err != nil {
		t.Fatal(err)
	}
	for _, n := range list() {
		if n == SingleFile {
			t.Errorf("stale %s left next to the shards", n)
		}
	}
	c, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

// TestReleaseDropsResidentPages: reading a tensor maps its pages into the
// process; Release drops them (the mapping's Rss in /proc/self/smaps falls
// by the tensor's size), and Data still returns the same bytes.
func TestReleaseDropsResidentPages(t *testing.T) {
	const n = 8 << 20 // bytes per tensor
	big := make([]byte, n)
	for i := range big {
		big[i] = byte(i * 7)
	}
	ts := []memTensor{
		{Info{Name: "a", DType: U8, Shape: []int64{n}}, big},
		{Info{Name: "b", DType: U8, Shape: []int64{n}}, big},
	}
	path := filepath.Join(t.TempDir(), "big.safetensors")
	if err := Write(path, infos(ts), nil, fetchFrom(ts)); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sum := 0
	for _, name := range []string{"a", "b"} {
		d, _ := f.Data(name)
		for _, c := range d { // fault every page in
			sum += int(c)
		}
	}
	before := mappingRss(t, f.mm)
	if err := f.Release("a"); err != nil {
		t.Fatal(err)
	}
	after := mappingRss(t, f.mm)
	if before-after < n-(64<<10) || after < n-(64<<10) {
		t.Errorf("mapping Rss %d KiB before Release(a), %d KiB after: want about %d KiB dropped, b's %d KiB kept",
			before>>10, after>>10, n>>10, n>>10)
	}
	t.Logf("mapping Rss: %d KiB before Release(a), %d KiB after", before>>10, after>>10)
	if d, _ := f.Data("a"); !bytes.Equal(big, d) {
		t.Error("a's bytes changed after Release")
	}
	if sum == 0 {
		t.Error("the tensors read as zeros")
	}
}

var mappingLine = regexp.MustCompile(`^[0-9a-f]+-[0-9a-f]+ `)

// mappingRss is the resident size of the mapping starting at mm[0], from
// /proc/self/smaps.
func mappingRss(t *testing.T, mm []byte) int {
	t.Helper()
	raw, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatalf("reading the mapping sizes: %v", err)
	}
	start := fmt.Sprintf("%x-", uintptr(unsafe.Pointer(&mm[0])))
	in := false
	for _, line := range strings.Split(string(raw), "\n") {
		if mappingLine.MatchString(line) {
			in = strings.HasPrefix(line, start)
			continue
		}
		if in && strings.HasPrefix(line, "Rss:") {
			var kb int
			if _, err := fmt.Sscanf(strings.TrimPrefix(line, "Rss:"), "%d kB", &kb); err != nil {
				t.Fatalf("smaps line %q: %v", line, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no mapping at %s in /proc/self/smaps", start)
	return 0
}
