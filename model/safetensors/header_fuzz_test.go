package safetensors

import (
	"encoding/binary"
	"sort"
	"testing"
)

// FuzzParseHeader parses fuzzed safetensors headers over a data buffer of
// fuzzed length: no panic, and a header that parses describes tensors that
// lie inside the buffer, have the bytes their dtype and shape need, and do
// not overlap.
func FuzzParseHeader(f *testing.F) {
	f.Add(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"__metadata__":{"format":"pt"}}`, uint16(8), uint64(0))
	f.Add(`{"a":{"dtype":"BF16","shape":[2,1],"data_offsets":[0,4]},"b":{"dtype":"I64","shape":[],"data_offsets":[4,12]}}`, uint16(12), uint64(0))
	f.Add(`{"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},"b":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}}`, uint16(0), uint64(0))
	f.Add(`{"w":{"dtype":"F64","shape":[4611686018427387904,4],"data_offsets":[0,8]}}`, uint16(8), uint64(0))
	f.Add(`{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, uint16(1), uint64(1<<40))
	f.Add(`{"__metadata__":{"a":1}}`, uint16(0), uint64(0))
	f.Fuzz(func(t *testing.T, header string, dataLen uint16, lenDelta uint64) {
		mm := make([]byte, 8+len(header)+int(dataLen))
		binary.LittleEndian.PutUint64(mm, uint64(len(header))+lenDelta)
		copy(mm[8:], header)
		file := &File{Path: "fuzz.safetensors", mm: mm}
		if err := file.parse(); err != nil {
			return
		}
		var infos []Info
		for _, name := range file.Names() {
			info, ok := file.Info(name)
			if !ok {
				t.Fatalf("name %q listed without info", name)
			}
			b, err := file.Data(name)
			if err != nil {
				t.Fatal(err)
			}
			if int64(len(b)) != info.Bytes() {
				t.Fatalf("tensor %q: %d bytes, shape %v of %s needs %d", name, len(b), info.Shape, info.DType, info.Bytes())
			}
			if info.End > int64(len(mm))-file.dataOff {
				t.Fatalf("tensor %q ends at %d past the data buffer", name, info.End)
			}
			infos = append(infos, info)
		}
		sort.Slice(infos, func(i, j int) bool { return infos[i].Begin < infos[j].Begin })
		for i := 1; i < len(infos); i++ {
			a, b := infos[i-1], infos[i]
			if a.End > b.Begin && b.End > b.Begin && a.End > a.Begin {
				t.Fatalf("tensors %q [%d, %d) and %q [%d, %d) overlap", a.Name, a.Begin, a.End, b.Name, b.Begin, b.End)
			}
		}
	})
}
