package schemas

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// Message is one chat turn: list<struct<role: string, content: string>>.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Criterion is one weighted rubric criterion:
// list<struct<criterion: string, weight: float64>>.
type Criterion struct {
	Criterion string  `json:"criterion"`
	Weight    float64 `json:"weight"`
}

// Phases, roles and pair strategies, stored as strings.
const (
	PhasePolicy = "policy"
	PhaseRubric = "rubric"

	RolePolicy          = "policy"
	RoleRubricGenerator = "rubric_generator"
	RoleJudge           = "judge"

	StrategyTemporal      = "temporal"
	StrategyBacktranslate = "backtranslate"
	StrategyRubricGuided  = "rubric_guided"

	JudgeGenerative = "generative"
	JudgeYesNo      = "yesno"
)

// Strategies lists the pair strategies in their canonical order.
var Strategies = []string{StrategyTemporal, StrategyBacktranslate, StrategyRubricGuided}

func messagesCol[T any](name string, f func(*T) *[]Message) column[T] {
	fields := []arrow.Field{{Name: "role", Type: arrow.BinaryTypes.String}, {Name: "content", Type: arrow.BinaryTypes.String}}
	return structListCol(name, fields, f,
		func(sb *array.StructBuilder, m *Message) {
			sb.FieldBuilder(0).(*array.StringBuilder).Append(m.Role)
			sb.FieldBuilder(1).(*array.StringBuilder).Append(m.Content)
		},
		func(ch []arrow.Array, j int, m *Message) (err error) {
			if m.Role, err = childString(ch[0], j, "role"); err != nil {
				return err
			}
			m.Content, err = childString(ch[1], j, "content")
			return err
		})
}

func criteriaCol[T any](name string, f func(*T) *[]Criterion) column[T] {
	fields := []arrow.Field{{Name: "criterion", Type: arrow.BinaryTypes.String}, {Name: "weight", Type: arrow.PrimitiveTypes.Float64}}
	return structListCol(name, fields, f,
		func(sb *array.StructBuilder, c *Criterion) {
			sb.FieldBuilder(0).(*array.StringBuilder).Append(c.Criterion)
			sb.FieldBuilder(1).(*array.Float64Builder).Append(c.Weight)
		},
		func(ch []arrow.Array, j int, c *Criterion) (err error) {
			if c.Criterion, err = childString(ch[0], j, "criterion"); err != nil {
				return err
			}
			if ch[1].IsNull(j) {
				return errNull
			}
			c.Weight = ch[1].(*array.Float64).Value(j)
			return nil
		})
}

// levelsCol is a list<list<struct<score: string, text: string>>> column: one
// list of scoring levels per rubric criterion. A null row reads as nil.
func levelsCol[T any](name string, f func(*T) *[][]Level) column[T] {
	lt := arrow.StructOf(arrow.Field{Name: "score", Type: arrow.BinaryTypes.String}, arrow.Field{Name: "text", Type: arrow.BinaryTypes.String})
	return column[T]{
		field: arrow.Field{Name: name, Type: arrow.ListOf(arrow.ListOf(lt))},
		put: func(b array.Builder, r *T) {
			ob := b.(*array.ListBuilder)
			ob.Append(true)
			ib := ob.ValueBuilder().(*array.ListBuilder)
			sb := ib.ValueBuilder().(*array.StructBuilder)
			for _, ls := range *f(r) {
				ib.Append(true)
				for _, l := range ls {
					sb.Append(true)
					sb.FieldBuilder(0).(*array.StringBuilder).Append(l.Score)
					sb.FieldBuilder(1).(*array.StringBuilder).Append(l.Text)
				}
			}
		},
		get: func(a arrow.Array, i int, r *T) error {
			if a.IsNull(i) {
				*f(r) = nil
				return nil
			}
			ol := a.(*array.List)
			il := ol.ListValues().(*array.List)
			sa := il.ListValues().(*array.Struct)
			stt := sa.DataType().(*arrow.StructType)
			si, _ := stt.FieldIdx("score")
			ti, _ := stt.FieldIdx("text")
			start, end := ol.ValueOffsets(i)
			out := make([][]Level, 0, end-start)
			for k := start; k < end; k++ {
				if il.IsNull(int(k)) {
					return fmt.Errorf("criterion %d: %w", k-start, errNull)
				}
				ls, le := il.ValueOffsets(int(k))
				levels := make([]Level, 0, le-ls)
				for j := ls; j < le; j++ {
					if sa.IsNull(int(j)) {
						return fmt.Errorf("criterion %d level %d: %w", k-start, j-ls, errNull)
					}
					var l Level
					var err error
					if l.Score, err = childString(sa.Field(si), int(j), "score"); err != nil {
						return fmt.Errorf("criterion %d level %d: %w", k-start, j-ls, err)
					}
					if l.Text, err = childString(sa.Field(ti), int(j), "text"); err != nil {
						return fmt.Errorf("criterion %d level %d: %w", k-start, j-ls, err)
					}
					levels = append(levels, l)
				}
				out = append(out, levels)
			}
			*f(r) = out
			return nil
		},
	}
}

// Prompt is a row of the prompts table: deduplicated training prompts.
type Prompt struct {
	PromptID string    // content hash of the normalized prompt text (stable across runs)
	Dataset  string    // dataset id, e.g. "allenai/llama-3.1-tulu-3-8b-preference-mixture" or "sample"
	Source   string    // sub-source within the dataset (Tulu's `source` column)
	SourceID string    // the row's id in the source dataset
	Category string    // chat | math | code | instruction_following | science | roleplay | …
	Prompt   string    // the prompt text (the last user turn)
	Messages []Message // the full prompt conversation, user turn last
}

// Prompts is the prompts table.
var Prompts = newTable("prompts", 1,
	strCol("prompt_id", func(r *Prompt) *string { return &r.PromptID }),
	strCol("dataset", func(r *Prompt) *string { return &r.Dataset }),
	strCol("source", func(r *Prompt) *string { return &r.Source }),
	strCol("source_id", func(r *Prompt) *string { return &r.SourceID }),
	strCol("category", func(r *Prompt) *string { return &r.Category }),
	strCol("prompt", func(r *Prompt) *string { return &r.Prompt }),
	messagesCol("messages", func(r *Prompt) *[]Message { return &r.Messages }),
)

// Rollout is a row of the rollouts table: one sampled completion, with who
// generated it and how.
type Rollout struct {
	RolloutID        string    // unique id: "<prompt_id>/<phase>/<step>/<role>/<sample_idx>" or a hash of it
	PromptID         string    // prompts.prompt_id (or pairs.pair_id for rubric-phase generations)
	SampleIdx        int32     // index within the prompt's group of n samples
	Role             string    // RolePolicy | RoleRubricGenerator | RoleJudge
	Phase            string    // PhasePolicy | PhaseRubric
	Step             int64     // training step at which it was sampled
	Text             string    // completion text as decoded
	PromptTokens     int32     // tokens in the (templated) prompt
	CompletionTokens int32     // tokens generated
	FinishReason     string    // "stop" | "length" | "stop_sequence" | "error"
	TokenLogprobs    []float32 // log-prob of each generated token under the sampling model; may be empty
	TokenIDs         []int64   // generated token ids (a final stop token included), so GRPO trains on exactly what was sampled; empty when the backend does not report them
	Model            string    // model id (HF repo or path)
	Checkpoint       string    // checkpoint id the weights came from (e.g. "step-000050")
	Seed             int64     // sampling seed
	Temperature      float64
	TopP             float64
	TopK             int32   // 0: disabled
	Error            *string // why generation failed for this row (FinishReason "error"); nil on success
	// TokenIDsSource says where TokenIDs came from: "engine" (the
	// in-process sampler), "server" (ids an inference server returned) or
	// "retokenized" (the text tokenized again by the learner, for a server
	// that returns none); nil when there are none, and in files before
	// table version 2.
	TokenIDsSource *string
}

// SetTokenIDs stores a completion's token ids and where they came from
// (TokenIDsSource; "" means "engine"); no ids leave the source nil.
func (r *Rollout) SetTokenIDs(ids []int, source string) {
	r.TokenIDs = make([]int64, len(ids))
	for k, id := range ids {
		r.TokenIDs[k] = int64(id)
	}
	r.TokenIDsSource = nil
	if len(ids) > 0 {
		if source == "" {
			source = "engine"
		}
		r.TokenIDsSource = &source
	}
}

// Rollouts is the rollouts table.
var Rollouts = newTable("rollouts", 2,
	strCol("rollout_id", func(r *Rollout) *string { return &r.RolloutID }),
	strCol("prompt_id", func(r *Rollout) *string { return &r.PromptID }),
	numCol("sample_idx", func(r *Rollout) *int32 { return &r.SampleIdx }),
	strCol("role", func(r *Rollout) *string { return &r.Role }),
	strCol("phase", func(r *Rollout) *string { return &r.Phase }),
	numCol("step", func(r *Rollout) *int64 { return &r.Step }),
	strCol("text", func(r *Rollout) *string { return &r.Text }),
	numCol("prompt_tokens", func(r *Rollout) *int32 { return &r.PromptTokens }),
	numCol("completion_tokens", func(r *Rollout) *int32 { return &r.CompletionTokens }),
	strCol("finish_reason", func(r *Rollout) *string { return &r.FinishReason }),
	numListCol("token_logprobs", func(r *Rollout) *[]float32 { return &r.TokenLogprobs }),
	numListCol("token_ids", func(r *Rollout) *[]int64 { return &r.TokenIDs }),
	strCol("model", func(r *Rollout) *string { return &r.Model }),
	strCol("checkpoint", func(r *Rollout) *string { return &r.Checkpoint }),
	numCol("seed", func(r *Rollout) *int64 { return &r.Seed }),
	numCol("temperature", func(r *Rollout) *float64 { return &r.Temperature }),
	numCol("top_p", func(r *Rollout) *float64 { return &r.TopP }),
	numCol("top_k", func(r *Rollout) *int32 { return &r.TopK }),
	optStrCol("error", func(r *Rollout) **string { return &r.Error }),
	added(2, optStrCol("token_ids_source", func(r *Rollout) **string { return &r.TokenIDsSource })),
)

// Pair is a row of the pairs table: a preference pair (a+, a−) built by the
// policy in the rubric phase, with its strategy and provenance.
type Pair struct {
	PairID            string
	PromptID          string  // the prompt the question came from
	Step              int64   // step at which the pair was built
	Question          string  // the question both answers are judged against
	Chosen            string  // a+
	Rejected          string  // a−
	Strategy          string  // StrategyTemporal | StrategyBacktranslate | StrategyRubricGuided
	ChosenRolloutID   string  // rollouts.rollout_id of a+
	RejectedRolloutID string  // rollouts.rollout_id of a−
	ChosenStep        int64   // step a+ was sampled at
	RejectedStep      int64   // step a− was sampled at (temporal: 20–100 steps earlier)
	InferredQuestion  *string // back-translation: the question inferred from a+; nil otherwise
	// Temporal contrast only (nil otherwise; version 2): the age of a− when it
	// was drawn, in the configured clock (policy steps by default), and how it
	// was found: TemporalWindow, one of the official empty-window fallbacks
	// (TemporalRelaxedMaxAge, TemporalRelaxedMinAge, TemporalOldestHalf,
	// TemporalAnyExperience) or TemporalWidened (evolm's ±widen).
	TemporalAge      *int64
	TemporalFallback *string
}

// Temporal-contrast fallback stages recorded in Pair.TemporalFallback.
const (
	TemporalWindow        = "window"          // an entry in [min_age, max_age]
	TemporalRelaxedMaxAge = "relaxed_max_age" // official 1: no max age
	TemporalRelaxedMinAge = "relaxed_min_age" // official 2: age ≥ max(1, min_age/2)
	TemporalOldestHalf    = "oldest_half"     // official 3: the older half of the buffer
	TemporalAnyExperience = "any_experience"  // official 4: anything
	TemporalWidened       = "widened"         // evolm: the window widened step by step
)

// Pairs is the pairs table. Version 2 added temporal_age and
// temporal_fallback; version-1 shards read with both nil.
var Pairs = newTable("pairs", 2,
	strCol("pair_id", func(r *Pair) *string { return &r.PairID }),
	strCol("prompt_id", func(r *Pair) *string { return &r.PromptID }),
	numCol("step", func(r *Pair) *int64 { return &r.Step }),
	strCol("question", func(r *Pair) *string { return &r.Question }),
	strCol("chosen", func(r *Pair) *string { return &r.Chosen }),
	strCol("rejected", func(r *Pair) *string { return &r.Rejected }),
	strCol("strategy", func(r *Pair) *string { return &r.Strategy }),
	strCol("chosen_rollout_id", func(r *Pair) *string { return &r.ChosenRolloutID }),
	strCol("rejected_rollout_id", func(r *Pair) *string { return &r.RejectedRolloutID }),
	numCol("chosen_step", func(r *Pair) *int64 { return &r.ChosenStep }),
	numCol("rejected_step", func(r *Pair) *int64 { return &r.RejectedStep }),
	optStrCol("inferred_question", func(r *Pair) **string { return &r.InferredQuestion }),
	added(2, optI64Col("temporal_age", func(r *Pair) **int64 { return &r.TemporalAge })),
	added(2, optStrCol("temporal_fallback", func(r *Pair) **string { return &r.TemporalFallback })),
)

// Rubric is a row of the rubrics table: one generated rubric, raw and parsed.
type Rubric struct {
	RubricID   string
	ItemID     string // prompts.prompt_id (policy phase) or pairs.pair_id (rubric phase)
	Phase      string
	Step       int64
	SampleIdx  int32       // candidate index among the n rubrics sampled for the item
	RolloutID  string      // rollouts.rollout_id of the generation that produced it
	RawText    string      // the generator's full output, <think> included
	Criteria   []Criterion // parsed criteria; empty when parsing failed
	FormatOK   bool        // R_format (ValidateRubric)
	ParseError *string     // why FormatOK is false; nil when it is true
	// ScoringLevels (version 2) holds each criterion's scoring levels, in the
	// order the generator wrote them: ScoringLevels[k] belongs to
	// Criteria[k], empty when that criterion has none. The judge is shown
	// them with the criteria. Nil in rows of version-1 shards, which kept
	// only criterion and weight (RubricLevels(RawText) recovers them).
	ScoringLevels [][]Level
}

// Rubrics is the rubrics table. Version 2 added scoring_levels; version-1
// shards read with it nil.
var Rubrics = newTable("rubrics", 2,
	strCol("rubric_id", func(r *Rubric) *string { return &r.RubricID }),
	strCol("item_id", func(r *Rubric) *string { return &r.ItemID }),
	strCol("phase", func(r *Rubric) *string { return &r.Phase }),
	numCol("step", func(r *Rubric) *int64 { return &r.Step }),
	numCol("sample_idx", func(r *Rubric) *int32 { return &r.SampleIdx }),
	strCol("rollout_id", func(r *Rubric) *string { return &r.RolloutID }),
	strCol("raw_text", func(r *Rubric) *string { return &r.RawText }),
	criteriaCol("criteria", func(r *Rubric) *[]Criterion { return &r.Criteria }),
	boolCol("format_ok", func(r *Rubric) *bool { return &r.FormatOK }),
	optStrCol("parse_error", func(r *Rubric) **string { return &r.ParseError }),
	added(2, levelsCol("scoring_levels", func(r *Rubric) *[][]Level { return &r.ScoringLevels })),
)

// Judgment is a row of the judgments table: the judge's score of one
// response under one rubric.
type Judgment struct {
	JudgmentID         string
	ResponseID         string // rollouts.rollout_id, or "<pair_id>/chosen" | "<pair_id>/rejected"
	RubricID           string // rubrics.rubric_id
	Phase              string
	Step               int64
	JudgeModel         string    // the judge's model id
	JudgeMode          string    // JudgeGenerative | JudgeYesNo
	PromptVersion      string    // version of the judge prompt template
	CriterionScores    []float64 // one per rubric criterion, in [0, 1]; empty if unparsed
	Score              *float64  // weighted total in [0, 1]; nil when missing
	ScoreMissingReason *string   // why Score is nil (e.g. "unparseable: no JSON object")
	RawText            string    // the judge's output (generative mode); "" in yes/no mode
}

// Judgments is the judgments table.
var Judgments = newTable("judgments", 1,
	strCol("judgment_id", func(r *Judgment) *string { return &r.JudgmentID }),
	strCol("response_id", func(r *Judgment) *string { return &r.ResponseID }),
	strCol("rubric_id", func(r *Judgment) *string { return &r.RubricID }),
	strCol("phase", func(r *Judgment) *string { return &r.Phase }),
	numCol("step", func(r *Judgment) *int64 { return &r.Step }),
	strCol("judge_model", func(r *Judgment) *string { return &r.JudgeModel }),
	strCol("judge_mode", func(r *Judgment) *string { return &r.JudgeMode }),
	strCol("prompt_version", func(r *Judgment) *string { return &r.PromptVersion }),
	numListCol("criterion_scores", func(r *Judgment) *[]float64 { return &r.CriterionScores }),
	optF64Col("score", func(r *Judgment) **float64 { return &r.Score }),
	optStrCol("score_missing_reason", func(r *Judgment) **string { return &r.ScoreMissingReason }),
	strCol("raw_text", func(r *Judgment) *string { return &r.RawText }),
)

// StepMetrics is a row of the steps table: training metrics of one step.
// Pointer fields are nil where they do not apply to the step's phase.
type StepMetrics struct {
	Step        int64
	Phase       string
	Loss        float64
	KL          float64 // mean k3 KL to the reference
	ClipFrac    float64 // share of tokens whose ratio was clipped
	GradNorm    float64 // before clipping
	LR          float64
	RewardMean  float64
	RewardStd   float64
	RespLenMean float64 // mean completion tokens
	Entropy     float64 // mean token entropy
	ZeroStdFrac float64 // share of groups whose rewards all tie (zero advantage)
	// Rubric phase: mean reward and pair count per strategy, and R_format rate.
	RewardTemporal      *float64
	RewardBacktranslate *float64
	RewardRubricGuided  *float64
	CountTemporal       int64
	CountBacktranslate  int64
	CountRubricGuided   int64
	FormatRate          *float64
	JudgeMissingRate    float64 // share of judgments with no parseable score
	ElapsedS            float64 // wall time of the step
	// SkippedUpdates is how many updates in a row were skipped for a NaN or
	// Inf loss or gradient norm, this step's included; 0 when its update
	// was applied (or it had none to apply).
	SkippedUpdates int64
	// Active sampling (version 3): prompts sampled beyond prompts_per_step to
	// replace groups whose rewards all tie, the refill rounds that took, and
	// the groups with a reward signal the update trained on.
	RefillPrompts int64
	RefillRounds  int64
	GroupsTrained int64
	// Version 4: the distribution of completion lengths in tokens (p50,
	// p95) of the role trained this step (the population of RespLenMean),
	// the share of them cut at max_tokens, the rubric generator's
	// completions of the step (mean, p50, p95), the rubric phase's mean
	// judged score margin s(a+) − s(a−), and the trained model's completion
	// tokens per second of the step.
	RespLenP50    float64
	RespLenP95    float64
	TruncatedFrac float64
	RubricLenMean float64
	RubricLenP50  float64
	RubricLenP95  float64
	MarginMean    *float64
	TokensPerS    float64
	// Version 4: where the step's wall time went, in seconds. ElapsedS is
	// the time since the previous step's row was complete (the first step
	// of a process: since the loop began), so the previous row's own write,
	// the checkpoint written after it and the trackers' hand-off count in
	// this step; TimeOtherS is the rest (ElapsedS less the parts).
	TimeGenerationS  float64 // the trained role's answers: rollouts, pair answers, inferred questions
	TimeRubricsS     float64 // the rubric generator's samples
	TimeJudgeS       float64 // the judge's scoring
	TimeRefLogprobsS float64 // the frozen reference's log-probs of the trained completions
	TimeLearnerS     float64 // the learner's forward/backward passes and optimizer step
	TimeWeightSyncS  float64 // the fleet's weight sync (generation_backend openai)
	TimeWritesS      float64 // Parquet shards written and committed
	TimeCheckpointS  float64 // checkpoints
	TimeOtherS       float64 // the rest: the loop's own bookkeeping
}

// Steps is the steps table. Version 2 added skipped_updates; version 3 added
// refill_prompts, refill_rounds and groups_trained, which version-2 shards
// read as 0; version 4 added the length percentiles, truncated_frac, the
// rubric lengths, margin_mean, tokens_per_s and the time_*_s breakdown,
// which older shards read as 0 (margin_mean as null).
var Steps = newTable("steps", 4,
	numCol("step", func(r *StepMetrics) *int64 { return &r.Step }),
	strCol("phase", func(r *StepMetrics) *string { return &r.Phase }),
	numCol("loss", func(r *StepMetrics) *float64 { return &r.Loss }),
	numCol("kl", func(r *StepMetrics) *float64 { return &r.KL }),
	numCol("clip_frac", func(r *StepMetrics) *float64 { return &r.ClipFrac }),
	numCol("grad_norm", func(r *StepMetrics) *float64 { return &r.GradNorm }),
	numCol("lr", func(r *StepMetrics) *float64 { return &r.LR }),
	numCol("reward_mean", func(r *StepMetrics) *float64 { return &r.RewardMean }),
	numCol("reward_std", func(r *StepMetrics) *float64 { return &r.RewardStd }),
	numCol("resp_len_mean", func(r *StepMetrics) *float64 { return &r.RespLenMean }),
	numCol("entropy", func(r *StepMetrics) *float64 { return &r.Entropy }),
	numCol("zero_std_frac", func(r *StepMetrics) *float64 { return &r.ZeroStdFrac }),
	optF64Col("reward_temporal", func(r *StepMetrics) **float64 { return &r.RewardTemporal }),
	optF64Col("reward_backtranslate", func(r *StepMetrics) **float64 { return &r.RewardBacktranslate }),
	optF64Col("reward_rubric_guided", func(r *StepMetrics) **float64 { return &r.RewardRubricGuided }),
	numCol("count_temporal", func(r *StepMetrics) *int64 { return &r.CountTemporal }),
	numCol("count_backtranslate", func(r *StepMetrics) *int64 { return &r.CountBacktranslate }),
	numCol("count_rubric_guided", func(r *StepMetrics) *int64 { return &r.CountRubricGuided }),
	optF64Col("format_rate", func(r *StepMetrics) **float64 { return &r.FormatRate }),
	numCol("judge_missing_rate", func(r *StepMetrics) *float64 { return &r.JudgeMissingRate }),
	numCol("elapsed_s", func(r *StepMetrics) *float64 { return &r.ElapsedS }),
	numCol("skipped_updates", func(r *StepMetrics) *int64 { return &r.SkippedUpdates }),
	addedNumCol(3, "refill_prompts", func(r *StepMetrics) *int64 { return &r.RefillPrompts }),
	addedNumCol(3, "refill_rounds", func(r *StepMetrics) *int64 { return &r.RefillRounds }),
	addedNumCol(3, "groups_trained", func(r *StepMetrics) *int64 { return &r.GroupsTrained }),
	addedNumCol(4, "resp_len_p50", func(r *StepMetrics) *float64 { return &r.RespLenP50 }),
	addedNumCol(4, "resp_len_p95", func(r *StepMetrics) *float64 { return &r.RespLenP95 }),
	addedNumCol(4, "truncated_frac", func(r *StepMetrics) *float64 { return &r.TruncatedFrac }),
	addedNumCol(4, "rubric_len_mean", func(r *StepMetrics) *float64 { return &r.RubricLenMean }),
	addedNumCol(4, "rubric_len_p50", func(r *StepMetrics) *float64 { return &r.RubricLenP50 }),
	addedNumCol(4, "rubric_len_p95", func(r *StepMetrics) *float64 { return &r.RubricLenP95 }),
	added(4, optF64Col("margin_mean", func(r *StepMetrics) **float64 { return &r.MarginMean })),
	addedNumCol(4, "tokens_per_s", func(r *StepMetrics) *float64 { return &r.TokensPerS }),
	addedNumCol(4, "time_generation_s", func(r *StepMetrics) *float64 { return &r.TimeGenerationS }),
	addedNumCol(4, "time_rubrics_s", func(r *StepMetrics) *float64 { return &r.TimeRubricsS }),
	addedNumCol(4, "time_judge_s", func(r *StepMetrics) *float64 { return &r.TimeJudgeS }),
	addedNumCol(4, "time_ref_logprobs_s", func(r *StepMetrics) *float64 { return &r.TimeRefLogprobsS }),
	addedNumCol(4, "time_learner_s", func(r *StepMetrics) *float64 { return &r.TimeLearnerS }),
	addedNumCol(4, "time_weight_sync_s", func(r *StepMetrics) *float64 { return &r.TimeWeightSyncS }),
	addedNumCol(4, "time_writes_s", func(r *StepMetrics) *float64 { return &r.TimeWritesS }),
	addedNumCol(4, "time_checkpoint_s", func(r *StepMetrics) *float64 { return &r.TimeCheckpointS }),
	addedNumCol(4, "time_other_s", func(r *StepMetrics) *float64 { return &r.TimeOtherS }),
)

// DedupCluster is a row of the dedup_report table: one cluster of duplicate
// prompts and the one kept.
type DedupCluster struct {
	ClusterID  int64
	KeptID     string   // prompt_id of the keeper
	RemovedIDs []string // prompt_ids removed as its duplicates
	Method     string   // "exact" | "minhash"
	Similarity float64  // lowest estimated (or exact) Jaccard similarity to the keeper; 1 for exact
}

// DedupReport is the dedup_report table.
var DedupReport = newTable("dedup_report", 1,
	numCol("cluster_id", func(r *DedupCluster) *int64 { return &r.ClusterID }),
	strCol("kept_id", func(r *DedupCluster) *string { return &r.KeptID }),
	strListCol("removed_ids", func(r *DedupCluster) *[]string { return &r.RemovedIDs }),
	strCol("method", func(r *DedupCluster) *string { return &r.Method }),
	numCol("similarity", func(r *DedupCluster) *float64 { return &r.Similarity }),
)

// TableNames lists every table in a run directory.
var TableNames = []string{Prompts.Name, Rollouts.Name, Pairs.Name, Rubrics.Name, Judgments.Name, Steps.Name, DedupReport.Name}
