package datasets

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow/memory"
)

// # RewardBench-2
//
// LoadRewardBench2 reads allenai/reward-bench-2 as published on the Hub
// (split test, 1,865 rows, data/test-00000-of-00001.parquet):
//
//	id                  string         ("ref:<n>" / "tied:<n>" in the Ties subset)
//	prompt              string
//	chosen              list<string>   (num_correct completions; one outside Ties)
//	rejected            list<string>   (num_incorrect completions; usually three)
//	num_correct         int64
//	num_incorrect       int64
//	total_completions   int64
//	models              list<string>
//	subset              string         (Factuality, Precise IF, Math, Safety, Focus, Ties)
//	additional_metadata struct<…>
//
// or JSONL of the same shape. id, prompt, chosen, rejected, num_correct and
// subset are required (scoring needs them); num_incorrect and
// total_completions, when present, must agree with the list lengths.

// RewardBench-2 column names beyond the Tulu ones.
const (
	ColNumCorrect       = "num_correct"
	ColNumIncorrect     = "num_incorrect"
	ColTotalCompletions = "total_completions"
	ColModels           = "models"
)

// RewardBench-2 subsets, as written in the subset column. The leaderboard
// number is the mean of the six.
const (
	RB2Factuality = "Factuality"
	RB2PreciseIF  = "Precise IF"
	RB2Math       = "Math"
	RB2Safety     = "Safety"
	RB2Focus      = "Focus"
	RB2Ties       = "Ties"
)

// RB2Subsets lists the six subsets in the leaderboard's order.
var RB2Subsets = []string{RB2Factuality, RB2PreciseIF, RB2Math, RB2Safety, RB2Focus, RB2Ties}

// RewardBench2Item is one RewardBench-2 prompt with its completions: the
// first NumCorrect completions (Chosen) are correct, the rest (Rejected) not.
type RewardBench2Item struct {
	ID       string
	Prompt   string
	Chosen   []string
	Rejected []string
	Subset   string
	Models   []string // the models that wrote the completions; may be empty
}

var rb2Cols = []benchCol{
	{name: ColID, kind: kindString},
	{name: ColPrompt, kind: kindString},
	{name: ColChosen, kind: kindStringList},
	{name: ColRejected, kind: kindStringList},
	{name: ColNumCorrect, kind: kindInt},
	{name: ColNumIncorrect, kind: kindInt, optional: true},
	{name: ColTotalCompletions, kind: kindInt, optional: true},
	{name: ColModels, kind: kindStringList, optional: true},
	{name: ColSubset, kind: kindString},
}

// LoadRewardBench2 reads RewardBench-2 files (Parquet or JSONL; directories
// per ResolveInputs), allocating Arrow memory from mem (nil: the default
// allocator). Besides the layout it checks each row: at least one chosen and
// one rejected completion, num_correct = len(chosen) (and the optional counts
// consistent), and Ties ids of the form "ref:<n>" or "tied:<n>".
func LoadRewardBench2(mem memory.Allocator, paths []string) ([]RewardBench2Item, error) {
	return loadBench(mem, paths, rb2Cols, func(f string, i int, r benchRow) (RewardBench2Item, error) {
		it := RewardBench2Item{
			ID: r.str(ColID), Prompt: r.str(ColPrompt), Subset: r.str(ColSubset),
			Chosen: r.strs(ColChosen), Rejected: r.strs(ColRejected), Models: r.strs(ColModels),
		}
		where := fmt.Sprintf("input %s row %d (id %q)", f, i, it.ID)
		switch {
		case len(it.Chosen) == 0:
			return it, fmt.Errorf("%s: column %q: no completions", where, ColChosen)
		case len(it.Rejected) == 0:
			return it, fmt.Errorf("%s: column %q: no completions", where, ColRejected)
		case r.int(ColNumCorrect) != int64(len(it.Chosen)):
			return it, fmt.Errorf("%s: column %q = %d but %q holds %d completions", where, ColNumCorrect, r.int(ColNumCorrect), ColChosen, len(it.Chosen))
		case r.has(ColNumIncorrect) && r.int(ColNumIncorrect) != int64(len(it.Rejected)):
			return it, fmt.Errorf("%s: column %q = %d but %q holds %d completions", where, ColNumIncorrect, r.int(ColNumIncorrect), ColRejected, len(it.Rejected))
		case r.has(ColTotalCompletions) && r.int(ColTotalCompletions) != int64(len(it.Chosen)+len(it.Rejected)):
			return it, fmt.Errorf("%s: column %q = %d but there are %d completions", where, ColTotalCompletions, r.int(ColTotalCompletions), len(it.Chosen)+len(it.Rejected))
		}
		if it.Subset == RB2Ties {
			if _, _, err := ParseTiesID(it.ID); err != nil {
				return it, fmt.Errorf("%s: %w", where, err)
			}
		}
		return it, nil
	})
}

// ParseTiesID splits a Ties-subset id "ref:<n>" or "tied:<n>" into its kind
// ("ref": the reference prompt with one correct answer; "tied": the prompt
// with several) and prompt number. The number is read as Python's int() reads
// it, as the official scorer does, so "ref:07" and "tied:7" are one prompt:
// surrounding spaces, a sign and single underscores between digits are
// accepted.
func ParseTiesID(id string) (kind string, prompt int64, err error) {
	kind, num, ok := strings.Cut(id, ":")
	if !ok || (kind != "ref" && kind != "tied") {
		return "", 0, fmt.Errorf("Ties id %q: want \"ref:<n>\" or \"tied:<n>\"", id)
	}
	n, ok := pythonInt(num)
	if !ok {
		return "", 0, fmt.Errorf("Ties id %q: prompt number %q is not an integer", id, num)
	}
	return kind, n, nil
}

// pythonInt parses s as Python's int(s) does for base-10 text.
func pythonInt(s string) (int64, bool) {
	s = strings.TrimSpace(s)
	body := strings.TrimLeft(s, "+-")
	if len(s)-len(body) > 1 || body == "" || body[0] == '_' || body[len(body)-1] == '_' || strings.Contains(body, "__") {
		return 0, false
	}
	n, err := strconv.ParseInt(s[:len(s)-len(body)]+strings.ReplaceAll(body, "_", ""), 10, 64)
	return n, err == nil
}
