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

// Enum lists the std choices (a config key's allowed values).
func (AdvStd) Enum() []string { return []string{string(StdPopulation), string(StdSample)} }

// MissingRule is a missing-reward policy as a config names it: fill_mean
// or drop.
type MissingRule string

// Enum lists the missing-reward policies (a config key's allowed values).
func (MissingRule) Enum() []string { return []string{"drop", "fill_mean"} }

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

// AdvantageOptions are what an advantage estimator is told besides the
// rewards.
type AdvantageOptions struct {
	// Missing says what a missing (NaN) reward becomes.
	Missing MissingPolicy
	// Std is the standard deviation that scales grpo's advantages.
	Std AdvStd
}

// AdvantageFunc computes the advantages of one group of rewards (the n
// samples of one prompt, NaN for a missing reward). adv has len(rewards)
// entries; entries not in stats.Kept are 0 and must not be trained on. A
// group whose rewards all tie carries no signal (stats.ZeroStd) whatever
// the estimator.
type AdvantageFunc func(rewards []float64, o AdvantageOptions) (adv []float64, stats GroupStats)

// Advantages are the advantage estimators by name (stages.run.advantage).
var Advantages = NewRegistry[AdvantageFunc]("advantage estimator")

// AdvantageName is an advantage value; its allowed values are Advantages'
// names.
type AdvantageName string

// Enum lists the registered advantage estimators.
func (AdvantageName) Enum() []string { return Advantages.Names() }

// Built-in estimators.
const (
	AdvGRPO   = "grpo"
	AdvDrGRPO = "dr_grpo"
	AdvRLOO   = "rloo"
)

func init() {
	Advantages.Register(AdvGRPO, "(r − mean)/(std + 1e-8) per group, std by adv_std (the paper, TRL, verl's grpo)", func(rewards []float64, o AdvantageOptions) ([]float64, GroupStats) {
		return GroupAdvantages(rewards, o.Missing, o.Std.Unbiased())
	})
	Advantages.Register(AdvDrGRPO, "r − mean per group, unscaled (Dr. GRPO)", func(rewards []float64, o AdvantageOptions) ([]float64, GroupStats) {
		return centred(rewards, o, func(g group, i int) float64 { return g.vals[i] - g.mean })
	})
	Advantages.Register(AdvRLOO, "r − the mean of the group's other rewards (RLOO, verl's rloo)", func(rewards []float64, o AdvantageOptions) ([]float64, GroupStats) {
		return centred(rewards, o, func(g group, i int) float64 {
			n := float64(len(g.members))
			return n / (n - 1) * (g.vals[i] - g.mean) // r_i − (Σr − r_i)/(n − 1)
		})
	})
}

// GroupAdvantage computes one group's advantages with the named estimator.
func GroupAdvantage(name string, rewards []float64, o AdvantageOptions) ([]float64, GroupStats, error) {
	f, err := Advantages.Get(name)
	if err != nil {
		return nil, GroupStats{}, err
	}
	adv, st := f(rewards, o)
	return adv, st, nil
}

// group is one group's rewards after the missing-reward rule: vals[i] for
// each member i, their mean and std.
type group struct {
	vals      []float64
	members   []int
	mean, std float64
}

// fill applies policy to the missing rewards and returns the group, its std
// Bessel-corrected when unbiased.
func fill(rewards []float64, policy MissingPolicy, unbiased bool) group {
	var present []int
	for i, r := range rewards {
		if !math.IsNaN(r) && !math.IsInf(r, 0) {
			present = append(present, i)
		}
	}
	var g group
	if len(present) == 0 {
		return g
	}
	sum := 0.0
	for _, i := range present {
		sum += rewards[i]
	}
	g.mean = sum / float64(len(present))
	g.vals = make([]float64, len(rewards))
	for i, r := range rewards {
		switch {
		case !math.IsNaN(r) && !math.IsInf(r, 0):
			g.vals[i] = r
			g.members = append(g.members, i)
		case policy == FillGroupMean:
			g.vals[i] = g.mean
			g.members = append(g.members, i)
		}
	}
	ss := 0.0
	for _, i := range g.members {
		d := g.vals[i] - g.mean
		ss += d * d
	}
	n := float64(len(g.members))
	denom := n
	if unbiased && n > 1 {
		denom = n - 1
	}
	g.std = math.Sqrt(ss / denom)
	return g
}

// centred applies an estimator to a group with a reward spread; a group
// without one (or of fewer than two members) gets zero advantages.
func centred(rewards []float64, o AdvantageOptions, adv func(g group, i int) float64) ([]float64, GroupStats) {
	out := make([]float64, len(rewards))
	g := fill(rewards, o.Missing, o.Std.Unbiased())
	stats := GroupStats{Mean: g.mean, Std: g.std}
	if g.std == 0 || len(g.members) < 2 {
		stats.ZeroStd = true
		return out, stats
	}
	for _, i := range g.members {
		out[i] = adv(g, i)
	}
	stats.Kept = g.members
	return out, stats
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
	std := StdPopulation
	if unbiased {
		std = StdSample
	}
	return centred(rewards, AdvantageOptions{Missing: policy, Std: std}, func(g group, i int) float64 {
		return (g.vals[i] - g.mean) / (g.std + AdvantageEps)
	})
}
