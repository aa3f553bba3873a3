package grpo

import (
	"fmt"
	"math"
)

// RubricReward selects how the rubric generator's reward turns the judge's
// scores of a preference pair into a number (README.md, "The method").
type RubricReward string

const (
	// RewardMargin is the paper's α·(s+ − s−) + (1 − α)·R_format.
	RewardMargin RubricReward = "margin"
	// RewardIndicator replaces the margin by 1[s+ > s−] (ablation).
	RewardIndicator RubricReward = "indicator"
	// RewardLogSigmoid replaces the margin by log σ(s+ − s−) (ablation).
	RewardLogSigmoid RubricReward = "logsigmoid"
)

// ParseRubricReward validates a config value.
func ParseRubricReward(s string) (RubricReward, error) {
	switch r := RubricReward(s); r {
	case RewardMargin, RewardIndicator, RewardLogSigmoid:
		return r, nil
	}
	return "", fmt.Errorf("rubric reward %q: want one of margin, indicator, logsigmoid", s)
}

// RubricPairReward is the reward of one sampled rubric on one pair:
//
//	r = α·m(s+, s−) + (1 − α)·R_format
//
// where m is the margin s+ − s− (or the chosen ablation) and formatOK is the
// rubric's R_format verdict. sPlus and sMinus are the judge's scores in [0, 1];
// ok is false when either is missing or not finite, in which case the caller
// drops the pair from the rubric phase (README.md, "The method"). A rubric that failed the
// format check is still rewarded (its margin is whatever the judge made of it).
func RubricPairReward(kind RubricReward, alpha, sPlus, sMinus float64, formatOK bool) (r float64, ok bool) {
	if !finite(sPlus) || !finite(sMinus) {
		return 0, false
	}
	var m float64
	switch kind {
	case RewardIndicator:
		if sPlus > sMinus {
			m = 1
		}
	case RewardLogSigmoid:
		m = logSigmoid(sPlus - sMinus)
	default:
		m = sPlus - sMinus
	}
	f := 0.0
	if formatOK {
		f = 1
	}
	return alpha*m + (1-alpha)*f, true
}

// logSigmoid is log(1/(1+e^−x)) computed without overflow.
func logSigmoid(x float64) float64 {
	if x >= 0 {
		return -math.Log1p(math.Exp(-x))
	}
	return x - math.Log1p(math.Exp(x))
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
