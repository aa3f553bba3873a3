package presets

import (
	"bytes"
	"fmt"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// With returns preset name's config file with the given full keys
// ("roles.judge.prompt_files") set to the given values, each added or
// replaced where the preset's YAML holds it, its comments kept; head, when
// not empty, becomes a comment above the file's own.
func With(name, head string, set map[string]any) ([]byte, error) {
	src, err := YAML(name)
	if err != nil {
		return nil, err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, fmt.Errorf("preset %s: %w", name, err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("preset %s: not a YAML mapping", name)
	}
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		var val yaml.Node
		if err := val.Encode(set[k]); err != nil {
			return nil, fmt.Errorf("preset %s: key %s: %w", name, k, err)
		}
		if err := setPath(doc.Content[0], strings.Split(k, "."), &val); err != nil {
			return nil, fmt.Errorf("preset %s: key %s: %w", name, k, err)
		}
	}
	if head != "" {
		lines := strings.Split(strings.TrimRight(head, "\n"), "\n")
		for i, l := range lines {
			lines[i] = strings.TrimRight("# "+l, " ")
		}
		doc.HeadComment = strings.Join(lines, "\n") + "\n" + doc.HeadComment
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, fmt.Errorf("preset %s: %w", name, err)
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// setPath sets path below the mapping m to val, adding mappings as needed.
func setPath(m *yaml.Node, path []string, val *yaml.Node) error {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value != path[0] {
			continue
		}
		if len(path) == 1 {
			m.Content[i+1] = val
			return nil
		}
		next := m.Content[i+1]
		if next.Kind != yaml.MappingNode {
			if next.Tag != "!!null" {
				return fmt.Errorf("%s holds a %s, not a mapping", path[0], next.Tag)
			}
			*next = yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", HeadComment: next.HeadComment, LineComment: next.LineComment}
		}
		return setPath(next, path[1:], val)
	}
	key := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: path[0]}
	if len(path) == 1 {
		m.Content = append(m.Content, key, val)
		return nil
	}
	child := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	m.Content = append(m.Content, key, child)
	return setPath(child, path[1:], val)
}
