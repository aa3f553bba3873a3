package safetensors

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
)

// The file names HF uses in a checkpoint directory.
const (
	SingleFile = "model.safetensors"
	IndexFile  = "model.safetensors.index.json"
)

// Index is model.safetensors.index.json.
type Index struct {
	Metadata  map[string]any    `json:"metadata"`
	WeightMap map[string]string `json:"weight_map"`
}

// Checkpoint is the safetensors part of an HF checkpoint directory: one
// model.safetensors, or the shards an index lists.
type Checkpoint struct {
	Dir   string
	files []*File
	where map[string]*File
	names []string
}

// OpenDir opens dir/model.safetensors.index.json and its shards when the index
// exists, else dir/model.safetensors. It checks that the index and the shards
// agree: every indexed tensor is in its shard, and no tensor is in two shards.
func OpenDir(dir string) (*Checkpoint, error) {
	c := &Checkpoint{Dir: dir, where: map[string]*File{}}
	idxPath := filepath.Join(dir, IndexFile)
	raw, err := os.ReadFile(idxPath)
	switch {
	case err == nil:
		if err := c.openSharded(idxPath, raw); err != nil {
			c.Close()
			return nil, err
		}
	case errors.Is(err, os.ErrNotExist):
		single := filepath.Join(dir, SingleFile)
		if _, err := os.Stat(single); errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("checkpoint %s: neither %s nor %s exists", dir, SingleFile, IndexFile)
		}
		f, err := Open(single)
		if err != nil {
			return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
		}
		c.files = []*File{f}
		for _, n := range f.Names() {
			c.where[n] = f
		}
	default:
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	for n := range c.where {
		c.names = append(c.names, n)
	}
	sort.Strings(c.names)
	return c, nil
}

func (c *Checkpoint) openSharded(idxPath string, raw []byte) error {
	var idx Index
	if err := json.Unmarshal(raw, &idx); err != nil {
		return fmt.Errorf("%s: %w", idxPath, err)
	}
	if len(idx.WeightMap) == 0 {
		return fmt.Errorf("%s: empty weight_map", idxPath)
	}
	shards := map[string]*File{}
	var shardNames []string
	for _, s := range idx.WeightMap {
		if _, ok := shards[s]; !ok {
			shards[s] = nil
			shardNames = append(shardNames, s)
		}
	}
	sort.Strings(shardNames)
	for _, s := range shardNames {
		if filepath.Base(s) != s {
			return fmt.Errorf("%s: shard name %q must be a file in the checkpoint directory", idxPath, s)
		}
		f, err := Open(filepath.Join(c.Dir, s))
		if err != nil {
			return fmt.Errorf("%s lists shard %s: %w", idxPath, s, err)
		}
		shards[s] = f
		c.files = append(c.files, f)
	}
	var problems []error
	for name, s := range idx.WeightMap {
		if _, ok := shards[s].Info(name); !ok {
			problems = append(problems, fmt.Errorf("%s maps %q to %s, which lacks it", idxPath, name, s))
			continue
		}
		c.where[name] = shards[s]
	}
	for _, f := range c.files {
		for _, n := range f.Names() {
			if owner, ok := c.where[n]; ok && owner != f {
				problems = append(problems, fmt.Errorf("tensor %q is in both %s and %s", n, owner.Path, f.Path))
			} else if !ok {
				problems = append(problems, fmt.Errorf("%s holds %q, which %s does not list", f.Path, n, idxPath))
			}
		}
	}
	sort.Slice(problems, func(i, j int) bool { return problems[i].Error() < problems[j].Error() })
	return errors.Join(problems...)
}

// Names lists every tensor, sorted.
func (c *Checkpoint) Names() []string { return c.names }

// Info describes a tensor; ok is false when no shard has it.
func (c *Checkpoint) Info(name string) (Info, bool) {
	f, ok := c.where[name]
	if !ok {
		return Info{}, false
	}
	return f.Info(name)
}

// Data is a tensor's bytes, valid until Close.
func (c *Checkpoint) Data(name string) ([]byte, error) {
	f, ok := c.where[name]
	if !ok {
		return nil, fmt.Errorf("checkpoint %s: no tensor %q", c.Dir, name)
	}
	return f.Data(name)
}

// Release drops a tensor's pages from resident memory; see File.Release.
func (c *Checkpoint) Release(name string) error {
	if f, ok := c.where[name]; ok {
		return f.Release(name)
	}
	return nil
}

// File is the path of the file holding name ("" when none does).
func (c *Checkpoint) File(name string) string {
	if f, ok := c.where[name]; ok {
		return f.Path
	}
	return ""
}

// Close unmaps every shard.
func (c *Checkpoint) Close() error {
	var errs []error
	for _, f := range c.files {
		errs = append(errs, f.Close())
	}
	c.files = nil
	return errors.Join(errs...)
}

// WriteDir writes tensors (in order) into dir as HF does: one
// model.safetensors when they total at most maxShardBytes (or maxShardBytes
// <= 0), else model-0000i-of-0000n.safetensors shards of at most maxShardBytes
// each (a larger tensor gets a shard of its own) plus the index. Weight files
// of an earlier save in dir that the new one does not use (a stale index
// would win over a new model.safetensors) are removed once the new files are
// in place; until then dir holds the old checkpoint intact.
func WriteDir(dir string, tensors []Info, metadata map[string]string, maxShardBytes int64, fetch Fetch) error {
	var total int64
	for _, t := range tensors {
		total += t.Bytes()
	}
	if maxShardBytes <= 0 || total <= maxShardBytes {
		if err := Write(filepath.Join(dir, SingleFile), tensors, metadata, fetch); err != nil {
			return err
		}
		return removeStale(dir, map[string]bool{SingleFile: true})
	}
	var shards [][]Info
	var cur []Info
	var size int64
	for _, t := range tensors {
		if len(cur) > 0 && size+t.Bytes() > maxShardBytes {
			shards = append(shards, cur)
			cur, size = nil, 0
		}
		cur = append(cur, t)
		size += t.Bytes()
	}
	shards = append(shards, cur)
	idx := Index{Metadata: map[string]any{"total_size": total}, WeightMap: map[string]string{}}
	keep := map[string]bool{IndexFile: true}
	for i, sh := range shards {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(shards))
		if err := Write(filepath.Join(dir, name), sh, metadata, fetch); err != nil {
			return err
		}
		keep[name] = true
		for _, t := range sh {
			idx.WeightMap[t.Name] = name
		}
	}
	b, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return err
	}
	p := filepath.Join(dir, IndexFile)
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	return removeStale(dir, keep)
}

// removeStale deletes HF weight files in dir (model.safetensors, shards, the
// index) that are not in keep.
func removeStale(dir string, keep map[string]bool) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	for _, e := range ents {
		n := e.Name()
		if keep[n] || !(n == SingleFile || n == IndexFile || shardName.MatchString(n)) {
			continue
		}
		if err := os.Remove(filepath.Join(dir, n)); err != nil {
			return fmt.Errorf("checkpoint %s: remove stale %s: %w", dir, n, err)
		}
	}
	return nil
}

var shardName = regexp.MustCompile(`^model-\d+-of-\d+\.safetensors$`)
