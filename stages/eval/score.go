package eval

import (
	"context"
	"fmt"
	"math"
	"strconv"

	"github.com/evolm/evolm/datasets"
	"github.com/evolm/evolm/internal/lmstage"
	"github.com/evolm/evolm/method/prompts"
	"github.com/evolm/evolm/method/rules"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/serving/roles"
	"github.com/evolm/evolm/stages/judge"
	"github.com/evolm/evolm/stages/rubrics"
)

// ScoreRequest asks for a score of each completion of one prompt.
type ScoreRequest struct {
	ID          string // unique within a call; the rubric and judge calls derive their seeds from it
	Prompt      string
	Completions []string
}

// Scorer scores benchmark completions. Score returns one slice per request,
// in order, with one score per completion (NaN where the judge gave none).
// An error means the whole call failed.
type Scorer interface {
	Score(ctx context.Context, reqs []ScoreRequest) ([][]float64, error)
}

// RubricJudge is the Scorer of EVOLM: the rubric generator writes one rubric
// per request from its prompt (the policy-phase rubric prompt), and the
// judge scores every completion under it. A rubric that fails R_format is
// judged as the co-evolution loop judges it (rules.JudgingRubric with
// InvalidRubric); a rubric left without criteria gives missing scores (NaN).
type RubricJudge struct {
	Generator *roles.Backend
	GenSpec   lmstage.SampleSpec // the generator's sampling; N is forced to 1
	Prompts   *prompts.Set
	Judge     *judge.Judge
	BatchRows int
	// InvalidRubric is the policy for rubrics failing R_format
	// (rules.InvalidRawText, as the loop; rules.InvalidSkip).
	InvalidRubric string
	// Format is the R_format reading (rubric.format; "" is strict).
	Format schemas.RubricFormat

	// Rubrics and Judgments accumulate every row made, for the output.
	Rubrics   []schemas.Rubric
	Judgments []schemas.Judgment
	// GenFailures counts the generator's requests and those that failed on
	// its backend (the judge's are Judge.Failures).
	GenFailures pipeline.RowFailures
}

// Score implements Scorer.
func (s *RubricJudge) Score(ctx context.Context, reqs []ScoreRequest) ([][]float64, error) {
	items := make([]lmstage.Item, len(reqs))
	for i, r := range reqs {
		msgs, err := s.Prompts.RubricForQuestion(r.Prompt)
		if err != nil {
			return nil, fmt.Errorf("request %s: %w", r.ID, err)
		}
		items[i] = lmstage.Item{ID: r.ID, Messages: msgs}
	}
	spec := s.GenSpec
	spec.N, spec.Role = 1, schemas.RoleRubricGenerator
	rolls, err := lmstage.Sample(ctx, s.Generator, max(s.BatchRows, 1), spec, items)
	if err != nil {
		return nil, fmt.Errorf("rubric generator: %w", err)
	}
	lmstage.RecordFailures(&s.GenFailures, rolls)
	byItem := map[string][]schemas.Rubric{}
	for i := range rolls {
		rub := rubrics.FromRolloutAs(&rolls[i], s.Format)
		byItem[rub.ItemID] = append(byItem[rub.ItemID], rules.JudgingRubric(rub, s.InvalidRubric))
		s.Rubrics = append(s.Rubrics, rub)
	}
	var resps []judge.Response
	for _, r := range reqs {
		for k, c := range r.Completions {
			resps = append(resps, judge.Response{ID: r.ID + "/" + strconv.Itoa(k), ItemID: r.ID, Question: r.Prompt, HasQuestion: true, Text: c})
		}
	}
	js, _, err := s.Judge.Judge(ctx, resps, byItem)
	if err != nil {
		return nil, fmt.Errorf("judge: %w", err)
	}
	s.Judgments = append(s.Judgments, js...)
	score := map[string]float64{}
	for _, j := range js {
		if j.Score != nil {
			score[j.ResponseID] = *j.Score
		}
	}
	out := make([][]float64, len(reqs))
	for i, r := range reqs {
		out[i] = make([]float64, len(r.Completions))
		for k := range r.Completions {
			v, ok := score[r.ID+"/"+strconv.Itoa(k)]
			if !ok {
				v = math.NaN()
			}
			out[i][k] = v
		}
	}
	return out, nil
}

// scoreAll calls s in chunks of batch requests.
func scoreAll(ctx context.Context, s Scorer, reqs []ScoreRequest, batch int) ([][]float64, error) {
	out := make([][]float64, 0, len(reqs))
	err := lmstage.Chunks(ctx, len(reqs), max(batch, 1), func(start, end int) error {
		got, err := s.Score(ctx, reqs[start:end])
		if err != nil {
			return err
		}
		if len(got) != end-start {
			return fmt.Errorf("scorer answered %d of %d requests", len(got), end-start)
		}
		for i, g := range got {
			if len(g) != len(reqs[start+i].Completions) {
				return fmt.Errorf("request %s: %d scores for %d completions", reqs[start+i].ID, len(g), len(reqs[start+i].Completions))
			}
		}
		out = append(out, got...)
		return nil
	})
	return out, err
}

// EvalRewardBench2 scores every item's completions (chosen first) with s and
// applies the RewardBench-2 rules.
func EvalRewardBench2(ctx context.Context, s Scorer, items []datasets.RewardBench2Item, batch int, b Bootstrap) (Report, error) {
	reqs := make([]ScoreRequest, len(items))
	for i, it := range items {
		reqs[i] = ScoreRequest{ID: "rb2/" + it.Subset + "/" + it.ID, Prompt: it.Prompt, Completions: append(append([]string{}, it.Chosen...), it.Rejected...)}
	}
	scores, err := scoreAll(ctx, s, reqs, batch)
	if err != nil {
		return Report{}, err
	}
	scored := make([]RB2Scored, len(items))
	for i, it := range items {
		scored[i] = RB2Scored{ID: it.ID, Subset: it.Subset, NumCorrect: len(it.Chosen), Scores: scores[i]}
	}
	return ScoreRewardBench2(scored, b)
}

// EvalJudgeBench scores every pair twice, shown as (A, B) and as (B, A), each
// order its own request (its own rubric sample and judge seeds), and applies
// the JudgeBench vote.
func EvalJudgeBench(ctx context.Context, s Scorer, items []datasets.JudgeBenchItem, batch int, b Bootstrap) (Report, error) {
	reqs := make([]ScoreRequest, 0, 2*len(items))
	for _, it := range items {
		reqs = append(reqs,
			ScoreRequest{ID: "jb/" + it.PairID + "/AB", Prompt: it.Question, Completions: []string{it.ResponseA, it.ResponseB}},
			ScoreRequest{ID: "jb/" + it.PairID + "/BA", Prompt: it.Question, Completions: []string{it.ResponseB, it.ResponseA}})
	}
	scores, err := scoreAll(ctx, s, reqs, batch)
	if err != nil {
		return Report{}, err
	}
	scored := make([]JBScored, len(items))
	for i, it := range items {
		ab, ba := scores[2*i], scores[2*i+1]
		scored[i] = JBScored{PairID: it.PairID, Source: it.Source, Label: it.Label,
			Original: DecideByScores(ab[0], ab[1]), Swapped: DecideByScores(ba[0], ba[1]),
			Scores: []float64{ab[0], ab[1], ba[0], ba[1]}}
	}
	return ScoreJudgeBench(scored, b)
}

// EvalPairwise scores chosen and rejected of every item with s.
func EvalPairwise(ctx context.Context, s Scorer, items []datasets.PairwiseItem, batch int, b Bootstrap) (Report, error) {
	reqs := make([]ScoreRequest, len(items))
	for i, it := range items {
		reqs[i] = ScoreRequest{ID: "pw/" + it.ID, Prompt: it.Prompt, Completions: []string{it.Chosen, it.Rejected}}
	}
	scores, err := scoreAll(ctx, s, reqs, batch)
	if err != nil {
		return Report{}, err
	}
	scored := make([]PairScored, len(items))
	for i, it := range items {
		scored[i] = PairScored{ID: it.ID, Subset: it.Subset, Chosen: scores[i][0], Rejected: scores[i][1]}
	}
	return ScorePairwise(scored, b)
}
