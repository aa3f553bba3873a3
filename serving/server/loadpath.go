package server

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// resolveRoot is the load root, absolute with its symlinks resolved; it
// must be an existing directory.
func resolveRoot(root string) (string, error) {
	if root == "" {
		return "", errors.New("serve: runtime loads need a load root (--load-root): the one directory they may read from")
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return "", fmt.Errorf("serve: load root %s: %w", root, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("serve: load root %s: %w", root, err)
	}
	if st, err := os.Stat(real); err != nil || !st.IsDir() {
		return "", fmt.Errorf("serve: load root %s is not a directory", root)
	}
	return real, nil
}

// Metadata files a load reads, with the most bytes each may hold; the
// weights (*.safetensors) are mapped, not read, and need only be regular
// files.
var loadFiles = map[string]int64{
	"config.json":                  1 << 20,
	"generation_config.json":       1 << 20,
	"adapter_config.json":          1 << 20,
	"model.safetensors.index.json": 16 << 20,
	"tokenizer.json":               64 << 20,
	"tokenizer_config.json":        16 << 20,
}

// within reports whether path lies under root (both cleaned and absolute).
func within(root, path string) bool {
	return path == root || strings.HasPrefix(path, root+string(filepath.Separator))
}

// loadPath resolves a runtime load's path: a relative one is taken from
// the load root; the result, symlinks resolved, must be a directory under
// the root. Every file of it a load reads must also resolve under the root
// and be a regular file (never a FIFO or a device, which a read would block
// on or never finish), and a metadata file within its size (loadFiles), so
// that the load neither blocks nor reads without end. The errors never
// tell whether a path outside the root exists, and never show a file's
// bytes.
func (s *server) loadPath(param, path string) (string, error) {
	outside := badRequest(param, "%s %q is not under the load root %s", param, path, s.root)
	p := path
	if !filepath.IsAbs(p) {
		p = filepath.Join(s.root, p)
	}
	p = filepath.Clean(p)
	if !within(s.root, p) {
		return "", outside
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", badRequest(param, "%s %q: no such directory under the load root", param, path)
	}
	if !within(s.root, real) {
		return "", outside
	}
	if st, err := os.Stat(real); err != nil || !st.IsDir() {
		return "", badRequest(param, "%s %q is not a directory", param, path)
	}
	entries, err := os.ReadDir(real)
	if err != nil {
		return "", badRequest(param, "%s %q cannot be listed", param, path)
	}
	for _, ent := range entries {
		name := ent.Name()
		limit, meta := loadFiles[name]
		if !meta && !strings.HasSuffix(name, ".safetensors") {
			continue
		}
		if err := checkFile(s.root, filepath.Join(real, name), limit, meta); err != nil {
			return "", badRequest(param, "%s %q: %s: %v", param, path, name, err)
		}
	}
	return real, nil
}

func checkFile(root, path string, limit int64, meta bool) error {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return errors.New("cannot be resolved")
	}
	if !within(root, real) {
		return errors.New("links outside the load root")
	}
	st, err := os.Stat(real)
	if err != nil {
		return errors.New("cannot be read")
	}
	if st.Mode()&fs.ModeType != 0 {
		return fmt.Errorf("is not a regular file (%s)", st.Mode().Type())
	}
	if meta && st.Size() > limit {
		return fmt.Errorf("is %d bytes, over the %d-byte limit", st.Size(), limit)
	}
	return nil
}

// contentRE matches what Go's JSON errors quote of a file.
var contentRE = regexp.MustCompile(`invalid character '(?:[^'\\]|\\.){1,8}'`)

// sanitize drops the bytes of a file that a load error quotes.
func sanitize(err error) string {
	return contentRE.ReplaceAllString(err.Error(), "invalid character")
}
