package analyze

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/evolm/evolm/schemas"
)

// OfficialStatsTable is the table of the official statistics per (phase, step).
var OfficialStatsTable = schemas.RubricStatsOfficial.Name

// OfficialStepStats are the official statistics of one (phase, step): its
// rubrics averaged per item (the prompt, or the pair in the rubric phase),
// then over items.
type OfficialStepStats struct {
	Phase string
	Step  int64
	OfficialSummary
}

// OfficialAccumulator gathers the official statistics per (phase, step)
// from streamed rubric rows, from their raw text. Its memory grows with the
// number of items (a few numbers each), not with the text.
type OfficialAccumulator struct {
	m stepMap[PromptAverager]
}

// Add accounts for one rubric row.
func (a *OfficialAccumulator) Add(r *schemas.Rubric) {
	p := a.m.at(r, func() *PromptAverager { return &PromptAverager{} })
	p.Add(r.ItemID, OfficialRubricStats(r.RawText))
}

// Stats returns the statistics sorted by step, then phase.
func (a *OfficialAccumulator) Stats() []OfficialStepStats {
	out := make([]OfficialStepStats, 0, len(a.m))
	for k, p := range a.m {
		out = append(out, OfficialStepStats{Phase: k.phase, Step: k.step, OfficialSummary: p.Summary()})
	}
	slices.SortFunc(out, func(x, y OfficialStepStats) int {
		return cmp.Or(cmp.Compare(x.Step, y.Step), cmp.Compare(x.Phase, y.Phase))
	})
	return out
}

// OfficialStatsSchema is the schema of rubric_stats_official
// (schemas.RubricStatsOfficial): one row per (phase, step); prompts counts
// the items (prompts or pairs), percentages are in percent.
var OfficialStatsSchema = schemas.RubricStatsOfficial.Schema()

// Row is s as a rubric_stats_official row.
func (s *OfficialStepStats) Row() schemas.OfficialStatsRow {
	return schemas.OfficialStatsRow{Phase: s.Phase, Step: s.Step, OfficialSummary: schemas.OfficialSummary(s.OfficialSummary)}
}

// BuildOfficialStats turns stats into one record batch (the caller releases it).
func BuildOfficialStats(mem memory.Allocator, stats []OfficialStepStats) arrow.RecordBatch {
	rows := make([]schemas.OfficialStatsRow, len(stats))
	for i := range stats {
		rows[i] = stats[i].Row()
	}
	return schemas.RubricStatsOfficial.Build(mem, rows)
}

const officialHeader = "rubrics\tprompts\tcriteria/rubric\tlabel_only%\tspecific%\tconstraint%\tmean_chars\t"

func officialCells(s *OfficialSummary) string {
	return fmt.Sprintf("%d\t%d\t%.2f\t%.1f\t%.1f\t%.1f\t%.1f\t", s.Rubrics, s.Prompts, s.CriteriaCount,
		s.LabelOnlyPct, s.SpecificPct, s.ConstraintPct, s.AvgCriterionLen)
}

// WriteOfficialTable prints the official statistics per (phase, step).
func WriteOfficialTable(w io.Writer, stats []OfficialStepStats) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\tstep\t"+officialHeader)
	for i := range stats {
		s := &stats[i]
		fmt.Fprintf(tw, "%s\t%d\t%s\n", s.Phase, s.Step, officialCells(&s.OfficialSummary))
	}
	return tw.Flush()
}
