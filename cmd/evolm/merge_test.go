package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/evolm/evolm/internal/testutil"
)

// TestModelMergeMatchesPEFT: `evolm model merge` of a PEFT-saved adapter
// writes a checkpoint whose transformers logits equal PEFT's
// merge_and_unload().
func TestModelMergeMatchesPEFT(t *testing.T) {
	dir := t.TempDir()
	var names []string
	if err := json.Unmarshal(testutil.RunPython(t, "peft_lora.py", "golden", dir), &names); err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		base, adapter := filepath.Join(dir, name, "base"), filepath.Join(dir, name, "adapter")
		out := filepath.Join(dir, name, "merged")
		cmd := newModelCmd()
		var stdout bytes.Buffer
		cmd.SetOut(&stdout)
		cmd.SetArgs([]string{"merge", "--base", base, "--adapter", adapter, "--out", out})
		if err := cmd.Execute(); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(stdout.String(), "merged with") {
			t.Errorf("output %q", stdout.String())
		}
		var rep struct {
			MaxDiff   float64 `json:"max_diff"`
			Cases     int     `json:"cases"`
			LoRADelta float64 `json:"lora_delta"`
		}
		raw := testutil.RunPython(t, "peft_lora.py", "merged", "--base", base, "--adapter", adapter, "--model", out)
		if err := json.Unmarshal(raw, &rep); err != nil {
			t.Fatalf("%v: %s", err, raw)
		}
		t.Logf("%s: evolm merge vs PEFT merge_and_unload: max |logit diff| = %.3g over %d cases (the adapter moves logits by up to %.3g)", name, rep.MaxDiff, rep.Cases, rep.LoRADelta)
		if rep.Cases == 0 || rep.MaxDiff > 1e-5 || rep.MaxDiff != rep.MaxDiff {
			t.Errorf("%s: merged logits differ from PEFT's merge_and_unload by %.3g", name, rep.MaxDiff)
		}
		if rep.LoRADelta < 0.1 {
			t.Errorf("%s: the adapter moves the logits by only %.3g: the test cannot tell a merge from none", name, rep.LoRADelta)
		}
	}
}
