package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/evolm/evolm/internal/testutil"
)

var updateFidelity = flag.Bool("update", false, "rewrite the values of docs/fidelity.md's preset column from `config print`")

// fidelityKey is a `full.key: value` item of the table's preset column.
var fidelityKey = regexp.MustCompile("`((?:roles|stages|rubric)\\.[a-z0-9_.]+): ([^`]*)`")

// fidelityRequired are the settings the table must name: those the review
// of the paper preset found different.
var fidelityRequired = []string{
	"rubric.format", "rubric.judge_reply", "stages.run.non_stop_penalty", "stages.run.active_sampling",
	"stages.run.rubric_active_sampling", "stages.run.replay_fill", "stages.run.temporal_age", "stages.run.prompt_order",
	"stages.run.backtranslate_source", "stages.run.unusable_rubric", "stages.run.rubric_reward", "stages.run.alpha",
	"roles.rubric_generator.prompt_variant", "roles.judge.prompt_variant", "roles.policy.prompt_variant",
}

// TestFidelityTable: every value docs/fidelity.md gives for the paper
// preset is what `evolm --config stages/presets/paper.yaml config print`
// prints. With -update, the values are rewritten from it.
func TestFidelityTable(t *testing.T) {
	root := testutil.Root(t)
	printed, err := run(t, "--config", filepath.Join(root, "stages", "presets", "paper.yaml"), "config", "print")
	if err != nil {
		t.Fatalf("config print: %v\n%s", err, printed)
	}
	var tree map[string]any
	if err := yaml.Unmarshal([]byte(printed), &tree); err != nil {
		t.Fatal(err)
	}
	values := map[string]any{}
	flattenInto(values, "", tree)

	path := filepath.Join(root, "docs", "fidelity.md")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	seen := map[string]bool{}
	presetCol := -1
	for i, line := range lines {
		cells := strings.Split(line, "|")
		if !strings.HasPrefix(line, "|") || len(cells) < 5 {
			presetCol = -1
			continue
		}
		if presetCol < 0 {
			for c, cell := range cells {
				if strings.TrimSpace(cell) == "`paper` preset" {
					presetCol = c
				}
			}
			continue
		}
		if presetCol >= len(cells) {
			continue
		}
		cells[presetCol] = fidelityKey.ReplaceAllStringFunc(cells[presetCol], func(item string) string {
			m := fidelityKey.FindStringSubmatch(item)
			key, doc := m[1], m[2]
			seen[key] = true
			v, ok := values[key]
			if !ok {
				t.Errorf("docs/fidelity.md line %d names %s, which `config print` of the paper preset does not print", i+1, key)
				return item
			}
			want := scalarText(v)
			if doc != want && !*updateFidelity {
				t.Errorf("docs/fidelity.md line %d: %s is %q in the table, %q in `config print` (go test ./cmd/evolm -run TestFidelityTable -update rewrites it)", i+1, key, doc, want)
			}
			return "`" + key + ": " + want + "`"
		})
		lines[i] = strings.Join(cells, "|")
	}
	for _, k := range fidelityRequired {
		if !seen[k] {
			t.Errorf("docs/fidelity.md's preset column does not name %s", k)
		}
	}
	if *updateFidelity {
		if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func flattenInto(out map[string]any, prefix string, m map[string]any) {
	for k, v := range m {
		if sub, ok := v.(map[string]any); ok {
			flattenInto(out, prefix+k+".", sub)
			continue
		}
		out[prefix+k] = v
	}
}

// scalarText is a value as the table writes it: as YAML writes it.
func scalarText(v any) string {
	b, err := yaml.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return strings.TrimSpace(string(b))
}
