package judge

import (
	"fmt"
	"strings"
	"sync"

	"github.com/evolm/evolm/schemas"
)

// missingScores counts the judgments a stage wrote and those without a
// score, by reason (the part of score_missing_reason before its first ':',
// e.g. empty_rubric, unparseable, response_failed), keeping an example of
// each. It is safe for the concurrent tasks of MapShards.
type missingScores struct {
	mu             sync.Mutex
	rows, missing  int64
	byReason       map[string]int64
	exampleReasons map[string]string
}

func (m *missingScores) add(js []schemas.Judgment) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.byReason == nil {
		m.byReason, m.exampleReasons = map[string]int64{}, map[string]string{}
	}
	for _, j := range js {
		m.rows++
		if j.Score != nil {
			continue
		}
		m.missing++
		reason := "unknown"
		if j.ScoreMissingReason != nil {
			reason, _, _ = strings.Cut(*j.ScoreMissingReason, ":")
			if _, ok := m.exampleReasons[reason]; !ok {
				m.exampleReasons[reason] = *j.ScoreMissingReason
			}
		}
		m.byReason[reason]++
	}
}

// warning returns the warning to log when more than fraction of the
// judgments have no score ("" otherwise): the share, and the commonest
// reason with its count and an example.
func (m *missingScores) warning(fraction float64) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.rows == 0 || float64(m.missing) <= fraction*float64(m.rows) {
		return ""
	}
	top, n := "", int64(0)
	for r, c := range m.byReason {
		if c > n || c == n && r < top {
			top, n = r, c
		}
	}
	return fmt.Sprintf("MANY SCORES MISSING: %d of %d judgments (%.1f%%) have no score, above pipeline.warn_failure_fraction %g; the commonest reason: %s (%d rows, e.g. %q); see score_missing_reason",
		m.missing, m.rows, 100*float64(m.missing)/float64(m.rows), fraction, top, n, m.exampleReasons[top])
}
