package judge

import (
	"context"

	"github.com/evolm/evolm/internal/lmstage"
	"github.com/evolm/evolm/method/prompts"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/serving/roles"
)

// Options configure a Judge used outside the stage: by the co-evolution
// loop, replay and eval, which hold responses and rubrics in memory.
type Options struct {
	Mode      string             // schemas.JudgeGenerative or schemas.JudgeYesNo
	Prompts   *prompts.Set       // role prompts (the judge's is used)
	Spec      lmstage.SampleSpec // phase, step, sampling and base seed of the judge calls; N is 1
	BatchRows int                // requests per backend call
	YesNo     *prompts.YesNo     // yes/no candidates; nil: prompts.DefaultYesNo
	// Reply is how a generative judge's reply is read (rubric.judge_reply;
	// "" is strict).
	Reply prompts.JudgeReply
	// JudgeUnparsed asks the generative judge under a rubric with no
	// criteria too (the official rule for an unusable rubric in the rubric
	// phase), showing it its text, which may be empty; otherwise such a
	// rubric gets no call and a missing score (empty_rubric).
	JudgeUnparsed bool
}

// Judge scores responses under rubrics with the stage's rules (see the
// package doc): one judgment per (response, rubric of its item), failures
// recorded per row.
type Judge struct{ j *judge }

// New returns a Judge calling b.
func New(b *roles.Backend, o Options) *Judge {
	yn := prompts.DefaultYesNo
	if o.YesNo != nil {
		yn = *o.YesNo
	}
	o.Spec.N, o.Spec.Role = 1, schemas.RoleJudge
	st := &Stage{mode: o.Mode, spec: o.Spec, prompts: o.Prompts, yn: yn, batchRows: max(o.BatchRows, 1), reply: o.Reply, judgeUnparsed: o.JudgeUnparsed}
	return &Judge{j: &judge{Stage: st, b: b, version: o.Prompts.Template(st.promptName()).Version, failures: &pipeline.RowFailures{}}}
}

// Failures counts the judge calls made so far and those that failed on the
// backend (see pipeline.RowFailures): the co-evolution loop fails a step
// whose judge calls all failed.
func (j *Judge) Failures() *pipeline.RowFailures { return j.j.failures }

// PromptVersion is the version of the judge prompt in use.
func (j *Judge) PromptVersion() string { return j.j.version }

// Judge returns one judgment per (response, rubric in byItem[response.ItemID])
// and the number of responses whose item has no rubric.
func (j *Judge) Judge(ctx context.Context, resps []Response, byItem map[string][]schemas.Rubric) ([]schemas.Judgment, int, error) {
	return j.j.judge(ctx, resps, byItem)
}
