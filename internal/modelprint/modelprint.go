// Package modelprint fingerprints a model directory (an HF checkpoint: its
// config, tokenizer and weight files) cheaply enough to do at every start
// and resume of a run, and strongly enough to notice replaced weights.
//
// Each regular file of the directory (not its subdirectories) gets a print:
//
//   - text files (.json, .txt, .model, .jinja, .py: config, tokenizer,
//     safetensors index, generation config) the sha256 of their bytes;
//   - every other file (the weights: .safetensors, .bin, .pt, …) the sha256
//     of its size, its first and last 64 KiB (a safetensors header: every
//     tensor's name, dtype, shape and offsets) and 64 blocks of 4 KiB spread
//     evenly through it. Retrained, fine-tuned or re-initialised weights
//     differ in every block; reading about 0.5 MiB a file keeps a resume
//     of a 16 GB model instant.
//
// It does not rely on modification times, which copies may keep.
package modelprint

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Method names how a Print was made; a Print of another method is not
// compared.
const Method = "sha256 of text files; weights: sha256 of size, first and last 64KiB and 64 x 4KiB blocks"

const (
	edgeBytes  = 64 << 10
	blocks     = 64
	blockBytes = 4 << 10
)

// Print is a directory's fingerprint: file name → its print.
type Print map[string]string

var textExt = []string{".json", ".txt", ".model", ".jinja", ".py"}

// Dir fingerprints the regular files directly in dir.
func Dir(dir string) (Print, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("fingerprint %s: %w", dir, err)
	}
	out := Print{}
	for _, e := range ents {
		if !e.Type().IsRegular() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		p := filepath.Join(dir, e.Name())
		var fp string
		if slices.Contains(textExt, strings.ToLower(filepath.Ext(e.Name()))) {
			fp, err = whole(p)
		} else {
			fp, err = sampled(p)
		}
		if err != nil {
			return nil, fmt.Errorf("fingerprint %s: %w", p, err)
		}
		out[e.Name()] = fp
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("fingerprint %s: no files", dir)
	}
	return out, nil
}

func whole(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

func sampled(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	size := st.Size()
	h := sha256.New()
	binary.Write(h, binary.LittleEndian, size)
	read := func(off, n int64) error {
		n = min(n, size-off)
		if n <= 0 {
			return nil
		}
		buf := make([]byte, n)
		if _, err := f.ReadAt(buf, off); err != nil && err != io.EOF {
			return err
		}
		h.Write(buf)
		return nil
	}
	if err := read(0, edgeBytes); err != nil {
		return "", err
	}
	for i := range int64(blocks) {
		if err := read(i*size/blocks, blockBytes); err != nil {
			return "", err
		}
	}
	if err := read(max(size-edgeBytes, 0), edgeBytes); err != nil {
		return "", err
	}
	return fmt.Sprintf("size=%d sampled-sha256:%s", size, hex.EncodeToString(h.Sum(nil))), nil
}

// Diff lists how now differs from was, one line per file that changed,
// appeared or went away; none when they are the same.
func Diff(was, now Print) []string {
	var out []string
	for _, name := range sortedKeys(was, now) {
		w, inW := was[name]
		n, inN := now[name]
		switch {
		case !inN:
			out = append(out, name+": gone")
		case !inW:
			out = append(out, name+": added")
		case w != n:
			out = append(out, fmt.Sprintf("%s: %s, was %s", name, short(n), short(w)))
		}
	}
	return out
}

func short(fp string) string {
	if i := strings.LastIndexByte(fp, ':'); i >= 0 && len(fp)-i > 13 {
		return fp[:i+13] + "…"
	}
	return fp
}

func sortedKeys(a, b Print) []string {
	var out []string
	for k := range a {
		out = append(out, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}
