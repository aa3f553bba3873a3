// Package pairs builds the rubric phase's preference pairs (a+, a−) from the
// policy's own outputs, with no labels (README.md, "The method"). Three strategies are
// mixed with configurable weights (1:1:1 by default); each pair's strategy
// is drawn from a seeded RNG keyed by (seed, step, item), so a rerun draws
// the same mix, and BuildFrom continues a step's items (active sampling's
// refills) with fresh ids and the draws that follow.
//
//   - temporal: a+ is a fresh policy answer to a question from the replay
//     buffer and a− is the buffered answer given 20–100 steps earlier. Ages
//     are counted as the official code counts them (AgePolicySteps): the
//     newest buffered policy step minus the entry's, in policy steps, so an
//     answer does not age during a rubric phase; AgeGlobalSteps counts every
//     step from the current one. When no entry falls in the window, the
//     official four fallbacks apply in turn (FallbackOfficial: drop the max
//     age, halve the min age, the older half of the buffer, anything), or
//     the window widens by WidenStep on both sides until one does
//     (FallbackWiden). Each temporal pair records its age and the stage that
//     served it. An empty buffer makes the item fall back to another
//     strategy, and the fallback is logged.
//   - backtranslate: a+ is a fresh policy answer; the policy infers the
//     question from a+ with thinking stripped (temperature 0.3), and a− is
//     the policy's answer to that inferred question. It tests whether a
//     rubric catches an on-style but off-topic answer.
//   - rubric_guided: the rubric generator writes a rubric for the question
//     (the official code samples it with the training generation config,
//     temperature 1.0, top-p 0.95); a+ is answered with that rubric in the system
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
