package backend

import "context"

// SFTExample is one supervised fine-tuning example, in one of TRL's two
// dataset layouts:
//
//   - conversational language modeling: Messages, a chat that the model's
//     template renders; the loss covers the assistant turns only (TRL's
//     assistant_only_loss);
//   - prompt-completion: Prompt and Completion, plain text tokenized as is,
//     the tokenizer's end-of-sequence token appended to the completion;
//     the loss covers the completion only (TRL's completion_only_loss).
type SFTExample struct {
	Messages           []Message
	Prompt, Completion string
}

// SFTSample is one tokenized training sequence. Targets[i] says whether
// token i is predicted in the loss (TRL's labels ≠ −100, unshifted): token i
// counts as −log p(TokenIDs[i] | TokenIDs[:i]). Token 0 is never predicted.
type SFTSample struct {
	TokenIDs []int
	Targets  []bool
}

// TargetCount returns how many tokens of s are predicted in the loss.
func (s SFTSample) TargetCount() int {
	n := 0
	for i, t := range s.Targets {
		if t && i > 0 {
			n++
		}
	}
	return n
}

// SFTOptions say how one SFT step batches its sequences.
type SFTOptions struct {
	// PackLength > 0 packs the sequences into rows of at most PackLength
	// tokens (first-fit decreasing, TRL's "ffd"), each sequence attending
	// only to itself with positions restarting at 0, and a micro-batch is
	// LearnerConfig.MicroBatch rows; 0 pads each micro-batch of MicroBatch
	// sequences to its longest one. The loss is the same either way.
	PackLength int
}

// SFTStats report one SFT step.
type SFTStats struct {
	Step     int     // optimizer steps taken after this one
	Loss     float64 // Σ token cross-entropy / Tokens over the whole batch
	GradNorm float64 // global gradient norm before clipping
	Tokens   int     // target tokens in the batch
	Rows     int     // forward rows (sequences, or packs with packing)
	// Skipped says why the update was not applied (a NaN or Inf loss or
	// gradient norm); "" when it was.
	Skipped string
}

// SFTTrainer is a trained role's learner that also takes supervised steps:
// the loss is TRL's SFTTrainer's, the sum of the token cross-entropies over
// every target token of the (global) batch divided by their number. A
// Trainer opened with LoRA trains its adapter; Save and SaveOptimizer write
// the checkpoint as for GRPO.
type SFTTrainer interface {
	Trainer
	// TokenizeSFT renders and tokenizes one example with the trained
	// model's chat template and tokenizer and marks its targets.
	TokenizeSFT(ex SFTExample) (SFTSample, error)
	// SFTStep takes one optimizer step over batch (every data-parallel
	// rank passes the same global batch).
	SFTStep(ctx context.Context, batch []SFTSample, opt SFTOptions) (SFTStats, error)
	// SetLR sets the learning rate of the next steps (a schedule).
	SetLR(lr float64)
}
