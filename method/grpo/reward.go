package grpo

import (
	"math"
)

// RubricInput is what a rubric reward sees of one candidate rubric on one
// preference pair (a+, a−).
type RubricInput struct {
	// SPlus and SMinus are the judge's scores of a+ and a− under the rubric
	// (finite; usually in [0, 1]).
	SPlus, SMinus float64
	// FormatOK is the rubric's R_format verdict.
	FormatOK bool
	// Alpha weighs the discrimination term against R_format
	// (stages.run.alpha).
	Alpha float64
}

// RubricRewardFunc is a rubric generator's reward for one rubric.
type RubricRewardFunc func(RubricInput) float64

// RubricRewards are the rubric generator's rewards by name
// (stages.run.rubric_reward).
var RubricRewards = NewRegistry[RubricRewardFunc]("rubric reward")

// RubricRewardName is a rubric_reward value; its allowed values are
// RubricRewards' names.
type RubricRewardName string

// Enum lists the registered rubric rewards.
func (RubricRewardName) Enum() []string { return RubricRewards.Names() }

// Built-in rubric rewards: the paper's margin and two ablations.
const (
	RewardMargin     = "margin"
	RewardIndicator  = "indicator"
	RewardLogSigmoid = "logsigmoid"
)

func init() {
	RubricRewards.Register(RewardMargin, "α·(s+ − s−) + (1 − α)·R_format (the paper)", func(in RubricInput) float64 {
		return blend(in, in.SPlus-in.SMinus)
	})
	RubricRewards.Register(RewardIndicator, "α·1[s+ > s−] + (1 − α)·R_format (the official code's default, with α = 1)", func(in RubricInput) float64 {
		m := 0.0
		if in.SPlus > in.SMinus {
			m = 1
		}
		return blend(in, m)
	})
	RubricRewards.Register(RewardLogSigmoid, "α·log σ(s+ − s−) + (1 − α)·R_format (ablation)", func(in RubricInput) float64 {
		return blend(in, logSigmoid(in.SPlus-in.SMinus))
	})
}

// blend is α·m + (1 − α)·R_format.
func blend(in RubricInput, m float64) float64 {
	f := 0.0
	if in.FormatOK {
		f = 1
	}
	return in.Alpha*m + (1-in.Alpha)*f
}

// RubricPairReward is the reward of one sampled rubric on one pair under
// the named rubric reward. ok is false when either score is missing or not
// finite: the caller then treats the reward as missing (its rubric_missing
// rule). A rubric that failed R_format is still rewarded for what the judge
// made of it.
func RubricPairReward(name string, in RubricInput) (r float64, ok bool, err error) {
	f, err := RubricRewards.Get(name)
	if err != nil {
		return 0, false, err
	}
	if !finite(in.SPlus) || !finite(in.SMinus) {
		return 0, false, nil
	}
	return f(in), true, nil
}

// PolicyInput is what a policy reward sees of one sampled answer.
type PolicyInput struct {
	// Score is the judge's score of the answer under its prompt's rubric;
	// NaN when the judge gave none.
	Score float64
	// Truncated is true for an answer cut at max_tokens (finish reason
	// length).
	Truncated bool
	// NonStopPenalty and NonStopValue are stages.run.non_stop_penalty and
	// non_stop_penalty_value.
	NonStopPenalty bool
	NonStopValue   float64
}

// PolicyRewardFunc is the policy's reward for one answer; NaN marks a
// missing reward (its group's fill rule applies).
type PolicyRewardFunc func(PolicyInput) float64

// PolicyRewards are the policy's rewards by name (stages.run.policy_reward).
var PolicyRewards = NewRegistry[PolicyRewardFunc]("policy reward")

// PolicyRewardName is a policy_reward value; its allowed values are
// PolicyRewards' names.
type PolicyRewardName string

// Enum lists the registered policy rewards.
func (PolicyRewardName) Enum() []string { return PolicyRewards.Names() }

// RewardJudgeScore is the paper's policy reward.
const RewardJudgeScore = "judge_score"

func init() {
	PolicyRewards.Register(RewardJudgeScore, "the judge's score of the answer under its prompt's rubric (the paper); with non_stop_penalty an answer cut at max_tokens earns non_stop_penalty_value", func(in PolicyInput) float64 {
		if in.NonStopPenalty && in.Truncated {
			return in.NonStopValue
		}
		return in.Score
	})
}

// PolicyReward is the reward of one answer under the named policy reward.
func PolicyReward(name string, in PolicyInput) (float64, error) {
	f, err := PolicyRewards.Get(name)
	if err != nil {
		return 0, err
	}
	return f(in), nil
}

// logSigmoid is log(1/(1+e^−x)) computed without overflow.
func logSigmoid(x float64) float64 {
	if x >= 0 {
		return -math.Log1p(math.Exp(-x))
	}
	return x - math.Log1p(math.Exp(x))
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
