// Package run is `evolm run`: the EVOLM co-evolution loop (README.md, "The method"). One
// model plays the policy and the rubric generator (by role prompt; a second
// model is the two-model ablation), a frozen judge scores answers under
// rubrics, and GRPO trains both roles in alternating phases of K steps.
//
// It lives under stages/ (not pipeline/) because it composes the stages'
// cores — lmstage.Sample (rollout), rubrics.FromRollout, judge.Judge,
// pairs.Builder, the grpo advantages and rewards — which pipeline must not
// import.
//
// # Structure
//
// The loop knows no engine type. It composes:
//
//   - the roles, through the backend interfaces: the judge is opened by
//     roles.Open (a roles.Backend: Generator, Scorer); each trained role by
//     trained.Open (package stages/roles/trained) into a trained.Role: the
//     roles.Backend it samples through and a backend.Trainer (TrainStep,
//     Save, SaveOptimizer, PromptTokenIDs). The engine that implements them
//     registers itself (serving/torchbe, imported by cmd/evolm) and
//     handles full fine-tuning with its frozen reference, LoRA, gradient
//     checkpointing and resume from a checkpoint's files. In the
//     shared-model design the rubric generator is the policy's trained.Role:
//     one model, one trainer, one optimizer state.
//   - the shared rules (package stages/rules): which rubric the judge
//     applies (rules.JudgingRubric), whether it is usable, and every row id
//     (rollouts, pairs, the two responses of a pair, rubrics, judgments,
//     the per-step item keys) — the same functions judge, replay, eval and
//     export use. The rubric reward is grpo.RubricPairReward.
//   - the step loop (loop.go: Run), which computes a step (steps.go:
//     policyStep, rubricStep) and then runs the step hooks (hooks.go), in
//     gomlx's manner: StepHook functions registered with OnStep and a
//     Priority, lower first. The loop's own hooks are the steps row and the
//     step's log line (PriorityMetrics), the divergence guard that stops a
//     run after max_skipped_updates skipped updates (PriorityGuard), the
//     progress counter (PriorityProgress) and checkpointing
//     (PriorityCheckpoint, checkpoint.go). A hook's error stops the run.
//
// # Schedule
//
// Step s (0-based) is a policy step when ⌊s/K⌋ is even and a rubric step
// otherwise. Each step takes the next prompts of the run's prompt stream:
// the dedup stage's prompts table (or `input` files) in a seeded order,
// reshuffled every epoch. Under prompt_order fresh step s takes position
// s·prompts_per_step; under replay (the official code's) the j-th step of a
// phase takes position j·prompts_per_step, so the rubric phase replays the
// prompts the policy saw first (schedule.Schedule.Position). Either way the
// data position is a function of the step and needs no saved cursor; the
// refill prompts of active sampling are seeded draws from the whole set, a
// function of (seed, step, round).
//
//   - Policy step: the rubric generator writes one rubric per prompt
//     (temperature 0.6); the policy samples n answers per prompt
//     (temperature 1.0); the judge scores each answer under its prompt's
//     rubric; rewards are the scores (with non_stop_penalty, an answer cut
//     at max_tokens gets non_stop_penalty_value), a missing score is
//     replaced by its group's mean (zero advantage); with active_sampling,
//     groups whose rewards all tie are refilled with new prompts; GRPO
//     updates the policy. One answer per prompt (sample 0) enters the replay
//     buffer: of the step's own prompts (replay_fill step_batch) or of every
//     group whose rewards were computed (every_group).
//   - Rubric step (rubricstep.go): pairs.Builder makes one (a+, a−) pair per
//     prompt with the three strategies (back-translated questions inferred
//     by the policy, or with backtranslate_source frozen_initial by a frozen
//     copy of the initial model); the rubric generator samples n rubrics per
//     pair; the judge scores a+ and a− under each; the reward is
//     α·(s+ − s−) + (1 − α)·R_format (or an ablation); a rubric the judge
//     has no criterion of earns 0 (unusable_rubric zero) or is judged under
//     its text anyway (judge, the official rule), and a rubric whose pair
//     the judge failed to score is dropped from its group (or gets its mean,
//     fill_mean); with rubric_active_sampling, pair groups whose rewards all
//     tie are refilled with pairs of new prompts; GRPO updates the rubric
//     generator.
//
// Rubrics are parsed under rubric.format and the judge's replies read under
// rubric.judge_reply: the shared rubric section (stages/rubrics.Rules) every
// stage that parses rubrics reads. A rubric that fails R_format is still
// used to judge (invalid_rubric=raw_text: its parsed criteria when some
// parsed with usable weights, else its raw text as one criterion of weight
// 1) so that a weak generator early in training still yields a signal; with
// invalid_rubric=skip only its parsed criteria are used, and one without
// any gets judgments that record the missing score (and, in the rubric
// phase, reward 0). The policy phase and eval/replay apply the same rule
// (rules.JudgingRubric).
//
// # Outputs
//
// Every step writes, under Hive partitions phase=<phase>/step=<s>:
// rollouts (role=policy and role=rubric_generator), rubrics, judgments,
// pairs (rubric steps) and one steps row with loss, KL, clip fraction, grad
// norm, reward mean/std, response length, entropy (the mean −log p of the
// sampled tokens, an unbiased estimate at temperature 1), zero-std fraction,
// per-strategy rewards and counts, R_format rate and judge-missing rate,
// response-length p50/p95, truncated share, rubric lengths, the rubric
// phase's mean margin s(a+) − s(a−), tokens per second, and where the step's
// wall time went (timing.go: generation, rubric sampling, judging,
// reference log-probs, learner, fleet weight sync, Parquet writes,
// checkpointing, and the remainder, so that the parts sum to elapsed_s).
// Shards are committed through the run manifest (stage "run").
//
// # Trackers
//
// stages.run.trackers (trackers.go) sends each committed steps row, a
// sample rubric and answer, and each checkpoint's path to TensorBoard,
// MLflow and W&B through package pipeline/track, from rank 0 only. The
// trackers open before any model is loaded (one that cannot start stops the
// run there); after that they never stop or slow the loop. A resumed run
// sends the trackers the committed rows they lack from before the
// checkpoint, then its own steps after the last one they hold.
//
// # Checkpoints and resume
//
// Every checkpoint_every steps and after the last step, the loop writes
// checkpoints/step-NNNNNN/: per trained role what its Trainer saves —
// policy/ (an HF checkpoint: config.json, safetensors, tokenizer — loads in
// transformers and vLLM; with LoRA the adapter in PEFT's format) and
// policy_optimizer.safetensors (rubric_generator/ and its optimizer too in
// the two-model ablation) — the replay buffer (replay.parquet) and
// state.json (next step, seed, config hash, checksums). It is written to a temp directory and renamed, so a crash
// never leaves a partial checkpoint under its name. On start the loop
// resumes from the newest complete checkpoint: it loads the weights,
// optimizer and buffer and recomputes every step after it; a checkpoint
// made under another config (its hash, steps excepted) is refused, and
// --fresh forgets the checkpoints with the shards. Sampling seeds
// derive from (seed, step, role, item), so the recomputed steps — and the
// rows of every table, but for the steps' wall times (elapsed_s,
// tokens_per_s and the time_*_s breakdown) — equal those of
// an uninterrupted run on the same libtorch thread count; steps already
// committed after the checkpoint are rewritten with the same rows. The KL
// reference is always the initial policy (roles.policy.model), reloaded on resume.
package run
