package datasets

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// hubDir lays out a dataset directory the way `huggingface-cli download
// REPO --repo-type dataset --local-dir DIR` leaves it: README.md,
// .gitattributes, the client's .cache/huggingface/ bookkeeping, and the data
// files under data/.
func hubDir(t *testing.T, dataFiles ...string) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "hub")
	for _, d := range []string{"data", ".cache/huggingface/download/data"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, root, "README.md", "---\nlicense: odc-by\n---\n")
	writeFile(t, root, ".gitattributes", "*.parquet filter=lfs diff=lfs merge=lfs -text\n")
	writeFile(t, root, ".cache/huggingface/.gitignore", "*\n")
	for _, f := range dataFiles {
		// The client's per-file metadata, and a stray partial download: a
		// hidden directory is never read.
		writeFile(t, root, ".cache/huggingface/download/data/"+f+".metadata", "0123abcd\n")
		writeFile(t, root, ".cache/huggingface/download/data/"+f, "not parquet")
	}
	return root
}

// tuluShard writes Tulu 3 rows <prefix>0, <prefix>1 in the Hub's schema.
const tuluShard = `
msg = pa.list_(pa.struct([("content", pa.string()), ("role", pa.string())]))
ids = [PREFIX + "0", PREFIX + "1"]
pq.write_table(pa.table({
    "id": ids,
    "prompt": ["question " + i for i in ids],
    "chosen": pa.array([[{"content": "q", "role": "user"}, {"content": "good", "role": "assistant"}]] * 2, msg),
    "rejected": pa.array([[{"content": "q", "role": "user"}, {"content": "bad", "role": "assistant"}]] * 2, msg),
    "source": ["ai2-adapt-dev/src"] * 2,
}), OUT)
`

// TestHubLayoutTulu: `--input DIR` on the Tulu 3 preference mixture as the Hub
// ships it (data/train-0000N-of-00004.parquet) reads every shard in order and
// nothing else.
func TestHubLayoutTulu(t *testing.T) {
	names := []string{"train-00000-of-00004.parquet", "train-00001-of-00004.parquet"}
	root := hubDir(t, names...)
	for i, n := range names {
		writePyarrow(t, filepath.Join(root, "data"), n, "PREFIX = 's"+string(rune('0'+i))+"-'\n"+tuluShard)
		os.Remove(filepath.Join(root, "data", n+".py"))
	}
	files, err := ResolveInputs([]string{root})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(root, "data", names[0]), filepath.Join(root, "data", names[1])}
	if d := cmp.Diff(want, files); d != "" {
		t.Fatalf("files (-want +got):\n%s", d)
	}
	rows, err := ReadAll([]string{root}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range rows {
		ids = append(ids, r.ID)
	}
	if d := cmp.Diff([]string{"s0-0", "s0-1", "s1-0", "s1-1"}, ids); d != "" {
		t.Errorf("ids (-want +got):\n%s", d)
	}
	// A glob over the data folder names the same files.
	globbed, err := ResolveInputs([]string{filepath.Join(root, "data", "train-*.parquet")})
	if err != nil || !cmp.Equal(want, globbed) {
		t.Errorf("glob: %v, %v", globbed, err)
	}
}

// TestHubLayoutBenchmarks: RewardBench-2 (data/test-00000-of-00001.parquet)
// loads from its download directory; JudgeBench ships two splits
// (data/gpt-…jsonl, data/claude-…jsonl), so a split is given as its file.
func TestHubLayoutBenchmarks(t *testing.T) {
	rb2 := hubDir(t, "test-00000-of-00001.parquet")
	writePyarrow(t, filepath.Join(rb2, "data"), "test-00000-of-00001.parquet", rb2Fixture)
	os.Remove(filepath.Join(rb2, "data", "test-00000-of-00001.parquet.py"))
	items, err := LoadRewardBench2(checkedMem(t), []string{rb2})
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 3 || items[0].Subset != RB2Math {
		t.Errorf("rewardbench2 items: %+v", items)
	}

	jb := hubDir(t, "gpt-00000-of-00001.jsonl", "claude-00000-of-00001.jsonl")
	line := `{"pair_id": "%s", "original_id": "10646", "source": "mmlu-pro-law", "question": "q", "response_model": "m", "response_A": "a", "response_B": "b", "label": "A>B"}` + "\n"
	gpt := writeFile(t, filepath.Join(jb, "data"), "gpt-00000-of-00001.jsonl", fmt.Sprintf(line, "g1")+fmt.Sprintf(line, "g2"))
	writeFile(t, filepath.Join(jb, "data"), "claude-00000-of-00001.jsonl", fmt.Sprintf(line, "c1"))
	pairs, err := LoadJudgeBench(checkedMem(t), []string{gpt})
	if err != nil {
		t.Fatal(err)
	}
	if len(pairs) != 2 || pairs[0].PairID != "g1" {
		t.Errorf("judgebench gpt split: %+v", pairs)
	}
}
