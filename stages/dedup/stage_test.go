package dedup

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/datasets"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
)

func TestStageOnSample(t *testing.T) {
	set, err := datasets.Sample()
	if err != nil {
		t.Fatal(err)
	}
	run := t.TempDir()
	if err := runStage(t, run, map[string]string{KeyInput: samplePath(t), KeyShardRows: "100"}); err != nil {
		t.Fatal(err)
	}
	got := readPrompts(t, run)

	// Expected: every row that is not a planted duplicate, in input order.
	planted := map[int]bool{}
	for _, p := range set.Plants {
		planted[p.Row] = true
	}
	var want []string
	for i, r := range set.Rows {
		if !planted[i] {
			want = append(want, r.ID)
		}
	}
	var gotIDs []string
	seen := map[string]bool{}
	for _, p := range got {
		gotIDs = append(gotIDs, p.SourceID)
		if seen[p.PromptID] {
			t.Errorf("prompt_id %s twice in the output", p.PromptID)
		}
		seen[p.PromptID] = true
		if p.PromptID != PromptID(p.Prompt) || len(p.PromptID) != 32 {
			t.Errorf("row %s: prompt_id %q is not the content hash of its prompt", p.SourceID, p.PromptID)
		}
		if p.Dataset != SampleDataset || p.Category != datasets.CategoryOf(p.Source) {
			t.Errorf("row %s: dataset %q category %q", p.SourceID, p.Dataset, p.Category)
		}
		if len(p.Messages) != 1 || p.Messages[0].Role != "user" || p.Messages[0].Content != p.Prompt {
			t.Errorf("row %s: messages %+v", p.SourceID, p.Messages)
		}
	}
	if diff := cmp.Diff(want, gotIDs); diff != "" {
		t.Errorf("kept rows (-want +got):\n%s", diff)
	}

	// Shards: 298 input rows at 100 per shard → 3 prompts shards + the report,
	// all in the manifest with their checksums.
	run2, _ := pipeline.OpenRun(run)
	m, err := run2.Manifest(Name)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, s := range m.Shards {
		paths = append(paths, s.Path)
		fp, err := pipeline.Fingerprint(filepath.Join(run, filepath.FromSlash(s.Path)))
		if err != nil || fp != "sha256:"+s.SHA256 && fp != s.SHA256 {
			t.Errorf("shard %s: checksum %s, manifest %s (%v)", s.Path, fp, s.SHA256, err)
		}
	}
	slices.Sort(paths)
	wantPaths := []string{"dedup_report/part-00000.parquet", "prompts/part-00000.parquet", "prompts/part-00001.parquet", "prompts/part-00002.parquet"}
	if diff := cmp.Diff(wantPaths, paths); diff != "" {
		t.Errorf("manifest shards (-want +got):\n%s", diff)
	}

	// Report: one cluster per original with planted duplicates.
	rep := readReport(t, run)
	byKept := map[string]schemas.DedupCluster{}
	for _, c := range rep {
		byKept[c.KeptID] = c
	}
	wantClusters := map[int][]int{}
	for _, p := range set.Plants {
		wantClusters[p.Of] = append(wantClusters[p.Of], p.Row)
	}
	if len(rep) != len(wantClusters) {
		t.Errorf("report has %d clusters, want %d", len(rep), len(wantClusters))
	}
	for of, rows := range wantClusters {
		c, ok := byKept[PromptID(set.Rows[of].Prompt)]
		if !ok {
			t.Errorf("no cluster kept row %d %q", of, set.Rows[of].Prompt)
			continue
		}
		var want []string
		for _, r := range rows {
			want = append(want, PromptID(set.Rows[r].Prompt))
		}
		if diff := cmp.Diff(want, c.RemovedIDs, cmpSorted); diff != "" {
			t.Errorf("cluster of row %d removed ids (-want +got):\n%s", of, diff)
		}
		if c.Similarity <= 0 || c.Similarity > 1 {
			t.Errorf("cluster of row %d: similarity %g", of, c.Similarity)
		}
	}
}

var cmpSorted = cmp.Transformer("sorted", func(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
})

// TestStageResume checks that a second run over the same run directory
// skips every committed shard and leaves the output unchanged.
func TestStageResume(t *testing.T) {
	run := t.TempDir()
	vals := map[string]string{KeyInput: samplePath(t), KeyShardRows: "64"}
	if err := runStage(t, run, vals); err != nil {
		t.Fatal(err)
	}
	before := readPrompts(t, run)
	// Lose one shard's commit: remove it from disk; the rerun redoes only it.
	if err := os.Remove(filepath.Join(run, "prompts", "part-00002.parquet")); err != nil {
		t.Fatal(err)
	}
	stat := func() map[string]int64 {
		out := map[string]int64{}
		ents, _ := os.ReadDir(filepath.Join(run, "prompts"))
		for _, e := range ents {
			info, _ := e.Info()
			out[e.Name()] = info.ModTime().UnixNano()
		}
		return out
	}
	mt := stat()
	if err := runStage(t, run, vals); err != nil {
		t.Fatal(err)
	}
	after := readPrompts(t, run)
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("resumed output differs (-before +after):\n%s", diff)
	}
	for name, ts := range stat() {
		if old, ok := mt[name]; ok && old != ts {
			t.Errorf("committed shard %s was rewritten on resume", name)
		}
	}
}

func TestNewFromConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		vals map[string]any
		want string
	}{
		{map[string]any{}, "stages.dedup.input"},
		{map[string]any{KeyInput: []string{"x"}, KeyThreshold: 1.5}, "stages.dedup.threshold"},
		{map[string]any{KeyInput: []string{"x"}, KeyBands: 0}, "stages.dedup.bands"},
		{map[string]any{KeyInput: []string{"x"}, KeyShardRows: 0}, "stages.dedup.shard_rows"},
		{map[string]any{KeyInput: []string{"x"}, KeyNGram: 0}, "stages.dedup.ngram"},
	} {
		cfg, err := pipeline.StageConfig(Name, tc.vals)
		if err != nil {
			t.Fatal(err)
		}
		_, err = newDedupFromConfig(cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one naming %s", tc.vals, err, tc.want)
		}
	}
}

// TestStageJSONLMatchesParquet: the sample as JSONL (shards seek by skipping
// lines) gives the same prompts as the Parquet file.
func TestStageJSONLMatchesParquet(t *testing.T) {
	set, err := datasets.Sample()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	jsonl := filepath.Join(dir, "sample.jsonl")
	f, err := os.Create(jsonl)
	if err != nil {
		t.Fatal(err)
	}
	if err := datasets.WriteJSONL(f, set.Rows); err != nil {
		t.Fatal(err)
	}
	f.Close()
	runP, runJ := filepath.Join(dir, "p"), filepath.Join(dir, "j")
	if err := runStage(t, runP, map[string]string{KeyInput: samplePath(t), KeyShardRows: "37"}); err != nil {
		t.Fatal(err)
	}
	if err := runStage(t, runJ, map[string]string{KeyInput: jsonl, KeyShardRows: "37"}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(readPrompts(t, runP), readPrompts(t, runJ)); diff != "" {
		t.Errorf("prompts from JSONL differ (-parquet +jsonl):\n%s", diff)
	}
	if diff := cmp.Diff(readReport(t, runP), readReport(t, runJ)); diff != "" {
		t.Errorf("report from JSONL differs (-parquet +jsonl):\n%s", diff)
	}
}
