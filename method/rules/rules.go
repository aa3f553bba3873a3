// Package rules holds the rules that the co-evolution loop (stages/loop),
// the stages that recompute or audit what it did (judge, replay, eval,
// export) and the pair builder share, each defined once:
//
//   - which rubric the judge applies (JudgingRubric, the invalid_rubric
//     rule) and whether the judge can apply it at all (Usable);
//   - the ids of rows: rollouts, pair rollouts, pairs, the two responses of
//     a pair, rubrics and judgments, and the loop's per-step item keys.
//
// Ids are keys of stored tables: replay, export and a resumed run join on
// them, so every function here must keep returning the same bytes for the
// same arguments (ids_test.go pins them).
//
// The rubric generator's reward (α·margin + (1 − α)·R_format, and its
// ablations) stays in stages/grpo (grpo.RubricPairReward) with the other
// training signals (advantages, the missing-reward policies): only the loop
// computes it; replay and eval compare scores, they do not reward.
//
// The package imports only schemas, so any stage (and any tool reading a
// run) may use it without linking a model engine.
package rules

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/evolm/evolm/schemas"
)

// Invalid-rubric policies: how a rubric that fails R_format is judged
// (stages.run.invalid_rubric, and the same key of eval and replay).
const (
	InvalidRawText = "raw_text" // judge under the rubric's text as one criterion
	InvalidSkip    = "skip"     // judge under its parsed criteria; none: score missing
)

// InvalidPolicies lists the invalid-rubric policies (a config key's enum).
var InvalidPolicies = []string{InvalidRawText, InvalidSkip}

// InvalidPolicy is an invalid-rubric policy as a config names it.
type InvalidPolicy string

// Enum lists the invalid-rubric policies.
func (InvalidPolicy) Enum() []string { return InvalidPolicies }

// JudgingRubric is the rubric the judge applies to r under policy: a rubric
// that fails R_format and has no positively weighted criteria is judged,
// with raw_text, under its raw text (thinking stripped) as a single
// criterion of weight 1; otherwise r as it is. The loop, replay and eval
// all judge through it, so that a replay judges what the run judged.
func JudgingRubric(r schemas.Rubric, policy string) schemas.Rubric {
	if r.FormatOK || policy == InvalidSkip {
		return r
	}
	total := 0.0
	for _, c := range r.Criteria {
		total += c.Weight
	}
	if len(r.Criteria) > 0 && total > 0 {
		return r
	}
	text := schemas.StripThink(r.RawText)
	if text == "" {
		return r
	}
	r.Criteria = []schemas.Criterion{{Criterion: text, Weight: 1}}
	return r
}

// Usable reports whether the judge can apply r (as JudgingRubric returned
// it): at least one criterion, every weight finite and non-negative, and a
// positive total. A rubric that is not usable is the generator's own
// failure: in the rubric phase it earns 0.
func Usable(r schemas.Rubric) bool {
	total := 0.0
	for _, c := range r.Criteria {
		if math.IsNaN(c.Weight) || math.IsInf(c.Weight, 0) || c.Weight < 0 {
			return false
		}
		total += c.Weight
	}
	return total > 0
}

// RolloutID is the id of sample j of item (a prompt id, a pair id or a
// loop item key) sampled by role in phase at step:
// "<item>/<phase>/<step:06d>/<role>/<j>".
func RolloutID(item, phase string, step int64, role string, j int) string {
	return fmt.Sprintf("%s/%s/%06d/%s/%d", item, phase, step, role, j)
}

// PairID is the id of pair index (its position among the step's pairs) of
// a rubric step: "pair-<step:06d>-<index:03d>".
func PairID(step int64, index int) string {
	return fmt.Sprintf("pair-%06d-%03d", step, index)
}

// PairRolloutID is the id of a generation the pair builder made for pair
// index of step (tag names it: chosen, rejected, question, rubric, …):
// "pair/<step:06d>/<index:03d>/<tag>". It is also the request id and the
// seed key of that generation.
func PairRolloutID(step int64, index int, tag string) string {
	return fmt.Sprintf("pair/%06d/%03d/%s", step, index, tag)
}

// ChosenID and RejectedID are the response ids of a pair's two answers as
// the judge sees them: "<pair_id>/chosen", "<pair_id>/rejected".
func ChosenID(pairID string) string   { return pairID + "/chosen" }
func RejectedID(pairID string) string { return pairID + "/rejected" }

// RubricID is the id of the rubric parsed from the rubric generator's
// rollout: the rollout's own id (one rubric per rollout).
func RubricID(rolloutID string) string { return rolloutID }

// JudgmentID is the id of the judgment of a response under a rubric:
// "<response_id>|<rubric_id>".
func JudgmentID(responseID, rubricID string) string { return responseID + "|" + rubricID }

// ItemKey is the loop's key of the prompt at position i of a policy step's
// batch in sampling round round (0: the step's own batch, > 0: an active-
// sampling refill): "<prompt_id>#<i>" or "<prompt_id>#r<round>.<i>". The
// position keeps keys unique when a prompt occurs twice in a step (the
// stream wraps inside a step, or a refill draws it again); rollout ids
// derive from it.
func ItemKey(promptID string, round, i int) string {
	if round > 0 {
		return fmt.Sprintf("%s#r%d.%d", promptID, round, i)
	}
	return fmt.Sprintf("%s#%d", promptID, i)
}

// DeriveSeed returns the seed of a row: SHA-256 over the base seed and the
// key parts, first 8 bytes, as a non-negative int64.
func DeriveSeed(base int64, parts ...string) int64 {
	h := sha256.New()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(base))
	h.Write(b[:])
	for _, p := range parts {
		h.Write([]byte{0})
		h.Write([]byte(p))
	}
	return int64(binary.LittleEndian.Uint64(h.Sum(nil)[:8]) >> 1)
}
