package analyze

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"text/tabwriter"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/evolm/evolm/schemas"
)

// StepStats are the rubric-evolution statistics of one (phase, step).
type StepStats struct {
	Phase string
	Step  int64

	Rubrics      int64 // rubric rows
	FormatOK     int64 // rows with R_format = 1
	WithCriteria int64 // rows whose criteria parsed (at least one)
	Criteria     int64 // criteria in those rows
	Abstract     int64 // criteria classified abstract
	Concrete     int64 // … concrete
	Constraint   int64 // … constraint
	Chars        int64 // criterion length in characters (runes), summed
	Concentrated int64 // rows with criteria where one criterion has weight ≥ ConcentrationWeight
}

// ConcentrationWeight is the weight at or above which one criterion
// dominates its rubric.
const ConcentrationWeight = 0.5

// Add accounts for one rubric row.
func (s *StepStats) Add(r *schemas.Rubric) {
	s.Rubrics++
	if r.FormatOK {
		s.FormatOK++
	}
	if len(r.Criteria) == 0 {
		return
	}
	s.WithCriteria++
	top := math.Inf(-1)
	for _, c := range r.Criteria {
		s.Criteria++
		s.Chars += int64(utf8.RuneCountInString(c.Criterion))
		cl := Classify(c.Criterion)
		if cl.Abstract {
			s.Abstract++
		}
		if cl.Concrete {
			s.Concrete++
		}
		if cl.Constraint {
			s.Constraint++
		}
		top = max(top, c.Weight)
	}
	if top >= ConcentrationWeight {
		s.Concentrated++
	}
}

func ratio(n, d int64) float64 {
	if d == 0 {
		return math.NaN()
	}
	return float64(n) / float64(d)
}

// Derived figures; NaN when their denominator is zero.
func (s *StepStats) FormatRate() float64          { return ratio(s.FormatOK, s.Rubrics) }
func (s *StepStats) AbstractShare() float64       { return ratio(s.Abstract, s.Criteria) }
func (s *StepStats) ConcreteShare() float64       { return ratio(s.Concrete, s.Criteria) }
func (s *StepStats) ConstraintShare() float64     { return ratio(s.Constraint, s.Criteria) }
func (s *StepStats) CriteriaPerRubric() float64   { return ratio(s.Criteria, s.WithCriteria) }
func (s *StepStats) MeanCriterionChars() float64  { return ratio(s.Chars, s.Criteria) }
func (s *StepStats) WeightConcentration() float64 { return ratio(s.Concentrated, s.WithCriteria) }

// Accumulator gathers StepStats per (phase, step) from streamed rubric rows.
// Its memory grows with the number of steps, not rows.
type Accumulator struct {
	m stepMap[StepStats]
}

type stepKey struct {
	phase string
	step  int64
}

// stepMap holds one V per (phase, step); the zero value is empty.
type stepMap[V any] map[stepKey]*V

// at returns the V of r's phase and step, made by fresh the first time.
func (m *stepMap[V]) at(r *schemas.Rubric, fresh func() *V) *V {
	if *m == nil {
		*m = stepMap[V]{}
	}
	k := stepKey{r.Phase, r.Step}
	v := (*m)[k]
	if v == nil {
		v = fresh()
		(*m)[k] = v
	}
	return v
}

// Add accounts for one rubric row.
func (a *Accumulator) Add(r *schemas.Rubric) {
	a.m.at(r, func() *StepStats { return &StepStats{Phase: r.Phase, Step: r.Step} }).Add(r)
}

// Stats returns the statistics sorted by step, then phase.
func (a *Accumulator) Stats() []StepStats {
	out := make([]StepStats, 0, len(a.m))
	for _, s := range a.m {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(x, y StepStats) int {
		return cmp.Or(cmp.Compare(x.Step, y.Step), cmp.Compare(x.Phase, y.Phase))
	})
	return out
}

// StatsSchema is the schema of the rubric_stats table (schemas.RubricStats):
// one row per (phase, step); shares are null when their denominator is zero.
var StatsSchema = schemas.RubricStats.Schema()

// StatsTable is the output table's name.
const StatsTable = "rubric_stats"

// Row is s as a rubric_stats row, its derived shares computed.
func (s *StepStats) Row() schemas.RubricStatsRow {
	opt := func(x float64) *float64 {
		if math.IsNaN(x) {
			return nil
		}
		return &x
	}
	return schemas.RubricStatsRow{Phase: s.Phase, Step: s.Step, Rubrics: s.Rubrics, FormatOK: s.FormatOK, WithCriteria: s.WithCriteria,
		Criteria: s.Criteria, Abstract: s.Abstract, Concrete: s.Concrete, Constraint: s.Constraint,
		FormatRate: opt(s.FormatRate()), AbstractShare: opt(s.AbstractShare()), ConcreteShare: opt(s.ConcreteShare()),
		ConstraintShare: opt(s.ConstraintShare()), CriteriaPerRubric: opt(s.CriteriaPerRubric()),
		MeanCriterionChars: opt(s.MeanCriterionChars()), WeightConcentration: opt(s.WeightConcentration())}
}

// BuildStats turns stats into one record batch (the caller releases it).
func BuildStats(mem memory.Allocator, stats []StepStats) arrow.RecordBatch {
	rows := make([]schemas.RubricStatsRow, len(stats))
	for i := range stats {
		rows[i] = stats[i].Row()
	}
	return schemas.RubricStats.Build(mem, rows)
}

// WriteTable prints stats as an aligned table, shares in percent.
func WriteTable(w io.Writer, stats []StepStats) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\tstep\trubrics\tformat_ok%\tcriteria/rubric\tabstract%\tconcrete%\tconstraint%\tmean_chars\tweight≥0.5%\t")
	for i := range stats {
		s := &stats[i]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", s.Phase, s.Step, s.Rubrics,
			f1(100*s.FormatRate()), f2(s.CriteriaPerRubric()), f1(100*s.AbstractShare()), f1(100*s.ConcreteShare()),
			f1(100*s.ConstraintShare()), f1(s.MeanCriterionChars()), f1(100*s.WeightConcentration()))
	}
	return tw.Flush()
}

func f1(x float64) string {
	if math.IsNaN(x) {
		return "-"
	}
	return fmt.Sprintf("%.1f", x)
}

func f2(x float64) string {
	if math.IsNaN(x) {
		return "-"
	}
	return fmt.Sprintf("%.2f", x)
}
