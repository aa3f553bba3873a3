package grpo

import "fmt"

// LossNorm selects how per-token losses are averaged into the batch loss.
type LossNorm string

const (
	// NormGRPO: mean over each sequence's tokens, then mean over sequences
	// (the paper's and TRL's loss_type="grpo").
	NormGRPO LossNorm = "grpo"
	// NormDAPO: sum over all tokens divided by the batch's total token count
	// (token-level mean, TRL's "dapo"/"bnpo").
	NormDAPO LossNorm = "dapo"
	// NormDrGRPO: sum over all tokens divided by sequences × max completion
	// length (TRL's "dr_grpo").
	NormDrGRPO LossNorm = "dr_grpo"
	// NormPack: the official code's (open-instruct masked_mean, axis 1 over
	// packed rows): the batch's sequences, in order, are packed greedily into
	// rows of at most PackLength prompt+completion tokens; the loss is the
	// token mean within each row, then the mean over rows. A row of one
	// sequence is grpo's per-sequence mean; one row holding the whole batch is
	// dapo's token mean.
	NormPack LossNorm = "pack"
)

// Enum lists the normalisations (a config key's allowed values).
func (LossNorm) Enum() []string {
	return []string{string(NormGRPO), string(NormDAPO), string(NormDrGRPO), string(NormPack)}
}

// ParseLossNorm validates a config value.
func ParseLossNorm(s string) (LossNorm, error) {
	switch n := LossNorm(s); n {
	case NormGRPO, NormDAPO, NormDrGRPO, NormPack:
		return n, nil
	}
	return "", fmt.Errorf("loss normalisation %q: want one of grpo, dapo, dr_grpo, pack", s)
}

// Pack is one packed row of NormPack: the sequences it holds (indices into
// the batch) and their completion tokens.
type Pack struct {
	Seqs   []int
	Tokens int
}

// Packs packs sequences of the given prompt and completion lengths in order,
// as open-instruct's pack_sequences does: a sequence starts a new row when it
// would overflow packLength tokens (prompt + completion) in a non-empty one,
// so a sequence longer than packLength gets a row of its own.
func Packs(promptLens, completionLens []int, packLength int) []Pack {
	var out []Pack
	used := 0
	for i := range promptLens {
		n := promptLens[i] + completionLens[i]
		if len(out) == 0 || (used+n > packLength && used > 0) {
			out = append(out, Pack{})
			used = 0
		}
		p := &out[len(out)-1]
		p.Seqs = append(p.Seqs, i)
		p.Tokens += completionLens[i]
		used += n
	}
	return out
}
