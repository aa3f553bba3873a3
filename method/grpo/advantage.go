package grpo

import (
	"fmt"
	"math"

	"github.com/evolm/evolm/internal/choice"
)

// AdvantageEps is the denominator guard of the group normalisation.
const AdvantageEps = 1e-8

// MissingPolicy says what to do with a reward that is missing (NaN): the judge
// could not be parsed.
type MissingPolicy int

const (
	// FillGroupMean replaces a missing reward by the mean of the group's present
	// rewards, which gives it zero advantage (policy phase).
	FillGroupMean MissingPolicy = iota
	// DropMissing removes the item from its group (rubric phase).
	DropMissing
)

// ParseMissingPolicy reads a config value: fill_mean (FillGroupMean, the
// official code's rule in both phases) or drop (DropMissing).
func ParseMissingPolicy(s string) (MissingPolicy, error) {
	switch s {
	case "fill_mean":
		return FillGroupMean, nil
	case "drop":
		return DropMissing, nil
	}
	return 0, fmt.Errorf("missing-reward policy %q: want fill_mean or drop", s)
}

// AdvStd selects the standard deviation that scales group advantages.
type AdvStd string

const (
	// StdPopulation divides by n, as numpy's .std() in the official code.
	StdPopulation AdvStd = "population"
	// StdSample divides by n − 1 (Bessel), as torch.std in TRL.
	StdSample AdvStd = "sample"
)

// ParseAdvStd validates a config value.
func ParseAdvStd(s string) (AdvStd, error) {
	return choice.Parse("advantage std", s, StdPopulation, StdSample)
}

// Unbiased reports whether a divides by n − 1 (GroupAdvantages' unbiased).
func (a AdvStd) Unbiased() bool { return a == StdSample }

// GroupStats describes one group after normalisation.
type GroupStats struct {
	Mean, Std float64
	// ZeroStd is true when every present reward is equal: the group carries no
	// learning signal and is filtered out of the update.
	ZeroStd bool
	// Kept lists the indices into the group's rewards that received an
	// advantage (all of them, minus dropped missing ones, minus everything for
	// a zero-std group).
	Kept []int
}

// GroupAdvantages computes GRPO advantages (r − mean)/(std + 1e-8) for one group
// of rewards (the n samples of one prompt). NaN marks a missing reward and is
// handled by policy. std is the Bessel-corrected standard deviation when
// unbiased is set (TRL's torch.std, StdSample) and the population one
// otherwise (numpy's .std(), the official code, StdPopulation). A missing
// reward filled with the mean counts as a member of the group, as the
// official code's fill does. adv has len(rewards)
// entries; entries not in stats.Kept are 0 and must not be trained on.
func GroupAdvantages(rewards []float64, policy MissingPolicy, unbiased bool) (adv []float64, stats GroupStats) {
	adv = make([]float64, len(rewards))
	var present []int
	for i, r := range rewards {
		if !math.IsNaN(r) && !math.IsInf(r, 0) {
			present = append(present, i)
		}
	}
	if len(present) == 0 {
		stats.ZeroStd = true
		return adv, stats
	}
	sum := 0.0
	for _, i := range present {
		sum += rewards[i]
	}
	mean := sum / float64(len(present))
	vals := make([]float64, len(rewards))
	var members []int
	for i, r := range rewards {
		switch {
		case !math.IsNaN(r) && !math.IsInf(r, 0):
			vals[i] = r
			members = append(members, i)
		case policy == FillGroupMean:
			vals[i] = mean
			members = append(members, i)
		}
	}
	ss := 0.0
	for _, i := range members {
		d := vals[i] - mean
		ss += d * d
	}
	n := float64(len(members))
	denom := n
	if unbiased && n > 1 {
		denom = n - 1
	}
	std := math.Sqrt(ss / denom)
	stats.Mean, stats.Std = mean, std
	if std == 0 || len(members) < 2 {
		stats.ZeroStd = true
		return adv, stats
	}
	for _, i := range members {
		adv[i] = (vals[i] - mean) / (std + AdvantageEps)
	}
	stats.Kept = members
	return adv, stats
}
