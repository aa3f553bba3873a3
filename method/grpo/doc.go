// Package grpo is the GRPO update shared by both roles of EVOLM: the policy
// (rewarded by the judge's score of its answer under a rubric) and the rubric
// generator (rewarded by how well its rubric separates a+ from a−).
//
// The update follows TRL's GRPOTrainer formulas (README.md, "The method"):
//
//   - advantages A = (r − mean)/(std + 1e-8) per group of samples of one prompt,
//     std the population one (numpy, the official code) or the sample one
//     (TRL); zero-std groups are filtered out and counted, and FillGroups
//     refills a step with more prompts until it has its full count of groups
//     with a signal (active sampling); a missing reward is filled with the
//     group mean (the official rule in both phases) or dropped;
//   - ratio ρ_t = exp(logπ_t − logπ_old,t); surrogate
//     L_t = −min(ρ_t·A, clip(ρ_t, 1−ε, 1+ε)·A) with ε = 0.2;
//   - KL by the k3 estimator against the frozen reference,
//     k3_t = exp(logπ_ref,t − logπ_t) − (logπ_ref,t − logπ_t) − 1, weighted by β = 0.001;
//   - the per-token loss L_t + β·k3_t is averaged over each sequence's tokens,
//     then over the batch ("grpo"); "dapo" divides by the batch's total token
//     count, "dr_grpo" by batch size × max completion length, and "pack" (the
//     official code's) packs the batch into rows of PackLength tokens and takes
//     the token mean per row, then the mean over rows.
package grpo
