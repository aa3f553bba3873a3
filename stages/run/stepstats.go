package run

import (
	"context"
	"math"
	"slices"
	"time"

	"github.com/evolm/evolm/internal/lmstage"
	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/serving/roles"
)

// sample is lmstage.Sample with its time counted in part p.
func (l *loop) sample(ctx context.Context, p part, b *roles.Backend, batchRows int, sp lmstage.SampleSpec, items []lmstage.Item) ([]schemas.Rollout, error) {
	defer l.clock.since(p, time.Now())
	return lmstage.Sample(ctx, b, batchRows, sp, items)
}

// stepStats fills a step's length distribution and truncated share from
// the completions of the role it trains (trained: the population of
// resp_len_mean), the rubric lengths from every rubric-generator
// completion among trained and others, and counts every completion's
// tokens for tokens_per_s. Failed rows are left out.
func (l *loop) stepStats(m *schemas.StepMetrics, trained []schemas.Rollout, others ...[]schemas.Rollout) {
	var lens, rubric []float64
	cut := 0
	var tokens int64
	count := func(r *schemas.Rollout) {
		if r.Error != nil {
			return
		}
		tokens += int64(r.CompletionTokens)
		if r.Role == schemas.RoleRubricGenerator {
			rubric = append(rubric, float64(r.CompletionTokens))
		}
	}
	for i := range trained {
		r := &trained[i]
		count(r)
		if r.Error != nil {
			continue
		}
		lens = append(lens, float64(r.CompletionTokens))
		if r.FinishReason == string(backend.FinishLength) {
			cut++
		}
	}
	for _, rs := range others {
		for i := range rs {
			count(&rs[i])
		}
	}
	m.RespLenP50, m.RespLenP95 = quantile(lens, 0.5), quantile(lens, 0.95)
	if len(lens) > 0 {
		m.TruncatedFrac = float64(cut) / float64(len(lens))
	}
	m.RubricLenMean, m.RubricLenP50, m.RubricLenP95 = meanOf(rubric), quantile(rubric, 0.5), quantile(rubric, 0.95)
	l.clock.tokens += tokens
}

// quantile is the q-quantile of xs by linear interpolation between order
// statistics (numpy's default); 0 for none.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	pos := q * float64(len(s)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(s)-1)
	return s[lo] + (pos-float64(lo))*(s[hi]-s[lo])
}

func meanOf(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// meanPtr is the mean of xs, nil for none.
func meanPtr(xs []float64) *float64 {
	if len(xs) == 0 {
		return nil
	}
	m := meanOf(xs)
	return &m
}
