package run

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/evolm/evolm/method/grpo"
	"github.com/evolm/evolm/method/pairs"
	"github.com/evolm/evolm/method/schedule"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/pipeline/track"
	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/serving/roles"
	"github.com/evolm/evolm/serving/runplan"
	"github.com/evolm/evolm/stages/rubrics"
)

// Name is the loop's registered name (`evolm run`, config section stages.run).
const Name = "run"

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
	"rubric_format":          rubrics.Section + ".format (one R_format reading for every stage)",
}

// Config is the loop's validated configuration: its keys (Keys) and what
// FromConfig derives from them.
type Config struct {
	Keys
	// Policy, RubricGen and Judge are the roles (package roles); RubricGen.Shared
	// is the shared-model design.
	Policy, RubricGen, Judge roles.Config
	// Rules are the shared rubric section's: the R_format reading and the
	// judge's reply reading.
	Rules rubrics.Rules
	// Weights are the pair strategies' mixing weights, 0 for a strategy
	// not in Strategies.
	Weights map[string]float64
	// rubricMissing is RubricMissing as a policy.
	rubricMissing grpo.MissingPolicy
	// Learner configures the trained roles' learner (their backend's).
	Learner backend.LearnerConfig
	// Fleet, when non-nil, sends every generation of the trained role to
	// inference servers (generation_backend names a fleet backend).
	Fleet *FleetConfig
	// Track are the trackers the loop reports to.
	Track track.Settings
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

// Schedule is the run's clock and data order.
func (c *Config) Schedule() schedule.Schedule {
	return schedule.Schedule{K: c.K, PromptsPerStep: c.PromptsPerStep, Seed: c.Seed, Order: c.PromptOrder}
}

// Phase returns the phase of step s.
func (c *Config) Phase(s int) string { return c.Schedule().Phase(s) }

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
		Outputs: []string{schemas.Rollouts.Name, schemas.Rubrics.Name, schemas.Judgments.Name, schemas.Pairs.Name, schemas.Steps.Name, "checkpoints", "tensorboard", "trackers"},
		// --fresh replaces the checkpoints and the trackers' files as a
		// whole, once the new run is done.
		Dirs:       []string{"checkpoints", "tensorboard", "trackers"},
		FieldsFunc: func() ([]pipeline.Field, error) { return pipeline.FieldsOf(Keys{}) },
		Uses:       append(roles.Uses(roles.Policy, roles.RubricGenerator, roles.Judge), rubrics.Section),
		Moved:      moved,
		// Raising steps continues a run; it does not change what was computed.
		// The fleet's addresses and limits may change (servers restarted
		// elsewhere) without changing what a step computes.
		Volatile: pipeline.VolatileOf(Keys{}),
		New:      func(cfg *pipeline.Config) (pipeline.Stage, error) { return newFromConfig(cfg) },
	})
}

// FromConfig reads and validates the loop's view (stages.run and the roles).
// The loader has checked every single-key bound; FromConfig checks the rules
// that span keys.
func FromConfig(cfg *pipeline.Config) (*Config, error) {
	c := &Config{}
	if err := pipeline.Bind(cfg, &c.Keys); err != nil {
		return nil, err
	}
	var err error
	if c.Rules, err = rubrics.ReadRules(cfg); err != nil {
		return nil, err
	}
	c.Weights = map[string]float64{schemas.StrategyTemporal: c.WeightTemporal, schemas.StrategyBacktranslate: c.WeightBacktrans,
		schemas.StrategyRubricGuided: c.WeightRubricGuide}
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
	if c.rubricMissing, err = grpo.ParseMissingPolicy(string(c.RubricMissing)); err != nil {
		return nil, cfg.Errorf("rubric_missing_reward", "%v", err)
	}
	c.Learner = backend.LearnerConfig{
		Beta: c.Beta, Epsilon: c.Epsilon, EpsilonHigh: c.EpsilonHigh, LossNorm: string(c.LossNorm),
		MaxCompletionLen: c.Policy.Sampling.MaxTokens, PackLength: c.PackLength, TISCap: c.TISCap,
		LR: c.LR, WeightDecay: c.WeightDecay, MaxGradNorm: c.MaxGradNorm, MicroBatch: c.MicroBatch,
		Seed: c.Seed, GradCheckpointing: c.GradCheckpointing, ZeRO: c.ZeRO,
	}
	if c.LoRARank > 0 {
		c.Learner.LoRA = backend.LoRAConfig{Rank: c.LoRARank, Alpha: c.LoRAAlpha, Dropout: c.LoRADropout, Targets: c.LoRATargets}
		if c.LoRADropout > 0 && c.GradCheckpointing {
			// Activation checkpointing recomputes each layer in backward; a
			// recompute would draw new dropout masks, and the gradients
			// would not be those of the forward.
			return nil, cfg.Errorf("lora_dropout", "%v with grad_checkpointing: the backward recompute would draw new dropout masks; set lora_dropout to 0 or grad_checkpointing to false", c.LoRADropout)
		}
	}
	if c.Learner, err = roles.CheckLearner(c.Policy, c.Learner); err != nil {
		return nil, cfg.Errorf("lora_targets", "%v", err)
	}
	if gb := c.GenBackend; gb != genInProcess {
		c.Fleet = &FleetConfig{Backend: string(gb), Endpoints: c.GenEndpoints, MaxInFlight: c.GenInFlight,
			MaxAttempts: c.GenAttempts, RequestTimeout: c.GenTimeout, SyncDir: c.SyncDir}
		if len(c.Fleet.Endpoints) == 0 {
			return nil, cfg.Errorf("generation_endpoints", "generation_backend %s needs at least one endpoint", gb)
		}
		if !c.RubricGen.Shared {
			return nil, cfg.Errorf("generation_backend", "%s with a rubric generator of its own (roles.rubric_generator.model): a fleet serves the one trained model of the shared-model design; leave roles.rubric_generator.model empty or generate in process (%s)", gb, genInProcess)
		}
	}
	if c.Track, err = c.Keys.Keys.Settings(cfg); err != nil {
		return nil, err
	}
	if c.UnusableRubric == UnusableJudge && c.Judge.Mode != schemas.JudgeGenerative {
		return nil, cfg.Errorf("unusable_rubric", "%s asks the generative judge under the rubric's text; roles.judge.mode %s scores criteria, and the rubric has none", UnusableJudge, c.Judge.Mode)
	}
	if c.MaxAge < c.MinAge {
		return nil, cfg.Errorf("temporal_min_age", "temporal window [%d, %d], want 1 ≤ min ≤ max", c.MinAge, c.MaxAge)
	}
	enabled := map[string]bool{}
	for _, s := range c.Strategies {
		if !slices.Contains(schemas.Strategies, s) {
			return nil, cfg.Errorf("strategies", "unknown strategy %q (known: %v)", s, schemas.Strategies)
		}
		enabled[s] = true
	}
	for k := range c.Weights {
		if !enabled[k] {
			c.Weights[k] = 0
		}
	}
	if c.Weights[schemas.StrategyTemporal]+c.Weights[schemas.StrategyBacktranslate]+c.Weights[schemas.StrategyRubricGuided] <= 0 {
		return nil, cfg.Errorf("weight_temporal", "every pair strategy has weight 0; give at least one a positive weight")
	}
	return c, nil
}

// PolicyIndex maps a policy-phase step to its number among policy steps
// (schedule.Schedule.PolicyIndex).
func (c *Config) PolicyIndex(step int64) int64 { return c.Schedule().PolicyIndex(step) }

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

// PlanOptions are the run's settings the memory plan needs beyond the roles
// and the learner (`evolm plan` adds its own).
func (c *Config) PlanOptions() runplan.Options {
	return runplan.Options{FrozenInferrer: c.InferSource == pairs.InferFrozenInitial}
}
