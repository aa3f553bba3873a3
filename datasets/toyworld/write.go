package toyworld

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/evolm/evolm/method/prompts"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
)

// Options say what Write generates.
type Options struct {
	Seed uint64
	// Prompts are the toyworld prompt templates (LoadPrompts).
	Prompts *prompts.Set
	// JudgePerQuestion is the number of judge examples per SFT question.
	JudgePerQuestion int
	// QwenTokenizer is the directory of Qwen3's tokenizer.json; "" writes
	// no tokenizer.
	QwenTokenizer string
}

// Names of the files Write writes.
const (
	PolicySFTFile     = "policy_sft.jsonl"
	JudgeSFTFile      = "judge_sft.jsonl"
	PromptsFile       = "prompts.parquet"
	HeldOutFile       = "heldout.jsonl"
	HeldOutPairsFile  = "heldout_pairs.jsonl"
	HeldOutPrompts    = "heldout_prompts.parquet"
	TokenizerDir      = "tokenizer"
	JudgeTokenizerDir = "tokenizer_judge"
)

// LoadPrompts loads the toyworld prompt templates from dir (prompts/ of
// this package) over evolm's defaults.
func LoadPrompts(dir string) (*prompts.Set, error) {
	o := map[prompts.Name]string{}
	for _, n := range []prompts.Name{prompts.RubricQuestion, prompts.RubricPair, prompts.JudgeYesNo, prompts.QuestionInference, prompts.PolicyWithRubric} {
		o[n] = filepath.Join(dir, string(n)+".tmpl")
	}
	return prompts.Load(o)
}

// Write writes the toyworld data set to dir (see the package doc).
func Write(dir string, o Options) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	sp := Split(o.Seed)
	all := append(append(append([]Question{}, sp.SFT...), sp.RL...), sp.HeldOut...)
	chats, err := PolicySFT(o.Prompts, sp.SFT, all, o.Seed)
	if err != nil {
		return err
	}
	if err := writeLines(filepath.Join(dir, PolicySFTFile), len(chats), func(i int) any {
		return map[string]any{"messages": chats[i].Messages, "kind": chats[i].Kind}
	}); err != nil {
		return err
	}
	judge, err := JudgeSFT(o.Prompts, sp.SFT, o.JudgePerQuestion, o.Seed)
	if err != nil {
		return err
	}
	if err := writeLines(filepath.Join(dir, JudgeSFTFile), len(judge), func(i int) any {
		return map[string]any{"prompt": judge[i].Prompt, "completion": judge[i].Completion}
	}); err != nil {
		return err
	}
	if err := writePrompts(filepath.Join(dir, PromptsFile), sp.RL); err != nil {
		return err
	}
	if err := writePrompts(filepath.Join(dir, HeldOutPrompts), sp.HeldOut); err != nil {
		return err
	}
	if err := writeLines(filepath.Join(dir, HeldOutFile), len(sp.HeldOut), func(i int) any {
		q := sp.HeldOut[i]
		return map[string]any{"id": q.ID, "question": q.Text, "answer": q.Answer, "distractor": q.Distractors[i%len(q.Distractors)]}
	}); err != nil {
		return err
	}
	if err := writeLines(filepath.Join(dir, HeldOutPairsFile), len(sp.HeldOut), func(i int) any {
		q := sp.HeldOut[i]
		return map[string]any{"id": q.ID, "prompt": q.Text, "chosen": q.Answer, "rejected": q.Distractors[i%len(q.Distractors)]}
	}); err != nil {
		return err
	}
	if o.QwenTokenizer == "" {
		return nil
	}
	// The vocabularies keep what the models read and write: the SFT texts
	// (every prompt template's wording included) and every question.
	var policyText, judgeText []string
	for _, c := range chats {
		for _, m := range c.Messages {
			policyText = append(policyText, m.Content)
		}
	}
	for _, q := range all {
		policyText = append(policyText, q.Text)
	}
	for _, j := range judge {
		judgeText = append(judgeText, j.Prompt, j.Completion)
	}
	// The yes/no scorer asks for each answer variant as one token.
	judgeText = append(judgeText, prompts.DefaultYesNo.Candidates()...)
	if err := Tokenizer(o.QwenTokenizer, filepath.Join(dir, TokenizerDir), policyText); err != nil {
		return err
	}
	return JudgeTokenizer(o.QwenTokenizer, filepath.Join(dir, JudgeTokenizerDir), judgeText)
}

func writeLines(path string, n int, row func(i int) any) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for i := range n {
		if err := enc.Encode(row(i)); err != nil {
			f.Close()
			return fmt.Errorf("%s row %d: %w", path, i, err)
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// writePrompts writes qs as a prompts table (schemas.Prompts).
func writePrompts(path string, qs []Question) error {
	mem := memory.NewGoAllocator()
	rows := make([]schemas.Prompt, len(qs))
	for i, q := range qs {
		h := sha256.Sum256([]byte(q.Text))
		rows[i] = schemas.Prompt{PromptID: hex.EncodeToString(h[:8]), Dataset: "toyworld", Source: q.ID[:3], SourceID: q.ID,
			Category: "math", Prompt: q.Text, Messages: []schemas.Message{{Role: "user", Content: q.Text}}}
	}
	w, err := pipeline.CreateShard(path, schemas.Prompts.Schema(), pipeline.WriteOptions{Mem: mem})
	if err != nil {
		return err
	}
	rec := schemas.Prompts.Build(mem, rows)
	defer rec.Release()
	if err := w.Write(rec); err != nil {
		_ = w.Abort()
		return err
	}
	_, err = w.Commit()
	return err
}
