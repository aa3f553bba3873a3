// Package pairs builds the rubric phase's preference pairs (a+, a−) from the
// policy's own outputs, with no labels (DESIGN §1). Three strategies are
// mixed with configurable weights (1:1:1 by default); each pair's strategy
// is drawn from a seeded RNG keyed by (seed, step, item), so a rerun draws
// the same mix.
//
//   - temporal: a+ is a fresh policy answer to a question from the replay
//     buffer and a− is the buffered answer given 20–100 steps earlier. When
//     no entry falls in that age window the window widens step by step
//     (by WidenStep on both sides) until one does; an empty buffer makes the
//     item fall back to another strategy, and the fallback is logged.
//   - backtranslate: a+ is a fresh policy answer; the policy infers the
//     question from a+ with thinking stripped (temperature 0.3), and a− is
//     the policy's answer to that inferred question. It tests whether a
//     rubric catches an on-style but off-topic answer.
//   - rubric_guided: the rubric generator writes a rubric for the question
//     (temperature 0.6); a+ is answered with that rubric in the system
//     prompt and a− without it. A rubric that fails R_format is still shown
//     as its raw text (one criterion of weight 1), so the strategy works
//     with any generator.
//
// Every pair records its strategy and provenance: the rollout ids and steps
// of a+ and a−, and the inferred question for back-translation. Every
// generation a pair used is returned as a rollout row (role policy or
// rubric_generator, phase rubric), so the run keeps the full record.
//
// The replay Buffer is a FIFO of about 2048 (step, question, answer)
// entries, persisted with each checkpoint as a Parquet file of the
// schemas.Replay table.
package pairs
