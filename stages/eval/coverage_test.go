package eval

import (
	"math"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/schemas"
)

// Every eval score carries its coverage (the share of items with every
// score), in the table, in eval_results, and against min_coverage.
func TestReportCoverage(t *testing.T) {
	nan := math.NaN()
	rep := Report{Benchmark: BenchPairwise,
		Scores: []Score{{Benchmark: BenchPairwise, Subset: "a", Metric: MetricAccuracy, N: 2, Score: 1},
			{Benchmark: BenchPairwise, Subset: "b", Metric: MetricAccuracy, N: 2, Score: 0.5},
			{Benchmark: BenchPairwise, Subset: Overall, Metric: MetricAccuracy, N: 4, Score: 0.75}},
		Items: []ItemResult{
			{Subset: "a", Scores: []float64{0.9, 0.1}}, {Subset: "a", Scores: []float64{0.8, 0.2}},
			{Subset: "b", Scores: []float64{0.9, nan}}, {Subset: "b", Scores: []float64{nan, nan}},
		}}
	for sub, want := range map[string]float64{"a": 1, "b": 0, Overall: 0.5} {
		if got := rep.Coverage(sub); got != want {
			t.Errorf("coverage of %s = %v, want %v", sub, got, want)
		}
	}
	if err := CheckCoverage(rep, 0.5); err != nil {
		t.Errorf("coverage 0.5 against 0.5: %v", err)
	}
	if err := CheckCoverage(rep, 0.6); err == nil || !strings.Contains(err.Error(), "coverage 0.500") {
		t.Errorf("coverage 0.5 against 0.6: %v", err)
	}
	var b strings.Builder
	if err := WriteTable(&b, rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "coverage") || !strings.Contains(b.String(), "50.00") {
		t.Errorf("table lacks the coverage:\n%s", b.String())
	}
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	rec := BuildResults(mem, rep)
	defer rec.Release()
	got, err := schemas.EvalResults.Read(rec)
	if err != nil {
		t.Fatal(err)
	}
	f := func(x float64) *float64 { return &x }
	var want []schemas.EvalResult
	for i, cov := range []float64{1, 0, 0.5} {
		s := rep.Scores[i]
		want = append(want, schemas.EvalResult{Benchmark: BenchPairwise, Subset: s.Subset, Metric: MetricAccuracy, N: int64(s.N),
			Score: f(s.Score), CILow: f(0), CIHigh: f(0), Coverage: f(cov)})
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("eval_results (-want +got):\n%s", d)
	}
}
