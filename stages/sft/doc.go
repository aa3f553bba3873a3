// Package sft is `evolm sft`: supervised fine-tuning, the warm start that
// researchers run before RL (TRL's SFTTrainer, open-instruct's
// finetune.py).
//
// # Contract
//
// Input: Parquet or JSONL files of examples in one of TRL's layouts — a
// messages column (a chat, list<struct<role, content>>), trained on its
// assistant turns, or prompt and completion columns (plain text), trained
// on the completion and the end-of-sequence token appended to it. Each
// example is rendered and tokenized by the trained role's engine
// (backend.SFTTrainer.TokenizeSFT: the chat template, assistant masks as a
// {% generation %} template marks them) and truncated to max_length.
//
// The input is streamed once: each example is tokenized as it is read and
// appended to a spill file in the stage's work directory (_work/sft: the
// tokens, and an offsets file), and each step reads its examples back by
// offset. What the stage holds per example is the epoch's order, 4 bytes;
// its memory does not grow with the data otherwise.
//
// Step s takes the examples s·batch_size … (s+1)·batch_size−1 of the
// epochs' seeded orders laid end to end, so a step's data is a function of
// the step alone. The loss is TRL's: the token cross-entropy summed over
// every target token of the step's batch, divided by their number (one
// token mean over all micro-batches), with the batch padded per micro-batch
// or packed (first-fit decreasing, each example attending to itself). The
// learning rate follows lr_scheduler after warmup_steps.
//
// Output: a steps row per step (phase=sft: loss, grad_norm, lr, target
// tokens per example as resp_len_mean, elapsed_s), a checkpoint
// (checkpoints/step-NNNNNN: model, optimizer state, state.json) every
// checkpoint_every steps and after the last, and the final model in output
// (default <run>/model): an HF checkpoint with the base model's tokenizer,
// or the PEFT adapter with LoRA. A rerun resumes from the newest
// checkpoint made under the same config (steps excepted, so raising steps
// trains on, the linear or cosine rates after the checkpoint following the
// new total); a killed run resumed with the same config computes the same
// steps, rows and weights as an uninterrupted one.
//
// # Data parallelism
//
// Under torchrun's variables (evolm sft --nproc N, or torchrun) the stage
// joins a process group through the trained role's backend (dp.go): every
// rank tokenizes the same input (the ranks compare the examples' count and
// checksum), and the learner trains each rank's block of the step's
// micro-batches and all-reduces the gradients, so that a step equals the
// one-process step. zero_stage 1 shards the optimizer state, 2 the
// gradients too. Rank 0 alone writes the steps rows, the checkpoints and
// the final model, but for each rank's optimizer shard at zero_stage ≥ 1; a
// checkpoint with sharded optimizer state resumes only on as many ranks.
//
// # Trackers
//
// stages.sft.trackers sends each committed steps row and each checkpoint's
// path to TensorBoard, MLflow and W&B (package pipeline/track), from rank 0
// only, as the loop does: the trackers open before the model loads (one
// that cannot start stops the stage there), report under their own
// subdirectory (<run>/tensorboard/sft, <run>/trackers/sft) and name (the
// run directory's, with -sft appended), and a rerun continues the same
// tracker runs, sent first the committed rows they lack.
package sft
