package export_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/internal/testutil/synthrun"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/stages/export"
)

// A rerun of export with other settings replaces the export (it is derived
// from the run) instead of refusing with a hint about another --run; the
// layout --help describes is the one written.
func TestExportRerunReplaces(t *testing.T) {
	dir, _ := synthetic(t, synthrun.Options{Seed: 1, Steps: 4})
	paths := func() []string {
		t.Helper()
		r, err := pipeline.OpenRun(dir)
		if err != nil {
			t.Fatal(err)
		}
		m, err := r.Manifest(export.Name)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, s := range m.Shards {
			out = append(out, s.Path)
		}
		return out
	}
	if err := runExport(t, dir, nil); err != nil {
		t.Fatal(err)
	}
	all := paths()
	if err := runExport(t, dir, map[string]string{export.KeySteps: "0-1"}); err != nil {
		t.Fatalf("export with other steps: %v", err)
	}
	want := []string{"export_responses/part-00000.parquet", "export_responses/part-00001.parquet", "export_steps/part-00000.parquet"}
	if diff := cmp.Diff(want, paths()); diff != "" {
		t.Errorf("after --steps 0-1 (-want +got):\n%s", diff)
	}
	if err := runExport(t, dir, nil); err != nil {
		t.Fatalf("export with the first settings again: %v", err)
	}
	if diff := cmp.Diff(all, paths()); diff != "" {
		t.Errorf("after the default export again (-want +got):\n%s", diff)
	}
	spec, _ := pipeline.Lookup(export.Name)
	for _, p := range all {
		name := p[strings.LastIndex(p, "/")+1:]
		if strings.HasPrefix(p, export.StepsTable+"/") && !strings.Contains(spec.Description, "part-00000.parquet") {
			t.Errorf("--help does not describe %s", p)
		}
		if !strings.HasPrefix(p, export.StepsTable+"/") && !strings.Contains(spec.Description, "part-<step>.parquet") {
			t.Errorf("--help does not describe %s (%s)", p, name)
		}
	}
}
