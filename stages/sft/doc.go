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
// The stage trains in one process; the learner's SFT step is data-parallel
// (model/learner), but the stage does not open a process group yet and
// refuses WORLD_SIZE > 1.
package sft
