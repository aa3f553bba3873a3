// Package sttest edits safetensors files in place for tests that damage a
// checkpoint on purpose: a missing tensor, a wrong shape, NaN weights. It is
// apart from testutil because the safetensors package's own tests use that.
package sttest

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/evolm/evolm/model/safetensors"
)

// Edit rewrites the safetensors file at path, keeping its metadata. edit gets
// the tensors' infos in file order and a copy of their bytes by name, may
// change both, and returns the infos to write; a tensor whose bytes are
// missing or of another size than its info wants is written as zeros.
func Edit(t testing.TB, path string, edit func(infos []safetensors.Info, data map[string][]byte) []safetensors.Info) {
	t.Helper()
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	var infos []safetensors.Info
	data := map[string][]byte{}
	for _, n := range f.Names() {
		i, _ := f.Info(n)
		b, err := f.Data(n)
		if err != nil {
			f.Close()
			t.Fatal(err)
		}
		data[n] = append([]byte(nil), b...)
		infos = append(infos, i)
	}
	meta := f.Metadata
	f.Close()
	infos = edit(infos, data)
	err = safetensors.Write(path, infos, meta, func(i safetensors.Info) ([]byte, error) {
		if b, ok := data[i.Name]; ok && int64(len(b)) == i.Bytes() {
			return b, nil
		}
		return make([]byte, i.Bytes()), nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// SetF32 overwrites the first n elements of the F32 tensor name in the
// safetensors file at path with v; it fails the test when there is no such
// tensor or it has fewer elements.
func SetF32(t testing.TB, path, name string, v float32, n int) {
	t.Helper()
	Edit(t, path, func(infos []safetensors.Info, data map[string][]byte) []safetensors.Info {
		t.Helper()
		for _, i := range infos {
			if i.Name == name && i.DType == safetensors.F32 && i.Numel() >= int64(n) {
				PutF32(data[name], v, n)
				return infos
			}
		}
		t.Fatalf("%s has no F32 tensor %s of %d or more elements", path, name, n)
		return nil
	})
}

// PutF32 writes v, little-endian, over the first n float32 elements of b.
func PutF32(b []byte, v float32, n int) {
	for k := 0; k < n; k++ {
		binary.LittleEndian.PutUint32(b[4*k:], math.Float32bits(v))
	}
}
