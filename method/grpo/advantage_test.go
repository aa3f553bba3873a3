package grpo

import (
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestGroupAdvantages(t *testing.T) {
	nan := math.NaN()
	approx := cmpopts.EquateApprox(0, 1e-9)
	tests := []struct {
		name     string
		rewards  []float64
		policy   MissingPolicy
		unbiased bool
		wantAdv  []float64
		wantKept []int
		zeroStd  bool
	}{
		{"two values", []float64{1, 0}, FillGroupMean, false, []float64{1 / (0.5 + 1e-8) * 0.5, -1 / (0.5 + 1e-8) * 0.5}, []int{0, 1}, false},
		{"unbiased std", []float64{1, 0}, FillGroupMean, true, []float64{0.5 / (math.Sqrt(0.5) + 1e-8), -0.5 / (math.Sqrt(0.5) + 1e-8)}, []int{0, 1}, false},
		{"all equal is zero std", []float64{0.3, 0.3, 0.3}, FillGroupMean, false, []float64{0, 0, 0}, nil, true},
		{"missing filled with mean gets zero advantage", []float64{1, nan, 0}, FillGroupMean, false, []float64{0.5 / (math.Sqrt(1.0/6) + 1e-8), 0, -0.5 / (math.Sqrt(1.0/6) + 1e-8)}, []int{0, 1, 2}, false},
		{"missing dropped", []float64{1, nan, 0}, DropMissing, false, []float64{1 / (0.5 + 1e-8) * 0.5, 0, -1 / (0.5 + 1e-8) * 0.5}, []int{0, 2}, false},
		{"all missing", []float64{nan, nan}, DropMissing, false, []float64{0, 0}, nil, true},
		{"single present after drop", []float64{1, nan}, DropMissing, false, []float64{0, 0}, nil, true},
		// numpy: r = [.2, .5, .9, .4]; (r - r.mean()) / (r.std() + 1e-8), r.std() = sqrt(.26/4)
		{"population std as numpy", []float64{0.2, 0.5, 0.9, 0.4}, FillGroupMean, StdPopulation.Unbiased(),
			[]float64{-0.3 / (math.Sqrt(0.065) + 1e-8), 0, 0.4 / (math.Sqrt(0.065) + 1e-8), -0.1 / (math.Sqrt(0.065) + 1e-8)}, []int{0, 1, 2, 3}, false},
		{"sample std as torch", []float64{0.2, 0.5, 0.9, 0.4}, FillGroupMean, StdSample.Unbiased(),
			[]float64{-0.3 / (math.Sqrt(0.26/3) + 1e-8), 0, 0.4 / (math.Sqrt(0.26/3) + 1e-8), -0.1 / (math.Sqrt(0.26/3) + 1e-8)}, []int{0, 1, 2, 3}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			adv, st := GroupAdvantages(tc.rewards, tc.policy, tc.unbiased)
			if diff := cmp.Diff(tc.wantAdv, adv, approx); diff != "" {
				t.Errorf("advantages (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantKept, st.Kept); diff != "" {
				t.Errorf("kept (-want +got):\n%s", diff)
			}
			if st.ZeroStd != tc.zeroStd {
				t.Errorf("ZeroStd = %v, want %v", st.ZeroStd, tc.zeroStd)
			}
		})
	}
}

func TestParseAdvantageOptions(t *testing.T) {
	for s, want := range map[string]AdvStd{"population": StdPopulation, "sample": StdSample} {
		if got, err := ParseAdvStd(s); err != nil || got != want {
			t.Errorf("ParseAdvStd(%q) = %v, %v", s, got, err)
		}
	}
	if _, err := ParseAdvStd("bessel"); err == nil {
		t.Error("ParseAdvStd(bessel): want error")
	}
	for s, want := range map[string]MissingPolicy{"fill_mean": FillGroupMean, "drop": DropMissing} {
		if got, err := ParseMissingPolicy(s); err != nil || got != want {
			t.Errorf("ParseMissingPolicy(%q) = %v, %v", s, got, err)
		}
	}
	if _, err := ParseMissingPolicy("zero"); err == nil {
		t.Error("ParseMissingPolicy(zero): want error")
	}
}

func TestRubricPairReward(t *testing.T) {
	tests := []struct {
		name          string
		kind          string
		alpha, sp, sm float64
		format        bool
		want          float64
	}{
		{"margin with format", RewardMargin, 0.7, 0.9, 0.4, true, 0.7*0.5 + 0.3},
		{"margin without format", RewardMargin, 0.7, 0.9, 0.4, false, 0.7 * 0.5},
		{"negative margin", RewardMargin, 0.7, 0.2, 0.6, true, 0.7*-0.4 + 0.3},
		{"indicator win", RewardIndicator, 0.7, 0.6, 0.5, false, 0.7},
		{"indicator tie loses", RewardIndicator, 0.7, 0.5, 0.5, true, 0.3},
		{"logsigmoid", RewardLogSigmoid, 1, 0.5, 0.5, false, math.Log(0.5)},
		{"missing plus drops", RewardMargin, 0.7, math.NaN(), 0.5, true, 0},
		{"infinite minus drops", RewardMargin, 0.7, 0.5, math.Inf(1), true, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok, err := RubricPairReward(tc.kind, RubricInput{Alpha: tc.alpha, SPlus: tc.sp, SMinus: tc.sm, FormatOK: tc.format})
			if err != nil {
				t.Fatal(err)
			}
			wantOK := !math.IsNaN(tc.sp) && !math.IsInf(tc.sm, 0)
			if ok != wantOK {
				t.Fatalf("ok = %v, want %v", ok, wantOK)
			}
			if ok && math.Abs(got-tc.want) > 1e-12 {
				t.Errorf("reward = %v, want %v", got, tc.want)
			}
		})
	}
	if _, _, err := RubricPairReward("hinge", RubricInput{}); err == nil || !strings.Contains(err.Error(), "margin") {
		t.Errorf("an unknown rubric reward: err = %v, want one listing the registered rewards", err)
	}
}

// TestEstimators: each registered estimator on one group with a missing
// reward filled by the mean, against its formula written out; a tied group
// has no signal under any of them.
func TestEstimators(t *testing.T) {
	rewards := []float64{1, 0, math.NaN(), 0.5}
	mean := 0.5 // of the present rewards; the missing one is filled with it
	vals := []float64{1, 0, 0.5, 0.5}
	pop := math.Sqrt((0.25 + 0.25 + 0 + 0) / 4)
	want := map[string][]float64{}
	for i, v := range vals {
		want[AdvGRPO] = append(want[AdvGRPO], (v-mean)/(pop+AdvantageEps))
		want[AdvDrGRPO] = append(want[AdvDrGRPO], v-mean)
		others := 0.0
		for j, w := range vals {
			if j != i {
				others += w
			}
		}
		want[AdvRLOO] = append(want[AdvRLOO], v-others/3)
	}
	for name, w := range want {
		adv, st, err := GroupAdvantage(name, rewards, AdvantageOptions{Missing: FillGroupMean, Std: StdPopulation})
		if err != nil {
			t.Fatal(err)
		}
		if st.ZeroStd || len(st.Kept) != 4 {
			t.Errorf("%s: stats %+v, want 4 kept", name, st)
		}
		for i := range w {
			if math.Abs(adv[i]-w[i]) > 1e-12 {
				t.Errorf("%s: adv[%d] = %v, want %v", name, i, adv[i], w[i])
			}
		}
		if _, st, _ := GroupAdvantage(name, []float64{0.3, 0.3, 0.3}, AdvantageOptions{}); !st.ZeroStd {
			t.Errorf("%s: a tied group has a signal", name)
		}
	}
	if _, _, err := GroupAdvantage("ppo", rewards, AdvantageOptions{}); err == nil {
		t.Error("an unknown estimator: want an error")
	}
}
