package run

import (
	"fmt"
	"strings"
	"time"

	"github.com/evolm/evolm/method/grpo"
	"github.com/evolm/evolm/method/pairs"
	"github.com/evolm/evolm/method/rules"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/serving/roles"
	"github.com/evolm/evolm/stages/rubrics"
)

// Name is the loop's registered name (`evolm run`, config section stages.run).
const Name = "run"

// Config keys (stages.run.*).
const (
	KeyInput           = "input"
	KeySteps           = "steps"
	KeyK               = "k"
	KeyPromptsPerStep  = "prompts_per_step"
	KeySamples         = "samples"
	KeyRubricSamples   = "rubric_samples"
	KeyInferTemp       = "infer_temperature"
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

	// Fidelity options (issue #9): each official behaviour beside evolm's.
	KeyTemporalAge      = "temporal_age"
	KeyTemporalFallback = "temporal_fallback"
	KeyAdvStd           = "adv_std"
	KeyRubricMissing    = "rubric_missing_reward"
	KeyActiveSampling   = "active_sampling"
	KeyActiveRounds     = "active_sampling_rounds"
	KeyPackLength       = "pack_length"
	KeyRubricPhaseTemp  = "rubric_phase_temperature"
	KeyRubricPhaseTopP  = "rubric_phase_top_p"
	KeyRubricFormat     = "rubric_format"
	KeyMemoryCheck      = "memory_check"
	KeyNonStopPenalty   = "non_stop_penalty"
	KeyNonStopValue     = "non_stop_penalty_value"

	// Real-size models: LoRA and activation checkpointing.
	KeyLoRARank          = "lora_rank"
	KeyLoRAAlpha         = "lora_alpha"
	KeyLoRADropout       = "lora_dropout"
	KeyLoRATargets       = "lora_targets"
	KeyGradCheckpointing = "grad_checkpointing"

	// Generation on an inference fleet (package stages/roles/fleet).
	KeyGenBackend   = "generation_backend"
	KeyGenEndpoints = "generation_endpoints"
	KeyGenInFlight  = "generation_max_in_flight"
	KeyGenTimeout   = "generation_request_timeout"
	KeyGenAttempts  = "generation_max_attempts"
	KeySyncDir      = "sync_dir"
	KeyTISCap       = "tis_cap"

	// Data parallelism (`evolm run --nproc N`, torchrun).
	KeyZeRO        = "zero_stage"
	KeyDistTimeout = "dist_timeout"
)

// genInProcess is generation_backend's default: the trained role generates
// on its own engine. Every other value is a fleet backend
// (roles.FleetBackends).
const genInProcess = "torch"

// maxActiveRounds bounds active_sampling_rounds: each round samples and
// judges up to prompts_per_step more prompts.
const maxActiveRounds = 64

// moved are the keys stages.run had before each model role was configured
// once (package roles), with their new place.
var moved = map[string]string{
	"policy_model":           "roles.policy.model",
	"rubric_model":           "roles.rubric_generator.model",
	"device":                 "roles.policy.device (and roles.judge.device, roles.rubric_generator.device)",
	"dtype":                  "roles.policy.dtype (and the other roles' dtype)",
	"threads":                "roles.policy.threads (and the other roles' threads)",
	"max_batch":              "roles.policy.max_batch (and the other roles' max_batch)",
	"disable_thinking":       "roles.policy.disable_thinking",
	"judge_backend":          "roles.judge.backend",
	"judge_model":            "roles.judge.model",
	"judge_endpoints":        "roles.judge.endpoints",
	"judge_mode":             "roles.judge.mode",
	"judge_temperature":      "roles.judge.temperature",
	"judge_max_tokens":       "roles.judge.max_tokens",
	"judge_max_in_flight":    "roles.judge.max_in_flight",
	"judge_disable_thinking": "roles.judge.disable_thinking",
	"max_new_tokens":         "roles.policy.max_tokens and roles.rubric_generator.max_tokens",
	"policy_temperature":     "roles.policy.temperature",
	"rubric_temperature":     "roles.rubric_generator.temperature",
	"top_p":                  "roles.policy.top_p and roles.rubric_generator.top_p",
	"prompt_files":           "roles.<role>.prompt_files (each role's own prompts)",
}

// KeyMaxSkippedUpdates stops the run after this many updates in a row
// skipped for a NaN or Inf loss or gradient norm.
const KeyMaxSkippedUpdates = "max_skipped_updates"

// maxSkippedUpdatesLimit bounds max_skipped_updates: a run that skips more
// updates in a row than this has stopped learning.
const maxSkippedUpdatesLimit = 1000

// Config is the loop's validated configuration.
type Config struct {
	Input []string
	// Policy, RubricGen and Judge are the roles (package roles); RubricGen.Shared
	// is the shared-model design.
	Policy, RubricGen, Judge roles.Config

	Steps, K, PromptsPerStep, Samples, RubricSamples int
	InferTemp                                        float64
	Alpha                                            float64
	RubricReward                                     grpo.RubricReward
	Weights                                          map[string]float64
	ReplaySize                                       int
	MinAge, MaxAge, Widen                            int64
	// TemporalAge and TemporalFallback are the temporal strategy's clock
	// and empty-window rule (pairs.AgeClock, pairs.Fallback).
	TemporalAge      pairs.AgeClock
	TemporalFallback pairs.Fallback
	// AdvStd is the group advantage's standard deviation.
	AdvStd grpo.AdvStd
	// RubricMissing is what a rubric whose pair the judge failed to score
	// gets: DropMissing (evolm) or FillGroupMean (official).
	RubricMissing grpo.MissingPolicy
	// ActiveRounds, when ActiveSampling, bounds the refill rounds of a
	// policy step (grpo.FillGroups).
	ActiveSampling bool
	ActiveRounds   int
	// RubricPhaseTemp and RubricPhaseTopP, when set (≥ 0 and > 0), are the
	// candidate rubrics' sampling in the rubric phase; unset, the rubric
	// phase samples with the role's own, as the policy phase does.
	RubricPhaseTemp, RubricPhaseTopP float64
	// NonStopPenalty, when set, gives a policy answer cut at max_tokens
	// (finish_reason length) the reward NonStopValue instead of its score.
	NonStopPenalty bool
	NonStopValue   float64
	// MemoryCheck runs the memory plan at start (stages/runplan.Refuse).
	MemoryCheck     bool
	InvalidRubric   string
	RubricFormat    schemas.RubricFormat
	CheckpointEvery int
	Seed            int64
	// Learner configures the trained roles' learner (their backend's).
	Learner backend.LearnerConfig
	// MaxSkippedUpdates is how many updates in a row may be skipped (NaN
	// or Inf loss or gradient norm) before the run stops.
	MaxSkippedUpdates int
	// Fleet, when non-nil, sends every generation of the trained role to
	// inference servers (generation_backend openai).
	Fleet *FleetConfig
	// ZeRO is the data-parallel optimizer sharding: 0 (none), 1 (AdamW
	// state) or 2 (state and gradients), by whole tensors.
	ZeRO int
	// DistTimeout bounds every collective of a data-parallel run: a rank
	// that died or stalled makes the others fail within it.
	DistTimeout time.Duration
}

// FleetConfig is the fleet that generates for the trained role.
type FleetConfig struct {
	Backend        string // the fleet's backend (roles.FleetBackends)
	Endpoints      []string
	MaxInFlight    int
	MaxAttempts    int
	RequestTimeout time.Duration
	// SyncDir holds the weights the servers load; "" is <run>/sync.
	SyncDir string
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
	// bounded returns f with bounds [lo, hi]; nil leaves a side open.
	bounded := func(fd pipeline.Field, lo, hi *float64, exLo, exHi bool) pipeline.Field {
		fd.Min, fd.Max, fd.ExclusiveMin, fd.ExclusiveMax = lo, hi, exLo, exHi
		return fd
	}
	zero, one, two := pipeline.Bound(0), pipeline.Bound(1), pipeline.Bound(2)
	return []pipeline.Field{
		f(KeyInput, pipeline.TypeStrings, []string{}, "prompts Parquet files or globs; empty: the prompts the dedup stage committed in this run"),
		bounded(f(KeySteps, pipeline.TypeInt, 200, "total training steps (policy and rubric steps together)"), one, pipeline.Bound(1e9), false, false),
		bounded(f(KeyK, pipeline.TypeInt, 50, "phase length: K policy steps, then K rubric steps, and so on"), one, nil, false, false),
		bounded(f(KeyPromptsPerStep, pipeline.TypeInt, 64, "prompts (policy step) or pairs (rubric step) per step"), one, pipeline.Bound(1<<20), false, false),
		bounded(f(KeySamples, pipeline.TypeInt, 8, "policy answers sampled per prompt (the GRPO group; at least 2)"), two, pipeline.Bound(1<<12), false, false),
		bounded(f(KeyRubricSamples, pipeline.TypeInt, 8, "candidate rubrics sampled per pair (the rubric phase's GRPO group; at least 2)"), two, pipeline.Bound(1<<12), false, false),
		bounded(f(KeyInferTemp, pipeline.TypeFloat, 0.3, "question back-translation temperature (the policy infers the question)"), zero, nil, false, false),
		bounded(f(KeyAlpha, pipeline.TypeFloat, 0.7, "rubric reward weight α of the score margin (1−α weighs R_format)"), zero, one, false, false),
		{Key: KeyRubricReward, Type: pipeline.TypeString, Default: string(grpo.RewardMargin),
			Enum:        []string{string(grpo.RewardMargin), string(grpo.RewardIndicator), string(grpo.RewardLogSigmoid)},
			Description: "margin s+−s− (paper), indicator 1[s+>s−] or logsigmoid of the margin (ablations)"},
		f(KeyStrategies, pipeline.TypeStrings, []string{schemas.StrategyTemporal, schemas.StrategyBacktranslate, schemas.StrategyRubricGuided},
			"pair strategies in use (temporal, backtranslate, rubric_guided); the others get weight 0"),
		bounded(f(KeyWTemporal, pipeline.TypeFloat, 1.0, "mixing weight of the temporal-contrast pair strategy"), zero, nil, false, false),
		bounded(f(KeyWBacktranslate, pipeline.TypeFloat, 1.0, "mixing weight of the question back-translation strategy"), zero, nil, false, false),
		bounded(f(KeyWRubricGuided, pipeline.TypeFloat, 1.0, "mixing weight of the rubric-guided strategy"), zero, nil, false, false),
		bounded(f(KeyReplaySize, pipeline.TypeInt, 2048, "replay buffer entries for temporal contrast"), one, pipeline.Bound(1<<24), false, false),
		bounded(f(KeyMinAge, pipeline.TypeInt, 20, "temporal contrast: youngest buffered answer, in steps"), one, nil, false, false),
		f(KeyMaxAge, pipeline.TypeInt, 100, "temporal contrast: oldest buffered answer, in steps (≥ temporal_min_age)"),
		bounded(f(KeyWiden, pipeline.TypeInt, 10, "temporal contrast: widen an empty age window by this many steps per side"), one, nil, false, false),
		{Key: KeyInvalidRubric, Type: pipeline.TypeString, Default: rules.InvalidRawText, Enum: rules.InvalidPolicies,
			Description: "judging under a rubric that fails R_format: raw_text (its text as one criterion) or skip (score missing)"},
		bounded(f(KeyCheckpointEvery, pipeline.TypeInt, 25, "write a checkpoint every this many steps (and after the last)"), one, nil, false, false),
		f(KeySeed, pipeline.TypeInt, 0, "base seed of every sampling and data-order draw"),
		bounded(f(KeyLR, pipeline.TypeFloat, 1e-6, "AdamW learning rate (constant)"), zero, nil, true, false),
		bounded(f(KeyBeta, pipeline.TypeFloat, 0.001, "KL coefficient β (k3 estimator against the initial policy); 0 disables the reference"), zero, nil, false, false),
		bounded(f(KeyEpsilon, pipeline.TypeFloat, 0.2, "PPO clip range ε"), zero, one, true, true),
		bounded(f(KeyEpsilonHigh, pipeline.TypeFloat, 0.0, "upper clip range (DAPO clip-higher); 0: same as epsilon"), zero, nil, false, false),
		{Key: KeyLossNorm, Type: pipeline.TypeString, Default: string(grpo.NormGRPO),
			Enum:        []string{string(grpo.NormGRPO), string(grpo.NormDAPO), string(grpo.NormDrGRPO), string(grpo.NormPack)},
			Description: "grpo: token mean per sequence then batch mean; dapo: token mean over the batch; dr_grpo: sum / (B·max_tokens); pack: token mean per packed row of pack_length tokens, then mean over rows (official)"},
		bounded(f(KeyMicroBatch, pipeline.TypeInt, 8, "sequences per forward/backward pass; gradients accumulate over the step"), one, pipeline.Bound(1<<16), false, false),
		f(KeyMaxGradNorm, pipeline.TypeFloat, 1.0, "clip the global gradient norm to this (≤ 0: no clipping)"),
		bounded(f(KeyWeightDecay, pipeline.TypeFloat, 0.0, "AdamW weight decay on ≥2-dim tensors"), zero, nil, false, false),
		{Key: KeyTemporalAge, Type: pipeline.TypeString, Default: string(pairs.AgePolicySteps),
			Enum:        []string{string(pairs.AgePolicySteps), string(pairs.AgeGlobalSteps)},
			Description: "temporal contrast age clock: policy_steps (official: the newest buffered policy step minus the entry's, policy steps only) or global_steps (this step minus the entry's, rubric steps included)"},
		{Key: KeyTemporalFallback, Type: pipeline.TypeString, Default: string(pairs.FallbackOfficial),
			Enum:        []string{string(pairs.FallbackOfficial), string(pairs.FallbackWiden)},
			Description: "empty age window: official (drop the max age, then halve the min age, then the older half of the buffer, then anything) or widen (by temporal_widen per side)"},
		{Key: KeyAdvStd, Type: pipeline.TypeString, Default: string(grpo.StdSample),
			Enum:        []string{string(grpo.StdPopulation), string(grpo.StdSample)},
			Description: "group advantage std: population (divide by n, numpy .std(), official) or sample (n−1, torch.std, TRL)"},
		{Key: KeyRubricMissing, Type: pipeline.TypeString, Default: "drop", Enum: []string{"drop", "fill_mean"},
			Description: "rubric phase, judge failed on a+ or a−: drop the rubric from its group, or fill_mean (the group's mean reward, zero advantage; official)"},
		f(KeyActiveSampling, pipeline.TypeBool, false, "policy steps refill groups whose rewards all tie with new prompts until prompts_per_step groups carry a signal (official ACTIVE_SAMPLING)"),
		bounded(f(KeyActiveRounds, pipeline.TypeInt, 4, "active sampling: most refill rounds per policy step (each samples as many new prompts as groups are missing)"),
			zero, pipeline.Bound(maxActiveRounds), false, false),
		bounded(f(KeyPackLength, pipeline.TypeInt, 18500, "loss_norm pack: packed row length in tokens (official PACK_LENGTH)"), one, pipeline.Bound(1<<22), false, false),
		bounded(f(KeyRubricPhaseTemp, pipeline.TypeFloat, -1.0, "rubric phase: candidate rubrics' temperature (the official code uses its training generation config, 1.0); negative: roles.rubric_generator.temperature, as in the policy phase"), pipeline.Bound(-1), nil, false, false),
		bounded(f(KeyRubricPhaseTopP, pipeline.TypeFloat, 0.0, "rubric phase: candidate rubrics' top_p (official 0.95); 0: roles.rubric_generator.top_p"), zero, one, false, false),
		rubrics.FormatField(KeyRubricFormat),
		f(KeyMemoryCheck, pipeline.TypeBool, true, "refuse at start a configuration whose memory plan (evolm plan) exceeds the policy device's free memory"),
		f(KeyNonStopPenalty, pipeline.TypeBool, false, "policy phase: an answer cut at max_tokens gets non_stop_penalty_value as its reward (official NON_STOP_PENALTY)"),
		f(KeyNonStopValue, pipeline.TypeFloat, 0.0, "the reward of an answer cut at max_tokens under non_stop_penalty"),
		bounded(f(KeyLoRARank, pipeline.TypeInt, 0, "LoRA rank r of the trained roles' adapters; 0: full fine-tuning"), zero, pipeline.Bound(4096), false, false),
		bounded(f(KeyLoRAAlpha, pipeline.TypeFloat, 16.0, "LoRA alpha (the adapter's term is scaled by alpha/r)"), zero, nil, true, false),
		bounded(f(KeyLoRADropout, pipeline.TypeFloat, 0.0, "LoRA dropout on the adapter's input while training"), zero, one, false, true),
		f(KeyLoRATargets, pipeline.TypeStrings, []string{"q", "k", "v", "o", "gate", "up", "down"},
			"LoRA target modules (q, k, v, o, gate, up, down or their *_proj names)"),
		f(KeyGradCheckpointing, pipeline.TypeBool, false, "recompute each decoder layer in backward instead of keeping its activations (less memory, ~30% more compute)"),
		bounded(f(KeyMaxSkippedUpdates, pipeline.TypeInt, 3, "stop the run after this many updates in a row skipped for a NaN or Inf loss or gradient norm"), one, pipeline.Bound(maxSkippedUpdatesLimit), false, false),
		{Key: KeyGenBackend, Type: pipeline.TypeString, Default: genInProcess, Enum: append([]string{genInProcess}, roles.FleetBackends()...),
			Description: "where the trained role generates (rollouts, rubrics, question inference, rubric-guided answers): torch (in process, on the weights being trained) or a fleet backend (openai: generation_endpoints, vLLM, SGLang or evolm serve, whose weights are synced after every step: LoRA adapters through vLLM's load_lora_adapter, full weights through SGLang's update_weights_from_disk)"},
		{Key: KeyGenEndpoints, Type: pipeline.TypeStrings, Default: []string{},
			Description: "generation_backend openai: base URLs of the servers", Example: []string{"http://127.0.0.1:8001/v1", "http://127.0.0.1:8002/v1"}},
		bounded(f(KeyGenInFlight, pipeline.TypeInt, 64, "generation_backend openai: most generation requests in flight over all servers"), one, pipeline.Bound(1<<16), false, false),
		{Key: KeyGenTimeout, Type: pipeline.TypeDuration, Default: "10m", Min: zero, ExclusiveMin: true,
			Description: "generation_backend openai: timeout of one HTTP attempt (a weight load included)"},
		bounded(f(KeyGenAttempts, pipeline.TypeInt, 6, "generation_backend openai: attempts per request (retries on 429, 5xx, timeouts, a server that died or lacks the current weights)"), one, pipeline.Bound(100), false, false),
		f(KeySyncDir, pipeline.TypeString, "", "generation_backend openai: directory for the weights the servers load after each step, readable by every server at the same path; empty: <run>/sync"),
		bounded(f(KeyZeRO, pipeline.TypeInt, 0, "data parallelism (evolm run --nproc N, or torchrun): 0 replicates the AdamW state on every rank, 1 shards it (and fp32 master weights) across ranks by whole tensors, 2 also shards the gradients (each reduced to its owning rank during backward and freed elsewhere)"), zero, two, false, false),
		{Key: KeyDistTimeout, Type: pipeline.TypeDuration, Default: "10m", Min: zero, ExclusiveMin: true,
			Description: "data parallelism: timeout of the rendezvous and of every collective; a rank that died or stalled makes the others stop within it"},
		bounded(f(KeyTISCap, pipeline.TypeFloat, 0.0, "truncated importance sampling: weight each token's policy-gradient term by min(exp(logπ_learner − logπ_sampler), tis_cap) (verl, TRL; 2 is TRL's former default); 0 disables it"), zero, nil, false, false),
	}
}

func init() {
	pipeline.Register(pipeline.Spec{
		Name:    Name,
		Summary: "the EVOLM co-evolution loop: alternate policy and rubric GRPO phases, checkpoint, resume",
		Description: `Runs EVOLM end to end (the paper's method): K policy steps (rubric generator frozen,
policy sampled n times per prompt, judged under one rubric per prompt, GRPO on
the policy), then K rubric steps (pairs from temporal contrast, question
back-translation and rubric guidance; n rubrics per pair; reward
α·(s+ − s−) + (1 − α)·R_format; GRPO on the rubric generator), and so on.
The policy, rubric generator and judge are the roles.* sections (model,
backend, device, sampling); this section holds the schedule, the pair
strategies, the rewards and the learner.
Writes rollouts, rubrics, judgments, pairs and steps tables per step and an HF
checkpoint every checkpoint_every steps; rerunning the same command (or
'evolm run --resume RUN_DIR') continues from the last checkpoint.`,
		Inputs:  []string{schemas.Prompts.Name},
		Outputs: []string{schemas.Rollouts.Name, schemas.Rubrics.Name, schemas.Judgments.Name, schemas.Pairs.Name, schemas.Steps.Name, "checkpoints"},
		FieldsFunc: fields,
		Uses:       roles.Uses(roles.Policy, roles.RubricGenerator, roles.Judge),
		Moved:   moved,
		// Raising steps continues a run; it does not change what was computed.
		// The fleet's addresses and limits may change (servers restarted
		// elsewhere) without changing what a step computes.
		Volatile: []string{KeySteps, KeyGenEndpoints, KeyGenInFlight, KeyGenTimeout, KeyGenAttempts, KeySyncDir, KeyDistTimeout},
		New:      func(cfg *pipeline.Config) (pipeline.Stage, error) { return newFromConfig(cfg) },
	})
}

// FromConfig reads and validates the loop's view (stages.run and the roles).
// The loader has checked every single-key bound; FromConfig checks the rules
// that span keys.
func FromConfig(cfg *pipeline.Config) (*Config, error) {
	c := &Config{
		Input: cfg.Strings(KeyInput),
		Steps: cfg.Int(KeySteps), K: cfg.Int(KeyK), PromptsPerStep: cfg.Int(KeyPromptsPerStep), Samples: cfg.Int(KeySamples),
		RubricSamples: cfg.Int(KeyRubricSamples), InferTemp: cfg.Float(KeyInferTemp), Alpha: cfg.Float(KeyAlpha),
		Weights: map[string]float64{
			schemas.StrategyTemporal: cfg.Float(KeyWTemporal), schemas.StrategyBacktranslate: cfg.Float(KeyWBacktranslate),
			schemas.StrategyRubricGuided: cfg.Float(KeyWRubricGuided),
		},
		ReplaySize: cfg.Int(KeyReplaySize), MinAge: int64(cfg.Int(KeyMinAge)), MaxAge: int64(cfg.Int(KeyMaxAge)), Widen: int64(cfg.Int(KeyWiden)),
		InvalidRubric: cfg.String(KeyInvalidRubric), CheckpointEvery: cfg.Int(KeyCheckpointEvery), Seed: int64(cfg.Int(KeySeed)),
		MaxSkippedUpdates: cfg.Int(KeyMaxSkippedUpdates),
		ActiveSampling:    cfg.Bool(KeyActiveSampling), ActiveRounds: cfg.Int(KeyActiveRounds),
		RubricPhaseTemp: cfg.Float(KeyRubricPhaseTemp), RubricPhaseTopP: cfg.Float(KeyRubricPhaseTopP),
		NonStopPenalty: cfg.Bool(KeyNonStopPenalty), NonStopValue: cfg.Float(KeyNonStopValue),
		MemoryCheck: cfg.Bool(KeyMemoryCheck),
		ZeRO:        cfg.Int(KeyZeRO), DistTimeout: cfg.Duration(KeyDistTimeout),
	}
	var err error
	for _, r := range []struct {
		name string
		dst  *roles.Config
	}{{roles.Policy, &c.Policy}, {roles.RubricGenerator, &c.RubricGen}, {roles.Judge, &c.Judge}} {
		if *r.dst, err = roles.Read(cfg, r.name); err != nil {
			return nil, err
		}
	}
	// The trained roles run in process: the learner updates their weights.
	for _, r := range []roles.Config{c.Policy, c.RubricGen} {
		if b, _ := roles.Lookup(r.Backend); b.Train == nil && r.Backend != roles.BackendTorch {
			role := r.Role
			if r.Shared {
				role = roles.Policy
			}
			return nil, cfg.At(roles.Section(role)).Errorf(roles.KeyBackend, "%s: evolm run trains the %s in process; want one of %s", r.Backend, r.Role, strings.Join(roles.Trainable(), ", "))
		}
	}
	if c.RubricReward, err = grpo.ParseRubricReward(cfg.String(KeyRubricReward)); err != nil {
		return nil, cfg.Errorf(KeyRubricReward, "%v", err)
	}
	norm, err := grpo.ParseLossNorm(cfg.String(KeyLossNorm))
	if err != nil {
		return nil, cfg.Errorf(KeyLossNorm, "%v", err)
	}
	if c.TemporalAge, err = pairs.ParseAgeClock(cfg.String(KeyTemporalAge)); err != nil {
		return nil, cfg.Errorf(KeyTemporalAge, "%v", err)
	}
	if c.TemporalFallback, err = pairs.ParseFallback(cfg.String(KeyTemporalFallback)); err != nil {
		return nil, cfg.Errorf(KeyTemporalFallback, "%v", err)
	}
	if c.RubricFormat, err = schemas.ParseRubricFormat(cfg.String(KeyRubricFormat)); err != nil {
		return nil, cfg.Errorf(KeyRubricFormat, "%v", err)
	}
	if c.AdvStd, err = grpo.ParseAdvStd(cfg.String(KeyAdvStd)); err != nil {
		return nil, cfg.Errorf(KeyAdvStd, "%v", err)
	}
	if c.RubricMissing, err = grpo.ParseMissingPolicy(cfg.String(KeyRubricMissing)); err != nil {
		return nil, cfg.Errorf(KeyRubricMissing, "%v", err)
	}
	c.Learner = backend.LearnerConfig{
		Beta: cfg.Float(KeyBeta), Epsilon: cfg.Float(KeyEpsilon), EpsilonHigh: cfg.Float(KeyEpsilonHigh),
		LossNorm: string(norm), MaxCompletionLen: c.Policy.Sampling.MaxTokens, PackLength: cfg.Int(KeyPackLength),
		TISCap: cfg.Float(KeyTISCap),
		LR:     cfg.Float(KeyLR), WeightDecay: cfg.Float(KeyWeightDecay), MaxGradNorm: cfg.Float(KeyMaxGradNorm), MicroBatch: cfg.Int(KeyMicroBatch),
		Seed: c.Seed, GradCheckpointing: cfg.Bool(KeyGradCheckpointing), ZeRO: c.ZeRO,
	}
	if r := cfg.Int(KeyLoRARank); r > 0 {
		c.Learner.LoRA = backend.LoRAConfig{Rank: r, Alpha: cfg.Float(KeyLoRAAlpha), Dropout: cfg.Float(KeyLoRADropout), Targets: cfg.Strings(KeyLoRATargets)}
		if c.Learner.LoRA.Dropout > 0 && c.Learner.GradCheckpointing {
			// Activation checkpointing recomputes each layer in backward; a
			// recompute would draw new dropout masks, and the gradients
			// would not be those of the forward.
			return nil, cfg.Errorf(KeyLoRADropout, "%v with grad_checkpointing: the backward recompute would draw new dropout masks; set lora_dropout to 0 or grad_checkpointing to false", c.Learner.LoRA.Dropout)
		}
	}
	if c.Learner, err = roles.CheckLearner(c.Policy, c.Learner); err != nil {
		return nil, cfg.Errorf(KeyLoRATargets, "%v", err)
	}
	if gb := cfg.String(KeyGenBackend); gb != genInProcess {
		c.Fleet = &FleetConfig{Backend: cfg.String(KeyGenBackend), Endpoints: cfg.Strings(KeyGenEndpoints), MaxInFlight: cfg.Int(KeyGenInFlight),
			MaxAttempts: cfg.Int(KeyGenAttempts), RequestTimeout: cfg.Duration(KeyGenTimeout), SyncDir: cfg.String(KeySyncDir)}
		if len(c.Fleet.Endpoints) == 0 {
			return nil, cfg.Errorf(KeyGenEndpoints, "generation_backend %s needs at least one endpoint", gb)
		}
		if !c.RubricGen.Shared {
			return nil, cfg.Errorf(KeyGenBackend, "%s with a rubric generator of its own (roles.rubric_generator.model): a fleet serves the one trained model of the shared-model design; leave roles.rubric_generator.model empty or generate in process (%s)", gb, genInProcess)
		}
	}
	if c.MaxAge < c.MinAge {
		return nil, cfg.Errorf(KeyMinAge, "temporal window [%d, %d], want 1 ≤ min ≤ max", c.MinAge, c.MaxAge)
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
	return c, nil
}

// PolicyIndex maps a policy-phase step to its number among policy steps
// (0, 1, …): steps 0…K−1 are policy steps 0…K−1, steps 2K…3K−1 are K…2K−1,
// and so on. It is the temporal strategy's policy_steps clock.
func (c *Config) PolicyIndex(step int64) int64 {
	k := int64(c.K)
	return step/(2*k)*k + min(step%(2*k), k)
}

// rubricPhaseSampling is the candidate rubrics' sampling in the rubric
// phase: the rubric generator's, at rubric_phase_temperature and top_p.
func (c *Config) rubricPhaseSampling() backend.Sampling {
	s := c.RubricGen.Sampling
	if c.RubricPhaseTemp >= 0 {
		s.Temperature = c.RubricPhaseTemp
	}
	if c.RubricPhaseTopP > 0 {
		s.TopP = c.RubricPhaseTopP
	}
	return s
}

// TrainerFor returns the learner config of the trainer of a trained role:
// dr_grpo normalizes by the role's max_tokens (the longest of both roles
// when one shared model is trained in both phases).
func (c *Config) TrainerFor(role string) backend.LearnerConfig {
	t := c.Learner
	switch {
	case role == roles.RubricGenerator && !c.RubricGen.Shared:
		t.MaxCompletionLen = c.RubricGen.Sampling.MaxTokens
	case c.RubricGen.Shared:
		t.MaxCompletionLen = max(c.Policy.Sampling.MaxTokens, c.RubricGen.Sampling.MaxTokens)
	}
	return t
}

func (c *Config) String() string {
	return fmt.Sprintf("steps=%d K=%d prompts/step=%d n=%d rubrics/pair=%d", c.Steps, c.K, c.PromptsPerStep, c.Samples, c.RubricSamples)
}
