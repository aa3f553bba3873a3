package datasets

import (
	"fmt"
	"strings"

	"github.com/apache/arrow-go/v18/arrow/memory"
)

// # JudgeBench
//
// LoadJudgeBench reads ScalerLab/JudgeBench as published (JSONL on GitHub,
// data/dataset=judgebench,response_model=<model>.jsonl; JSON/Parquet splits
// gpt (350 pairs) and claude (270) on the Hub):
//
//	pair_id        string
//	original_id    string or integer (the GitHub files write integers)
//	source         string   ("mmlu-pro-<subject>", "livebench-reasoning",
//	                         "livebench-math", "livecodebench")
//	question       string
//	response_model string
//	response_A     string
//	response_B     string
//	label          string   ("A>B" or "B>A")

// JudgeBench column names.
const (
	ColPairID        = "pair_id"
	ColOriginalID    = "original_id"
	ColQuestion      = "question"
	ColResponseModel = "response_model"
	ColResponseA     = "response_A"
	ColResponseB     = "response_B"
	ColLabel         = "label"
)

// JudgeBench labels and decisions.
const (
	LabelAB  = "A>B"
	LabelBA  = "B>A"
	LabelTie = "A=B" // a judge's decision only; never a label
)

// JudgeBenchItem is one JudgeBench response pair.
type JudgeBenchItem struct {
	PairID        string
	OriginalID    string
	Source        string
	Question      string
	ResponseModel string
	ResponseA     string
	ResponseB     string
	Label         string // LabelAB or LabelBA
}

// Category is the item's source category, as JudgeBench reports results:
// knowledge (mmlu-pro-*), reasoning (livebench-reasoning), math
// (livebench-math) and coding (livecodebench); any other source is its own
// category.
func (it JudgeBenchItem) Category() string { return JudgeBenchCategory(it.Source) }

// JudgeBenchCategory maps a JudgeBench source to its category.
func JudgeBenchCategory(source string) string {
	switch {
	case strings.HasPrefix(source, "mmlu-pro"):
		return "knowledge"
	case strings.HasPrefix(source, "livebench-reasoning"):
		return "reasoning"
	case strings.HasPrefix(source, "livebench-math"):
		return "math"
	case strings.HasPrefix(source, "livecodebench"):
		return "coding"
	}
	return source
}

var judgeBenchCols = []benchCol{
	{name: ColPairID, kind: kindString},
	{name: ColOriginalID, kind: kindStringOrInt, optional: true},
	{name: ColSource, kind: kindString},
	{name: ColQuestion, kind: kindString},
	{name: ColResponseModel, kind: kindString, optional: true},
	{name: ColResponseA, kind: kindString},
	{name: ColResponseB, kind: kindString},
	{name: ColLabel, kind: kindString},
}

// LoadJudgeBench reads JudgeBench files (Parquet or JSONL; directories per
// ResolveInputs), allocating Arrow memory from mem (nil: the default
// allocator). A label other than "A>B" or "B>A" is an error naming the row.
func LoadJudgeBench(mem memory.Allocator, paths []string) ([]JudgeBenchItem, error) {
	return loadBench(mem, paths, judgeBenchCols, func(f string, i int, r benchRow) (JudgeBenchItem, error) {
		it := JudgeBenchItem{
			PairID: r.str(ColPairID), OriginalID: r.str(ColOriginalID), Source: r.str(ColSource),
			Question: r.str(ColQuestion), ResponseModel: r.str(ColResponseModel),
			ResponseA: r.str(ColResponseA), ResponseB: r.str(ColResponseB), Label: r.str(ColLabel),
		}
		if it.Label != LabelAB && it.Label != LabelBA {
			return it, fmt.Errorf("input %s row %d (pair_id %q): column %q = %q, want %q or %q", f, i, it.PairID, ColLabel, it.Label, LabelAB, LabelBA)
		}
		return it, nil
	})
}
