package loop

import (
	"fmt"
	"time"

	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/stages/grpo"
	"github.com/evolm/evolm/stages/internal/lmstage"
)

// Name is the loop's registered name (`evolm run`, config section stages.run).
const Name = "run"

// Config keys (stages.run.*).
const (
	KeyInput           = "input"
	KeyPolicyModel     = "policy_model"
	KeyRubricModel     = "rubric_model"
	KeyDevice          = "device"
	KeyDType           = "dtype"
	KeyThreads         = "threads"
	KeyMaxBatch        = "max_batch"
	KeyThinking        = "disable_thinking"
	KeyJudgeBackend    = "judge_backend"
	KeyJudgeModel      = "judge_model"
	KeyJudgeEndpoints  = "judge_endpoints"
	KeyJudgeMode       = "judge_mode"
	KeyJudgeTemp       = "judge_temperature"
	KeyJudgeMaxTokens  = "judge_max_tokens"
	KeyJudgeInFlight   = "judge_max_in_flight"
	KeyJudgeThinking   = "judge_disable_thinking"
	KeySteps           = "steps"
	KeyK               = "k"
	KeyPromptsPerStep  = "prompts_per_step"
	KeySamples         = "samples"
	KeyRubricSamples   = "rubric_samples"
	KeyMaxNewTokens    = "max_new_tokens"
	KeyPolicyTemp      = "policy_temperature"
	KeyRubricTemp      = "rubric_temperature"
	KeyInferTemp       = "infer_temperature"
	KeyTopP            = "top_p"
	KeyAlpha           = "alpha"
	KeyRubricReward    = "rubric_reward"
	KeyStrategies      = "strategies"
	KeyWTemporal       = "weight_temporal"
	KeyWBacktranslate  = "weight_backtranslate"
	KeyWRubricGuided   = "weight_rubric_guided"
	KeyReplaySize      = "replay_size"
	KeyMinAge          = "temporal_min_age"
	KeyMaxAge          = "temporal_max_age"
	KeyWiden           = "temporal_widen"
	KeyInvalidRubric   = "invalid_rubric"
	KeyCheckpointEvery = "checkpoint_every"
	KeySeed            = "seed"
	KeyLR              = "lr"
	KeyBeta            = "beta"
	KeyEpsilon         = "epsilon"
	KeyEpsilonHigh     = "epsilon_high"
	KeyLossNorm        = "loss_norm"
	KeyMicroBatch      = "micro_batch"
	KeyMaxGradNorm     = "max_grad_norm"
	KeyWeightDecay     = "weight_decay"
	KeyPromptFiles     = lmstage.KeyPromptFiles
)

// KeyMaxSkippedUpdates stops the run after this many updates in a row
// skipped for a NaN or Inf loss or gradient norm.
const KeyMaxSkippedUpdates = "max_skipped_updates"

// maxSkippedUpdatesLimit bounds max_skipped_updates: a run that skips more
// updates in a row than this has stopped learning.
const maxSkippedUpdatesLimit = 1000

// Config is the loop's validated configuration.
type Config struct {
	Input                    []string
	PolicyModel, RubricModel string
	Device, DType            string
	Threads, MaxBatch        int
	DisableThinking          bool
	Judge                    lmstage.BackendConfig
	JudgeMode                string
	JudgeTemp                float64
	JudgeMaxTokens           int

	Steps, K, PromptsPerStep, Samples, RubricSamples, MaxNewTokens int
	PolicyTemp, RubricTemp, InferTemp, TopP                        float64
	Alpha                                                          float64
	RubricReward                                                   grpo.RubricReward
	Weights                                                        map[string]float64
	ReplaySize                                                     int
	MinAge, MaxAge, Widen                                          int64
	InvalidRubric                                                  string
	CheckpointEvery                                                int
	Seed                                                           int64
	Trainer                                                        grpo.TrainerConfig
	// MaxSkippedUpdates is how many updates in a row may be skipped (NaN
	// or Inf loss or gradient norm) before the run stops.
	MaxSkippedUpdates int
}

// Phase returns the phase of step s.
func (c *Config) Phase(s int) string {
	if (s/c.K)%2 == 0 {
		return schemas.PhasePolicy
	}
	return schemas.PhaseRubric
}

func fields() []pipeline.Field {
	f := func(key string, t pipeline.FieldType, def any, desc string) pipeline.Field {
		return pipeline.Field{Key: key, Type: t, Default: def, Description: desc}
	}
	return []pipeline.Field{
		f(KeyInput, pipeline.TypeStrings, []string{}, "prompts Parquet files or globs; empty: the prompts the dedup stage committed in this run"),
		{Key: KeyPolicyModel, Type: pipeline.TypeString, Default: "", Required: true, Example: "runs/demo/models/policy",
			Description: "HF checkpoint directory of the initial policy (and rubric generator, when shared); also the KL reference"},
		f(KeyRubricModel, pipeline.TypeString, "", "two-model ablation: a separate rubric-generator checkpoint; empty: the policy model plays both roles"),
		f(KeyDevice, pipeline.TypeString, "cpu", "cpu, cuda or cuda:N for the trained model(s)"),
		f(KeyDType, pipeline.TypeString, "", "parameter dtype; empty: float32 on CPU, bfloat16 on CUDA"),
		f(KeyThreads, pipeline.TypeInt, 0, "libtorch intra-op threads; 0: libtorch's default"),
		f(KeyMaxBatch, pipeline.TypeInt, 64, "most sequences decoded together by the in-process engine"),
		f(KeyThinking, pipeline.TypeBool, false, "render chats with Qwen3 thinking disabled (empty <think> block)"),
		{Key: KeyJudgeBackend, Type: pipeline.TypeString, Default: lmstage.BackendTorch, Enum: []string{lmstage.BackendTorch, lmstage.BackendOpenAI},
			Description: "judge backend: torch (in process) or openai (OpenAI-compatible endpoints, e.g. vLLM)"},
		{Key: KeyJudgeModel, Type: pipeline.TypeString, Default: "", Required: true, Example: "runs/demo/models/judge",
			Description: "torch: the judge's checkpoint directory; openai: the served model name"},
		f(KeyJudgeEndpoints, pipeline.TypeStrings, []string{}, "openai judge: base URLs of the servers"),
		{Key: KeyJudgeMode, Type: pipeline.TypeString, Default: schemas.JudgeGenerative, Enum: []string{schemas.JudgeGenerative, schemas.JudgeYesNo},
			Description: "generative (JSON verdict) or yesno (P(yes) per criterion from log-probs)"},
		f(KeyJudgeTemp, pipeline.TypeFloat, 0.6, "generative judge temperature"),
		f(KeyJudgeMaxTokens, pipeline.TypeInt, 1024, "generative judge max new tokens"),
		f(KeyJudgeInFlight, pipeline.TypeInt, 32, "openai judge: most requests in flight"),
		f(KeyJudgeThinking, pipeline.TypeBool, false, "torch judge: render its prompts with Qwen3 thinking disabled (the policy's disable_thinking does not apply to the judge)"),
		f(KeySteps, pipeline.TypeInt, 200, "total training steps (policy and rubric steps together)"),
		f(KeyK, pipeline.TypeInt, 50, "phase length: K policy steps, then K rubric steps, and so on"),
		f(KeyPromptsPerStep, pipeline.TypeInt, 64, "prompts (policy step) or pairs (rubric step) per step"),
		f(KeySamples, pipeline.TypeInt, 8, "policy answers sampled per prompt (the GRPO group)"),
		f(KeyRubricSamples, pipeline.TypeInt, 8, "candidate rubrics sampled per pair (the rubric phase's GRPO group)"),
		f(KeyMaxNewTokens, pipeline.TypeInt, 1024, "max new tokens of every policy and rubric generation"),
		f(KeyPolicyTemp, pipeline.TypeFloat, 1.0, "policy sampling temperature"),
		f(KeyRubricTemp, pipeline.TypeFloat, 0.6, "rubric generator sampling temperature"),
		f(KeyInferTemp, pipeline.TypeFloat, 0.3, "question back-translation temperature"),
		f(KeyTopP, pipeline.TypeFloat, 1.0, "nucleus mass of policy and rubric sampling"),
		f(KeyAlpha, pipeline.TypeFloat, 0.7, "rubric reward weight α of the score margin (1−α weighs R_format); in [0, 1]"),
		{Key: KeyRubricReward, Type: pipeline.TypeString, Default: string(grpo.RewardMargin),
			Enum:        []string{string(grpo.RewardMargin), string(grpo.RewardIndicator), string(grpo.RewardLogSigmoid)},
			Description: "margin s+−s− (paper), indicator 1[s+>s−] or logsigmoid of the margin (ablations)"},
		f(KeyStrategies, pipeline.TypeStrings, []string{schemas.StrategyTemporal, schemas.StrategyBacktranslate, schemas.StrategyRubricGuided},
			"pair strategies in use (temporal, backtranslate, rubric_guided); the others get weight 0"),
		f(KeyWTemporal, pipeline.TypeFloat, 1.0, "mixing weight of the temporal-contrast pair strategy"),
		f(KeyWBacktranslate, pipeline.TypeFloat, 1.0, "mixing weight of the question back-translation strategy"),
		f(KeyWRubricGuided, pipeline.TypeFloat, 1.0, "mixing weight of the rubric-guided strategy"),
		f(KeyReplaySize, pipeline.TypeInt, 2048, "replay buffer entries for temporal contrast"),
		f(KeyMinAge, pipeline.TypeInt, 20, "temporal contrast: youngest buffered answer, in steps"),
		f(KeyMaxAge, pipeline.TypeInt, 100, "temporal contrast: oldest buffered answer, in steps"),
		f(KeyWiden, pipeline.TypeInt, 10, "temporal contrast: widen an empty age window by this many steps per side"),
		{Key: KeyInvalidRubric, Type: pipeline.TypeString, Default: "raw_text", Enum: []string{"raw_text", "skip"},
			Description: "judging under a rubric that fails R_format: raw_text (its text as one criterion) or skip (score missing)"},
		f(KeyCheckpointEvery, pipeline.TypeInt, 25, "write a checkpoint every this many steps (and after the last)"),
		f(KeySeed, pipeline.TypeInt, 0, "base seed of every sampling and data-order draw"),
		f(KeyLR, pipeline.TypeFloat, 1e-6, "AdamW learning rate (constant)"),
		f(KeyBeta, pipeline.TypeFloat, 0.001, "KL coefficient β (k3 estimator against the initial policy); 0 disables the reference"),
		f(KeyEpsilon, pipeline.TypeFloat, 0.2, "PPO clip range ε"),
		f(KeyEpsilonHigh, pipeline.TypeFloat, 0.0, "upper clip range (DAPO clip-higher); 0: same as epsilon"),
		{Key: KeyLossNorm, Type: pipeline.TypeString, Default: string(grpo.NormGRPO),
			Enum:        []string{string(grpo.NormGRPO), string(grpo.NormDAPO), string(grpo.NormDrGRPO)},
			Description: "grpo: token mean per sequence then batch mean; dapo: token mean over the batch; dr_grpo: sum / (B·max_new_tokens)"},
		f(KeyMicroBatch, pipeline.TypeInt, 8, "sequences per forward/backward pass; gradients accumulate over the step"),
		f(KeyMaxGradNorm, pipeline.TypeFloat, 1.0, "clip the global gradient norm to this (≤ 0: no clipping)"),
		f(KeyWeightDecay, pipeline.TypeFloat, 0.0, "AdamW weight decay on ≥2-dim tensors"),
		f(KeyMaxSkippedUpdates, pipeline.TypeInt, 3, fmt.Sprintf("stop the run after this many updates in a row skipped for a NaN or Inf loss or gradient norm; in [1, %d]", maxSkippedUpdatesLimit)),
		f(KeyPromptFiles, pipeline.TypeStrings, []string{}, "role prompt overrides, role=path (e.g. judge_yesno=my.tmpl)"),
	}
}

func init() {
	pipeline.Register(pipeline.Spec{
		Name:    Name,
		Summary: "the EVOLM co-evolution loop: alternate policy and rubric GRPO phases, checkpoint, resume",
		Description: `Runs EVOLM end to end (DESIGN §1): K policy steps (rubric generator frozen,
policy sampled n times per prompt, judged under one rubric per prompt, GRPO on
the policy), then K rubric steps (pairs from temporal contrast, question
back-translation and rubric guidance; n rubrics per pair; reward
α·(s+ − s−) + (1 − α)·R_format; GRPO on the rubric generator), and so on.
Writes rollouts, rubrics, judgments, pairs and steps tables per step and an HF
checkpoint every checkpoint_every steps; rerunning the same command (or
'evolm run --resume RUN_DIR') continues from the last checkpoint.`,
		Inputs:  []string{schemas.Prompts.Name},
		Outputs: []string{schemas.Rollouts.Name, schemas.Rubrics.Name, schemas.Judgments.Name, schemas.Pairs.Name, schemas.Steps.Name, "checkpoints"},
		Fields:  fields(),
		// Raising steps continues a run; it does not change what was computed.
		Volatile: []string{KeySteps},
		New:      func(cfg *pipeline.Config) (pipeline.Stage, error) { return newFromConfig(cfg) },
	})
}

// FromConfig reads and validates the loop's section (stages.run).
func FromConfig(cfg *pipeline.Config) (*Config, error) {
	c := &Config{
		Input: cfg.Strings(KeyInput), PolicyModel: cfg.String(KeyPolicyModel), RubricModel: cfg.String(KeyRubricModel),
		Device: cfg.String(KeyDevice), DType: cfg.String(KeyDType), Threads: cfg.Int(KeyThreads), MaxBatch: cfg.Int(KeyMaxBatch),
		DisableThinking: cfg.Bool(KeyThinking),
		Judge: lmstage.BackendConfig{
			Backend: cfg.String(KeyJudgeBackend), Model: cfg.String(KeyJudgeModel), Endpoints: cfg.Strings(KeyJudgeEndpoints),
			Device: cfg.String(KeyDevice), DType: cfg.String(KeyDType), Threads: cfg.Int(KeyThreads), MaxBatch: cfg.Int(KeyMaxBatch),
			DisableThinking: cfg.Bool(KeyJudgeThinking), MaxInFlight: cfg.Int(KeyJudgeInFlight), RequestTimeout: 10 * time.Minute,
			MaxAttempts: 6, BatchRows: 256, TopLogprobs: 20,
		},
		JudgeMode: cfg.String(KeyJudgeMode), JudgeTemp: cfg.Float(KeyJudgeTemp), JudgeMaxTokens: cfg.Int(KeyJudgeMaxTokens),
		Steps: cfg.Int(KeySteps), K: cfg.Int(KeyK), PromptsPerStep: cfg.Int(KeyPromptsPerStep), Samples: cfg.Int(KeySamples),
		RubricSamples: cfg.Int(KeyRubricSamples), MaxNewTokens: cfg.Int(KeyMaxNewTokens),
		PolicyTemp: cfg.Float(KeyPolicyTemp), RubricTemp: cfg.Float(KeyRubricTemp), InferTemp: cfg.Float(KeyInferTemp), TopP: cfg.Float(KeyTopP),
		Alpha: cfg.Float(KeyAlpha),
		Weights: map[string]float64{
			schemas.StrategyTemporal: cfg.Float(KeyWTemporal), schemas.StrategyBacktranslate: cfg.Float(KeyWBacktranslate),
			schemas.StrategyRubricGuided: cfg.Float(KeyWRubricGuided),
		},
		ReplaySize: cfg.Int(KeyReplaySize), MinAge: int64(cfg.Int(KeyMinAge)), MaxAge: int64(cfg.Int(KeyMaxAge)), Widen: int64(cfg.Int(KeyWiden)),
		InvalidRubric: cfg.String(KeyInvalidRubric), CheckpointEvery: cfg.Int(KeyCheckpointEvery), Seed: int64(cfg.Int(KeySeed)),
		MaxSkippedUpdates: cfg.Int(KeyMaxSkippedUpdates),
	}
	var err error
	if c.RubricReward, err = grpo.ParseRubricReward(cfg.String(KeyRubricReward)); err != nil {
		return nil, cfg.Errorf(KeyRubricReward, "%v", err)
	}
	norm, err := grpo.ParseLossNorm(cfg.String(KeyLossNorm))
	if err != nil {
		return nil, cfg.Errorf(KeyLossNorm, "%v", err)
	}
	c.Trainer = grpo.TrainerConfig{
		Loss: grpo.LossConfig{Beta: cfg.Float(KeyBeta), Epsilon: cfg.Float(KeyEpsilon), EpsilonHigh: cfg.Float(KeyEpsilonHigh),
			Norm: norm, MaxCompletionLen: c.MaxNewTokens},
		LR: cfg.Float(KeyLR), WeightDecay: cfg.Float(KeyWeightDecay), MaxGradNorm: cfg.Float(KeyMaxGradNorm), MicroBatch: cfg.Int(KeyMicroBatch),
	}
	positive := []struct {
		key string
		v   int
	}{
		{KeySteps, c.Steps}, {KeyK, c.K}, {KeyPromptsPerStep, c.PromptsPerStep}, {KeySamples, c.Samples},
		{KeyRubricSamples, c.RubricSamples}, {KeyMaxNewTokens, c.MaxNewTokens}, {KeyReplaySize, c.ReplaySize},
		{KeyCheckpointEvery, c.CheckpointEvery}, {KeyMicroBatch, c.Trainer.MicroBatch}, {KeyMaxBatch, c.MaxBatch},
		{KeyJudgeMaxTokens, c.JudgeMaxTokens}, {KeyJudgeInFlight, c.Judge.MaxInFlight},
	}
	for _, p := range positive {
		if p.v <= 0 {
			return nil, cfg.Errorf(p.key, "%d, want > 0", p.v)
		}
	}
	switch {
	case c.MaxSkippedUpdates < 1 || c.MaxSkippedUpdates > maxSkippedUpdatesLimit:
		return nil, cfg.Errorf(KeyMaxSkippedUpdates, "%d, want in [1, %d]", c.MaxSkippedUpdates, maxSkippedUpdatesLimit)
	case c.Alpha < 0 || c.Alpha > 1:
		return nil, cfg.Errorf(KeyAlpha, "%v, want in [0, 1]", c.Alpha)
	case c.Samples < 2:
		return nil, cfg.Errorf(KeySamples, "%d: a GRPO group needs at least 2 samples", c.Samples)
	case c.RubricSamples < 2:
		return nil, cfg.Errorf(KeyRubricSamples, "%d: a GRPO group needs at least 2 rubrics", c.RubricSamples)
	case c.MinAge < 1 || c.MaxAge < c.MinAge:
		return nil, cfg.Errorf(KeyMinAge, "temporal window [%d, %d], want 1 ≤ min ≤ max", c.MinAge, c.MaxAge)
	case c.Widen <= 0:
		return nil, cfg.Errorf(KeyWiden, "%d, want > 0", c.Widen)
	case c.Trainer.LR <= 0:
		return nil, cfg.Errorf(KeyLR, "%v, want > 0", c.Trainer.LR)
	case c.Trainer.Loss.Beta < 0:
		return nil, cfg.Errorf(KeyBeta, "%v, want ≥ 0", c.Trainer.Loss.Beta)
	case c.Trainer.Loss.Epsilon <= 0 || c.Trainer.Loss.Epsilon >= 1:
		return nil, cfg.Errorf(KeyEpsilon, "%v, want in (0, 1)", c.Trainer.Loss.Epsilon)
	case c.PolicyTemp < 0 || c.RubricTemp < 0 || c.InferTemp < 0 || c.JudgeTemp < 0:
		return nil, cfg.Errorf(KeyPolicyTemp, "temperatures must be ≥ 0")
	case c.TopP <= 0 || c.TopP > 1:
		return nil, cfg.Errorf(KeyTopP, "%v, want in (0, 1]", c.TopP)
	case c.Judge.Backend == lmstage.BackendOpenAI && len(c.Judge.Endpoints) == 0:
		return nil, cfg.Errorf(KeyJudgeEndpoints, "the openai judge needs at least one endpoint")
	}
	for _, k := range []string{KeyWTemporal, KeyWBacktranslate, KeyWRubricGuided} {
		if cfg.Float(k) < 0 {
			return nil, cfg.Errorf(k, "%v, want ≥ 0", cfg.Float(k))
		}
	}
	enabled := map[string]bool{}
	for _, s := range cfg.Strings(KeyStrategies) {
		known := false
		for _, k := range schemas.Strategies {
			known = known || k == s
		}
		if !known {
			return nil, cfg.Errorf(KeyStrategies, "unknown strategy %q (known: %v)", s, schemas.Strategies)
		}
		enabled[s] = true
	}
	for k := range c.Weights {
		if !enabled[k] {
			c.Weights[k] = 0
		}
	}
	if c.Weights[schemas.StrategyTemporal]+c.Weights[schemas.StrategyBacktranslate]+c.Weights[schemas.StrategyRubricGuided] <= 0 {
		return nil, cfg.Errorf(KeyWTemporal, "every pair strategy has weight 0; give at least one a positive weight")
	}
	if c.RubricModel == c.PolicyModel {
		c.RubricModel = ""
	}
	return c, nil
}

func (c *Config) String() string {
	return fmt.Sprintf("steps=%d K=%d prompts/step=%d n=%d rubrics/pair=%d", c.Steps, c.K, c.PromptsPerStep, c.Samples, c.RubricSamples)
}
