// Package loop is `evolm run`: the EVOLM co-evolution loop (DESIGN §1). One
// model plays the policy and the rubric generator (by role prompt; a second
// model is the two-model ablation), a frozen judge scores answers under
// rubrics, and GRPO trains both roles in alternating phases of K steps.
//
// It lives under stages/ (not pipeline/) because it composes the stages'
// cores — lmstage.Sample (rollout), rubrics.FromRollout, judge.Judge,
// pairs.Builder, grpo.Trainer — which pipeline must not import.
//
// # Schedule
//
// Step s (0-based) is a policy step when ⌊s/K⌋ is even and a rubric step
// otherwise. Each step takes the next prompts of the run's prompt stream:
// the dedup stage's prompts table (or `input` files) in a seeded order,
// reshuffled every epoch, position s·prompts_per_step — so the data
// position is a function of the step and needs no saved cursor.
//
//   - Policy step: the rubric generator writes one rubric per prompt
//     (temperature 0.6); the policy samples n answers per prompt
//     (temperature 1.0); the judge scores each answer under its prompt's
//     rubric; rewards are the scores, a missing score is replaced by its
//     group's mean (zero advantage); GRPO updates the policy. One answer per
//     prompt (sample 0) enters the replay buffer.
//   - Rubric step: pairs.Builder makes one (a+, a−) pair per prompt with the
//     three strategies; the rubric generator samples n rubrics per pair; the
//     judge scores a+ and a− under each; the reward is
//     α·(s+ − s−) + (1 − α)·R_format (or an ablation); a rubric the judge
//     cannot apply at all (no usable criteria) earns 0, and a rubric whose
//     pair the judge failed to score is dropped from its group; GRPO updates
//     the rubric generator.
//
// A rubric that fails R_format is still used to judge (invalid_rubric=
// raw_text: its parsed criteria when some parsed with usable weights, else
// its raw text as one criterion of weight 1) so that a weak generator early
// in training still yields a signal; with invalid_rubric=skip only its
// parsed criteria are used, and one without any gets judgments that record
// the missing score (and, in the rubric phase, reward 0). The policy phase
// and eval/replay apply the same rule (rules.JudgingRubric).
//
// # Outputs
//
// Every step writes, under Hive partitions phase=<phase>/step=<s>:
// rollouts (role=policy and role=rubric_generator), rubrics, judgments,
// pairs (rubric steps) and one steps row with loss, KL, clip fraction, grad
// norm, reward mean/std, response length, entropy (the mean −log p of the
// sampled tokens, an unbiased estimate at temperature 1), zero-std fraction,
// per-strategy rewards and counts, R_format rate and judge-missing rate.
// Shards are committed through the run manifest (stage "run").
//
// # Checkpoints and resume
//
// Every checkpoint_every steps and after the last step, the loop writes
// checkpoints/step-NNNNNN/: policy/ (an HF checkpoint: config.json,
// safetensors, tokenizer — loads in transformers and vLLM), the optimizer
// state, the replay buffer (replay.parquet) and state.json (next step, seed,
// config hash). It is written to a temp directory and renamed, so a crash
// never leaves a partial checkpoint under its name. On start the loop
// resumes from the newest complete checkpoint: it loads the weights,
// optimizer and buffer and recomputes every step after it; a checkpoint
// made under another config (its hash, steps excepted) is refused, and
// --fresh forgets the checkpoints with the shards. Sampling seeds
// derive from (seed, step, role, item), so the recomputed steps — and the
// rows of every table, but for steps.elapsed_s (wall time) — equal those of
// an uninterrupted run on the same libtorch thread count; steps already
// committed after the checkpoint are rewritten with the same rows. The KL
// reference is always the initial policy (roles.policy.model), reloaded on resume.
package loop
