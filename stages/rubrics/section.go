package rubrics

import (
	"github.com/evolm/evolm/method/prompts"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
)

// Section is the config section of the rules every stage applies to
// generated rubrics and to the judge's verdicts on them: the rubrics stage,
// the judge, `evolm run`, replay and eval all read it, so that one setting
// governs every place a rubric is parsed (env EVOLM_RUBRIC_<KEY>, flags
// --rubric-<key>).
const Section = "rubric"

// Rules are the keys of the rubric section.
type Rules struct {
	Format     schemas.RubricFormat `key:"format" default:"strict" help:"R_format, how every stage parses a generated rubric: strict (the JSON object as written) or lenient (the official code's: first { to last }, repaired, numeric-string weights)"`
	JudgeReply prompts.JudgeReply   `key:"judge_reply" default:"strict" help:"how a generative judge's reply is read: strict (thinking stripped, the last JSON object with a score, which must lie in [0, 1]) or official (the official code's: first { to last } of the raw reply, repaired, no range check)"`
}

// ReadRules reads the rubric section from a stage's view (a stage that
// lists Section in its Spec.Uses).
func ReadRules(cfg *pipeline.Config) (Rules, error) {
	var r Rules
	err := pipeline.Bind(cfg.At(Section), &r)
	return r, err
}

// MovedFormat is the Spec.Moved entry of a stage that had its own R_format
// key.
func MovedFormat(key string) map[string]string { return map[string]string{key: Section + ".format"} }

func init() {
	pipeline.RegisterSection(pipeline.SectionSpec{
		Name: Section, Flag: "rubric",
		Summary:    "how generated rubrics and the judge's verdicts on them are read, by every stage",
		FieldsFunc: func() ([]pipeline.Field, error) { return pipeline.FieldsOf(Rules{}) },
	})
}
