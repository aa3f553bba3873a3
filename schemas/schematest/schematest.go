// Package schematest holds deterministic sample rows of every table, for
// tests and benchmarks of code that reads or writes them. The rows exercise
// nulls, empty and nested lists, non-ASCII text and extreme numbers.
package schematest

import (
	"fmt"
	"math"

	"github.com/evolm/evolm/schemas"
)

func ptr[T any](v T) *T { return &v }

// Prompts returns n sample prompts.
func Prompts(n int) []schemas.Prompt {
	out := make([]schemas.Prompt, n)
	cats := []string{"chat", "math", "code", "instruction_following", "science", "roleplay"}
	for i := range out {
		text := fmt.Sprintf("Question %d: what is %d × %d? Réponds en français, 日本語も可 🙂", i, i, i+1)
		out[i] = schemas.Prompt{
			PromptID: fmt.Sprintf("sha256:%016x", uint64(i)*0x9e3779b97f4a7c15),
			Dataset:  "sample",
			Source:   "src-" + cats[i%len(cats)],
			SourceID: fmt.Sprintf("row-%d", i),
			Category: cats[i%len(cats)],
			Prompt:   text,
			Messages: []schemas.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: text}},
		}
		if i%3 == 1 {
			out[i].Messages = out[i].Messages[1:]
		}
	}
	return out
}

// Rollouts returns n sample rollouts (8 samples per prompt).
func Rollouts(n int) []schemas.Rollout {
	out := make([]schemas.Rollout, n)
	for i := range out {
		lp := make([]float32, i%5)
		for j := range lp {
			lp[j] = -float32(j+1) * 0.25
		}
		out[i] = schemas.Rollout{
			RolloutID:        fmt.Sprintf("r-%06d", i),
			PromptID:         fmt.Sprintf("p-%d", i/8),
			SampleIdx:        int32(i % 8),
			Role:             schemas.RolePolicy,
			Phase:            schemas.PhasePolicy,
			Step:             int64(i / 64),
			Text:             fmt.Sprintf("<think>t%d</think>The answer is %d.", i, i*7),
			PromptTokens:     int32(20 + i%13),
			CompletionTokens: int32(len(lp)),
			FinishReason:     []string{"stop", "length"}[i%2],
			TokenLogprobs:    lp,
			Model:            "Qwen/Qwen3-8B",
			Checkpoint:       fmt.Sprintf("step-%06d", (i/64)/25*25),
			Seed:             int64(i) * 1_000_003,
			Temperature:      1.0,
			TopP:             0.95,
			TopK:             int32(i % 3 * 20),
		}
	}
	if n > 0 {
		out[0].Seed = math.MaxInt64
		out[0].Role = schemas.RoleRubricGenerator
		out[0].Phase = schemas.PhaseRubric
	}
	return out
}

// Pairs returns n sample pairs cycling through the strategies.
func Pairs(n int) []schemas.Pair {
	out := make([]schemas.Pair, n)
	for i := range out {
		s := schemas.Strategies[i%3]
		out[i] = schemas.Pair{
			PairID: fmt.Sprintf("pair-%d", i), PromptID: fmt.Sprintf("p-%d", i), Step: int64(50 + i),
			Question: fmt.Sprintf("q%d?", i), Chosen: "good answer", Rejected: "bad answer", Strategy: s,
			ChosenRolloutID: fmt.Sprintf("r-%d", 2*i), RejectedRolloutID: fmt.Sprintf("r-%d", 2*i+1),
			ChosenStep: int64(50 + i), RejectedStep: int64(50 + i - 20 - i%80),
		}
		if s == schemas.StrategyBacktranslate {
			out[i].InferredQuestion = ptr(fmt.Sprintf("inferred q%d?", i))
		}
		if s == schemas.StrategyTemporal {
			out[i].TemporalAge = ptr(int64(20 + i%80))
			out[i].TemporalFallback = ptr([]string{schemas.TemporalWindow, schemas.TemporalRelaxedMaxAge,
				schemas.TemporalRelaxedMinAge, schemas.TemporalOldestHalf, schemas.TemporalAnyExperience}[i%5])
		}
	}
	return out
}

// Rubrics returns n sample rubrics; every third fails R_format.
func Rubrics(n int) []schemas.Rubric {
	out := make([]schemas.Rubric, n)
	for i := range out {
		raw := fmt.Sprintf(`<think>hmm</think>{"criteria":[{"criterion":"Gives %d","weight":0.7,"scoring_levels":{"1.0":"Gives it","0.0":"Does not"}},{"criterion":"Explains","weight":0.3}]}`, i)
		if i%3 == 2 {
			raw = "The answer should be correct."
		}
		crit, err := schemas.ValidateRubric(raw)
		out[i] = schemas.Rubric{
			RubricID: fmt.Sprintf("rub-%d", i), ItemID: fmt.Sprintf("pair-%d", i/4), Phase: schemas.PhaseRubric,
			Step: int64(i / 16), SampleIdx: int32(i % 4), RolloutID: fmt.Sprintf("r-%d", i), RawText: raw,
			Criteria: crit, FormatOK: err == nil, ScoringLevels: schemas.RubricLevels(raw),
		}
		if err != nil {
			out[i].ParseError = ptr(err.Error())
		}
	}
	return out
}

// Judgments returns n sample judgments; every fourth has no score.
func Judgments(n int) []schemas.Judgment {
	out := make([]schemas.Judgment, n)
	for i := range out {
		out[i] = schemas.Judgment{
			JudgmentID: fmt.Sprintf("j-%d", i), ResponseID: fmt.Sprintf("r-%d", i), RubricID: fmt.Sprintf("rub-%d", i/2),
			Phase: schemas.PhasePolicy, Step: int64(i / 8), JudgeModel: "Qwen/Qwen3-1.7B",
			JudgeMode: []string{schemas.JudgeGenerative, schemas.JudgeYesNo}[i%2], PromptVersion: "v1",
			CriterionScores: []float64{0.5, float64(i%10) / 10}, Score: ptr(0.7*0.5 + 0.3*float64(i%10)/10),
			RawText: `{"reasoning": "ok", "score": 0.5}`,
		}
		if i%4 == 3 {
			out[i].CriterionScores = []float64{}
			out[i].Score = nil
			out[i].ScoreMissingReason = ptr("unparseable: no JSON object")
		}
	}
	return out
}

// Steps returns n sample step rows alternating phases.
func Steps(n int) []schemas.StepMetrics {
	out := make([]schemas.StepMetrics, n)
	for i := range out {
		s := schemas.StepMetrics{
			Step: int64(i), Phase: schemas.PhasePolicy, Loss: 0.01 * float64(i), KL: 1e-4, ClipFrac: 0.02,
			GradNorm: 1.5, LR: 1e-6, RewardMean: 0.5 + 0.001*float64(i), RewardStd: 0.2, RespLenMean: 312.5,
			Entropy: 0.9, ZeroStdFrac: 0.125, JudgeMissingRate: 0.01, ElapsedS: 12.25, SkippedUpdates: int64(i % 2),
			RefillPrompts: int64(i % 5), RefillRounds: int64(i % 3), GroupsTrained: 64,
			RespLenP50: 290, RespLenP95: 601, TruncatedFrac: 0.0625, RubricLenMean: 180.5, RubricLenP50: 171, RubricLenP95: 402,
			TokensPerS: 1234.5, TimeGenerationS: 6.5, TimeRubricsS: 1.25, TimeJudgeS: 2.5, TimeRefLogprobsS: 0.25,
			TimeLearnerS: 1.5, TimeWritesS: 0.125, TimeCheckpointS: float64(i%2) * 0.0625, TimeOtherS: 0.0625 - float64(i%2)*0.0625,
		}
		if (i/50)%2 == 1 {
			s.Phase = schemas.PhaseRubric
			s.RewardTemporal, s.RewardBacktranslate, s.RewardRubricGuided = ptr(0.1), ptr(0.2), ptr(0.3)
			s.CountTemporal, s.CountBacktranslate, s.CountRubricGuided = 21, 22, 21
			s.FormatRate = ptr(0.875)
			s.MarginMean = ptr(0.0625)
		}
		out[i] = s
	}
	return out
}

// DedupReport returns n sample clusters.
func DedupReport(n int) []schemas.DedupCluster {
	out := make([]schemas.DedupCluster, n)
	for i := range out {
		rm := make([]string, 1+i%3)
		for j := range rm {
			rm[j] = fmt.Sprintf("sha256:%d-%d", i, j)
		}
		out[i] = schemas.DedupCluster{ClusterID: int64(i), KeptID: fmt.Sprintf("sha256:%d", i), RemovedIDs: rm,
			Method: []string{"exact", "minhash"}[i%2], Similarity: 1 - 0.05*float64(i%2)}
	}
	return out
}

var words = []string{"the", "model", "answer", "is", "because", "we", "compute", "first", "then", "so",
	"rubric", "criterion", "weight", "score", "response", "question", "therefore", "x", "=", "42",
	"step", "policy", "reward", "and", "of", "to", "in", "a", "that", "this"}

// BenchRollouts returns rows [start, start+n) of a deterministic
// rollouts-like table with realistic sizes: completions of 16–96 words with
// one token id and log-prob per word, 8 samples per prompt, 64 prompts per step. Row i is
// the same whatever the range, so a table can be generated in chunks.
func BenchRollouts(start, n int) []schemas.Rollout {
	out := make([]schemas.Rollout, n)
	for k := range out {
		i := start + k
		h := uint64(i)*0x9e3779b97f4a7c15 + 1
		next := func() uint64 { h ^= h << 13; h ^= h >> 7; h ^= h << 17; return h }
		nw := 16 + int(next()%81)
		var b []byte
		lp := make([]float32, nw)
		ids := make([]int64, nw)
		for j := range nw {
			ids[j] = int64(next() % 151936)
			if j > 0 {
				b = append(b, ' ')
			}
			b = append(b, words[next()%uint64(len(words))]...)
			lp[j] = -float32(next()%4096) / 512
		}
		out[k] = schemas.Rollout{
			RolloutID:        fmt.Sprintf("r%09d", i),
			PromptID:         fmt.Sprintf("%032x", uint64(i/8)*0x9e3779b97f4a7c15),
			SampleIdx:        int32(i % 8),
			Role:             schemas.RolePolicy,
			Phase:            schemas.PhasePolicy,
			Step:             int64(i / 512),
			Text:             string(b),
			PromptTokens:     int32(40 + next()%400),
			CompletionTokens: int32(nw),
			FinishReason:     []string{"stop", "stop", "stop", "length"}[next()%4],
			TokenLogprobs:    lp,
			TokenIDs:         ids,
			Model:            "Qwen/Qwen3-8B",
			Checkpoint:       fmt.Sprintf("step-%06d", (i/512)/25*25),
			Seed:             int64(i),
			Temperature:      1.0,
			TopP:             1.0,
			TopK:             0,
		}
	}
	return out
}
