package datasets

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/evolm/evolm/internal/testutil"
)

// fixtures writes the pyarrow-made Tulu files into a temp dir and returns
// it with the rows pyarrow reads back from tulu.parquet.
func fixtures(t *testing.T) (string, []TuluRow) {
	t.Helper()
	dir := t.TempDir()
	out := testutil.RunPython(t, "dedup_tulu_fixtures.py", dir)
	var raw []struct {
		ID       string     `json:"id"`
		Prompt   string     `json:"prompt"`
		Chosen   []Message  `json:"chosen"`
		Rejected *[]Message `json:"rejected"`
		Source   string     `json:"source"`
	}
	if err := json.Unmarshal(out, &raw); err != nil {
		t.Fatalf("pyarrow output: %v", err)
	}
	var want []TuluRow
	for _, r := range raw {
		row := TuluRow{ID: r.ID, Prompt: r.Prompt, Chosen: r.Chosen, Source: r.Source}
		if r.Rejected != nil {
			row.Rejected = *r.Rejected
		}
		want = append(want, row)
	}
	return dir, want
}

var emptyIsNil = cmpopts.EquateEmpty()

// TestReadPyarrowTulu: we read Tulu-layout files that pyarrow wrote (both
// list encodings) with the values pyarrow reads back, in batches smaller
// than the row groups, and the same rows again from JSONL.
func TestReadPyarrowTulu(t *testing.T) {
	dir, want := fixtures(t)
	for _, name := range []string{"tulu.parquet", "tulu_legacy_lists.parquet"} {
		t.Run(name, func(t *testing.T) {
			got, err := ReadAll([]string{filepath.Join(dir, name)}, Options{BatchSize: 1})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got, emptyIsNil); diff != "" {
				t.Errorf("rows (-pyarrow +ours):\n%s", diff)
			}
			slim, err := ReadAll([]string{filepath.Join(dir, name)}, Options{PromptsOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			for i := range slim {
				if slim[i].Prompt != want[i].Prompt || slim[i].Chosen != nil {
					t.Errorf("prompts-only row %d: %+v", i, slim[i])
				}
			}
		})
	}
	t.Run("jsonl round trip", func(t *testing.T) {
		var buf bytes.Buffer
		if err := WriteJSONL(&buf, want); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "x.jsonl")
		os.WriteFile(path, append([]byte("\n"), buf.Bytes()...), 0o644) // a blank line is skipped
		got, err := ReadAll([]string{path}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got, emptyIsNil); diff != "" {
			t.Errorf("rows (-want +got):\n%s", diff)
		}
	})
	t.Run("range", func(t *testing.T) {
		r, err := OpenRange(filepath.Join(dir, "tulu.parquet"), Options{}, 1, 2)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		buf := make([]TuluRow, 10)
		n, err := r.Read(buf)
		if err != nil || n != 2 {
			t.Fatalf("read %d, %v", n, err)
		}
		if diff := cmp.Diff(want[1:3], buf[:n], emptyIsNil); diff != "" {
			t.Errorf("rows 1..3 (-want +got):\n%s", diff)
		}
		if n, err := r.Read(buf); n != 0 || err != io.EOF {
			t.Errorf("after the range: %d, %v", n, err)
		}
	})
}

// TestBadInputs: each bad input fails with an error naming the file and the
// column (and the row, where there is one).
func TestBadInputs(t *testing.T) {
	dir, _ := fixtures(t)
	jsonl := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := `{"id":"a","prompt":"hi","chosen":[],"rejected":[],"source":"s"}` + "\n"
	for _, tc := range []struct {
		name string
		path string
		opts Options
		want []string // substrings of the error
		is   error
	}{
		{"corrupt parquet", filepath.Join(dir, "bad_corrupt.parquet"), Options{}, []string{"bad_corrupt.parquet", "corrupt"}, nil},
		{"missing column", filepath.Join(dir, "bad_missing_column.parquet"), Options{PromptsOnly: true}, []string{"bad_missing_column.parquet", `column "prompt"`, "missing"}, nil},
		{"wrong type", filepath.Join(dir, "bad_wrong_type.parquet"), Options{PromptsOnly: true}, []string{"bad_wrong_type.parquet", `column "prompt"`, "wrong type", "INT64"}, nil},
		{"wrong nested type", filepath.Join(dir, "bad_chosen_type.parquet"), Options{}, []string{"bad_chosen_type.parquet", `column "chosen"`, "wrong type"}, nil},
		{"null prompt", filepath.Join(dir, "bad_null_prompt.parquet"), Options{}, []string{"bad_null_prompt.parquet", "row 2", `column "prompt"`, "null"}, nil},
		{"invalid utf-8", filepath.Join(dir, "bad_utf8.parquet"), Options{}, []string{"bad_utf8.parquet", "row 1", `column "prompt"`, "invalid UTF-8"}, nil},
		{"empty parquet", filepath.Join(dir, "empty.parquet"), Options{}, []string{"empty.parquet", "empty input"}, ErrEmptyInput},
		{"empty jsonl", jsonl("empty.jsonl", "\n\n"), Options{}, []string{"empty.jsonl", "empty input"}, ErrEmptyInput},
		{"jsonl missing column", jsonl("m.jsonl", good+`{"id":"b","chosen":[],"rejected":[],"source":"s"}`), Options{}, []string{"m.jsonl", "row 1", `column "prompt"`, "missing"}, nil},
		{"jsonl wrong type", jsonl("w.jsonl", `{"id":"b","prompt":7,"chosen":[],"rejected":[],"source":"s"}`), Options{}, []string{"w.jsonl", "row 0", `column "prompt"`, "wrong type"}, nil},
		{"jsonl null prompt", jsonl("n.jsonl", good+good+`{"id":"b","prompt":null,"chosen":[],"rejected":[],"source":"s"}`), Options{}, []string{"n.jsonl", "row 2", `column "prompt"`, "null"}, nil},
		{"jsonl invalid utf-8", jsonl("u.jsonl", good+"{\"id\":\"b\",\"prompt\":\"caf\xc3\x28\",\"chosen\":[],\"rejected\":[],\"source\":\"s\"}"), Options{}, []string{"u.jsonl", "row 1", `column "prompt"`, "invalid UTF-8"}, nil},
		{"jsonl malformed", jsonl("x.jsonl", "{not json"), Options{}, []string{"x.jsonl", "row 0", "malformed JSON"}, nil},
		{"no such file", filepath.Join(dir, "nope.parquet"), Options{}, []string{"nope.parquet"}, os.ErrNotExist},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadAll([]string{tc.path}, tc.opts)
			testutil.ErrorContains(t, err, "ReadAll succeeded", tc.want...)
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %v is not %v", err, tc.is)
			}
		})
	}
}

func TestResolveInputs(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"b.parquet", "a.jsonl", ".hidden.parquet", "notes.txt"} {
		os.WriteFile(filepath.Join(dir, n), nil, 0o644)
	}
	got, err := ResolveInputs([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(dir, "a.jsonl"), filepath.Join(dir, "b.parquet")}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if _, err := ResolveInputs([]string{t.TempDir()}); !errors.Is(err, ErrEmptyInput) {
		t.Errorf("empty dir: %v", err)
	}
}

// TestSampleFileIsCurrent: the committed sample equals what Sample()
// generates, byte for byte (run `go generate ./datasets` after editing it).
func TestSampleFileIsCurrent(t *testing.T) {
	set, err := Sample()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteParquet(&buf, set.Rows); err != nil {
		t.Fatal(err)
	}
	committed, err := os.ReadFile(filepath.Join(testutil.Root(t), SamplePath))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), committed) {
		t.Fatalf("%s is stale: run `go generate ./datasets`", SamplePath)
	}
	got, err := ReadAll([]string{filepath.Join(testutil.Root(t), SamplePath)}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(set.Rows, got); diff != "" {
		t.Errorf("sample rows (-generated +read):\n%s", diff)
	}
}

func TestSampleShape(t *testing.T) {
	set, err := Sample()
	if err != nil {
		t.Fatal(err)
	}
	if n := len(set.Rows); n < 280 || n > 320 {
		t.Errorf("%d rows, want about 300", n)
	}
	cats := map[string]int{}
	ids := map[string]bool{}
	for _, r := range set.Rows {
		cats[CategoryOf(r.Source)]++
		if ids[r.ID] {
			t.Errorf("id %s twice", r.ID)
		}
		ids[r.ID] = true
	}
	for _, c := range []string{CatChat, CatMath, CatCode, CatInstruction, CatScience, CatRoleplay} {
		if cats[c] < 35 {
			t.Errorf("category %s has %d rows", c, cats[c])
		}
	}
	kinds := map[PlantKind]int{}
	for _, p := range set.Plants {
		kinds[p.Kind]++
	}
	if kinds[PlantExact] < 20 || kinds[PlantNear] < 20 || len(set.FarGroups) < 3 {
		t.Errorf("plants %v, far groups %d", kinds, len(set.FarGroups))
	}
	again, _ := Sample()
	if diff := cmp.Diff(set, again); diff != "" {
		t.Errorf("Sample is not deterministic (-first +second):\n%s", diff)
	}
}

func TestCategoryOf(t *testing.T) {
	for src, want := range map[string]string{
		"evolm-sample/math":                                  CatMath,
		"allenai/tulu-3-sft-personas-math":                   CatMath,
		"allenai/tulu-3-wildchat-if-on-policy-8b":            CatInstruction,
		"ai2-adapt-dev/tulu_v3.9_wildchat_100k":              CatChat,
		"allenai/tulu-3-sft-personas-code":                   CatCode,
		"ai2-adapt-dev/sciriff_converted":                    CatScience,
		"something-unknown":                                  "other",
		"allenai/tulu-3-sft-reused-on-policy-8b":             CatChat,
		"ai2-adapt-dev/evol_codealpaca_heval_decontam":       CatCode,
		"allenai/tulu-3-pref-personas-instruction-following": CatInstruction,
	} {
		if got := CategoryOf(src); got != want {
			t.Errorf("CategoryOf(%q) = %q, want %q", src, got, want)
		}
	}
}
