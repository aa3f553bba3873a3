// Package eval evaluates a rubric generator plus judge on reward-model
// benchmarks in their published layouts (datasets.LoadRewardBench2,
// LoadJudgeBench, LoadPairwise), as the paper evaluates.
//
// # Structure
//
// Scoring rules are pure functions of scores (scoring.go): they never call a
// model. The model-calling part (score.go) turns benchmark items into scores
// through a Scorer; RubricJudge is EVOLM's: the rubric generator writes one
// rubric per prompt (the policy-phase rubric prompt, rubrics.FromRollout
// parses it), the judge (package judge) scores each completion under it, and
// a rubric failing R_format is judged as the loop judges it (rules.JudgingRubric).
// Reports (report.go) hold accuracy per subset with seeded bootstrap
// confidence intervals; `evolm eval` prints them as a table and writes
// eval_results and eval_items (output.go).
//
// The stage takes the generator and the judge as the run configures them:
// the roles.rubric_generator and roles.judge sections (backend, model,
// sampling, judge mode, prompt overrides), which enter the eval config hash;
// evaluate a checkpoint with --rubric-generator-model DIR. The
// benchmark files are loaded, and their layout checked, before any model is
// opened. For JudgeBench each order is its own request: a rubric is sampled
// and the judge called for (A, B) and again for (B, A), with seeds derived
// from the request id: the pointwise judge sees one response at a time, so
// what differs between the orders is the sampling (rubric and judge), which
// shows up as inconsistent pairs.
//
// A missing score (a judge output that could not be parsed) is NaN in every
// scoring function and ranks below every real score, so it can never win a
// comparison; two missing scores tie. Best-of-N and JudgeBench need only the
// order (-Inf); the Ties margins need a value, and use −1 (below).
//
// # RewardBench-2 (allenai/reward-bench, rewardbench/utils.py and scripts/run_v2.py)
//
// Every subset but Ties is best-of-N: the item's scores list the chosen
// completion first, then the rejected ones; the item scores 1 when the first
// score is strictly above all others, 1/k when it ties with k−1 others at the
// top, 0 otherwise (reroll_and_score_dataset: results = 1/#(scores == max) if
// scores[0] == max else 0). The subset score is the mean over its items.
//
// Ties is scored by process_single_model over the subset's rows, whose ids are
// "ref:<n>" (one correct answer) and "tied:<n>" (several), the first
// num_correct scores being the correct ones. A ref and a tied row pair when
// int(<n>) is equal ("ref:07" pairs with "tied:7"). A missing score counts as
// −1, the rating the official generative runner gives an unparsed judgment,
// so the margins stay finite. Per row (_compute_prompt_stats):
// accurate = min(correct) − max(incorrect) > 0; the correct–incorrect margin
// is min(correct) − max(incorrect); the within-correct margin is
// max(correct) − min(correct) (tied rows only). Then
//
//	ref_accuracy               = mean accurate over ref rows
//	tied_accuracy              = mean accurate over tied rows
//	over prompts n with both a ref and a tied row:
//	correctness_preferred      = mean(margin_tied(n) > spread_tied(n))
//	correctness_preferred_hard = mean(min(margin_ref(n), margin_tied(n)) > spread_tied(n))
//	margin_score               = mean(tanh(min(margin_ref, margin_tied)/spread_tied − 1)), NaN terms → 0
//	Ties = 0.30·tied_accuracy + 0.30·ref_accuracy + 0.20·correctness_preferred
//	     + 0.20·correctness_preferred_hard + 0.01·margin_score
//
// The leaderboard number is the mean of the six subset scores (Factuality,
// Precise IF, Math, Safety, Focus, Ties).
//
// # JudgeBench (ScalerLab/JudgeBench, utils/metrics.py compute_final_metrics)
//
// Each pair is judged twice, in the order (A, B) and in the order (B, A);
// a judge's decision in one order is "A>B", "B>A", "A=B" (tie) or none
// (unparsed), relative to the positions shown. The second decision is flipped
// back to the original positions. The vote counts +1 for each decision equal
// to the label and −1 for each equal to the opposite label (ties and missing
// decisions count 0); the pair is correct when the vote is positive. So an
// inconsistent pair (one right, one wrong) and a double tie count as wrong,
// while one right decision and one tie count as right, as in the official
// metric. A pointwise scorer decides an order by comparing the two scores it
// gave in that order. Accuracy is reported overall and per source category
// (knowledge, reasoning, math, coding; datasets.JudgeBenchCategory).
//
// # Pairwise files
//
// An item is correct when the chosen response scores strictly above the
// rejected one (RewardBench v1's rule); accuracy per subset column.
//
// # Confidence intervals
//
// Every score comes with a percentile bootstrap 95% interval: items are
// resampled with replacement within the subset (B = 1000 by default, from a
// PCG stream seeded by the caller), the score is recomputed per resample and
// the 2.5th and 97.5th percentiles are reported. For Ties the unit of
// resampling is the prompt number (its ref and tied rows together), since the
// margin terms pair them. The overall RewardBench-2 interval resamples every
// subset independently and takes the mean of the six.
package eval
