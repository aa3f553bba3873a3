package run

import (
	"time"

	"github.com/evolm/evolm/method/grpo"
	"github.com/evolm/evolm/method/pairs"
	"github.com/evolm/evolm/method/rules"
	"github.com/evolm/evolm/method/schedule"
	"github.com/evolm/evolm/pipeline/track"
	"github.com/evolm/evolm/serving/roles"
)

// Keys are stages.run's keys, each declared once: its name, default, bounds
// and help are the field's tags (pipeline.FieldsOf), and FromConfig reads
// them with pipeline.Bind. A key whose values come from a registry (a
// reward, an advantage estimator, a fleet backend) has a type whose Enum
// method asks the registry.
type Keys struct {
	// Data and schedule.
	Input          []string       `key:"input" help:"prompts Parquet files or globs; empty: the prompts the dedup stage committed in this run"`
	Steps          int            `key:"steps" default:"200" min:"1" max:"1e9" volatile:"true" help:"total training steps (policy and rubric steps together)"`
	K              int            `key:"k" default:"50" min:"1" help:"phase length: K policy steps, then K rubric steps, and so on"`
	PromptsPerStep int            `key:"prompts_per_step" default:"64" min:"1" max:"1048576" help:"prompts (policy step) or pairs (rubric step) per step"`
	Samples        int            `key:"samples" default:"8" min:"2" max:"4096" help:"policy answers sampled per prompt (the GRPO group; at least 2)"`
	RubricSamples  int            `key:"rubric_samples" default:"8" min:"2" max:"4096" help:"candidate rubrics sampled per pair (the rubric phase's GRPO group; at least 2)"`
	Seed           int64          `key:"seed" default:"0" help:"base seed of every sampling and data-order draw"`
	PromptOrder    schedule.Order `key:"prompt_order" default:"fresh" help:"which prompts each phase's steps take from the seeded prompt stream: fresh (one walk through both phases: step s takes positions s·P…, so rubric steps see prompts the policy never saw) or replay (the official code's: each phase walks the stream from its start, so the rubric phase replays the prompts the policy saw first)"`

	// Rewards and advantages.
	PolicyReward   grpo.PolicyRewardName `key:"policy_reward" default:"judge_score" help:"the policy's reward (method/grpo.PolicyRewards)"`
	RubricReward   grpo.RubricRewardName `key:"rubric_reward" default:"margin" help:"the rubric generator's reward (method/grpo.RubricRewards): margin s+−s− (paper), indicator 1[s+>s−] or logsigmoid of the margin (ablations), each blended with R_format by alpha"`
	Alpha          float64               `key:"alpha" default:"0.7" min:"0" max:"1" help:"rubric reward weight α of the score margin (1−α weighs R_format)"`
	Advantage      grpo.AdvantageName    `key:"advantage" default:"grpo" help:"the advantage estimator (method/grpo.Advantages): grpo (r − mean)/(std + 1e-8), dr_grpo r − mean, rloo leave-one-out"`
	AdvStd         grpo.AdvStd           `key:"adv_std" default:"sample" help:"group advantage std: population (divide by n, numpy .std(), official) or sample (n−1, torch.std, TRL)"`
	RubricMissing  grpo.MissingRule      `key:"rubric_missing_reward" default:"drop" help:"rubric phase, judge failed on a+ or a−: drop the rubric from its group, or fill_mean (the group's mean reward, zero advantage; official)"`
	NonStopPenalty bool                  `key:"non_stop_penalty" default:"false" help:"policy phase: an answer cut at max_tokens gets non_stop_penalty_value as its reward (grpo_fast's NON_STOP_PENALTY); false judges it like any other answer, as the official joint trainer does"`
	NonStopValue   float64               `key:"non_stop_penalty_value" default:"0" help:"the reward of an answer cut at max_tokens under non_stop_penalty"`
	ActiveSampling bool                  `key:"active_sampling" default:"false" help:"policy steps refill groups whose rewards all tie with new prompts until prompts_per_step groups carry a signal (official ACTIVE_SAMPLING)"`
	RubricActive   bool                  `key:"rubric_active_sampling" default:"false" help:"rubric steps refill pair groups whose rubric rewards all tie with pairs of new prompts until prompts_per_step groups carry a signal (the official code's active sampling runs in both phases)"`
	ActiveRounds   int                   `key:"active_sampling_rounds" default:"4" min:"0" max:"64" help:"active sampling: most refill rounds per step, in either phase (each samples as many new prompts as groups are missing; the official code has no cap)"`

	// Rubrics (R_format and the judge's reply are read as the shared
	// rubric section says: rubric.format, rubric.judge_reply).
	InvalidRubric   rules.InvalidPolicy `key:"invalid_rubric" default:"raw_text" help:"judging under a rubric that fails R_format: raw_text (its text as one criterion) or skip (score missing)"`
	UnusableRubric  UnusableRule        `key:"unusable_rubric" default:"zero" help:"a rubric the judge has no criterion of (nothing parses, not even text for raw_text: e.g. thinking cut at max_tokens): zero (no judge call; the rubric phase pays it 0, the policy phase has no score) or judge (the official code's: the generative judge is asked under its text anyway, empty or not, and it earns its reward like any rubric)"`
	RubricPhaseTemp float64             `key:"rubric_phase_temperature" default:"-1" min:"-1" help:"rubric phase: candidate rubrics' temperature (the official code uses its training generation config, 1.0); negative: roles.rubric_generator.temperature, as in the policy phase"`
	RubricPhaseTopP float64             `key:"rubric_phase_top_p" default:"0" min:"0" max:"1" help:"rubric phase: candidate rubrics' top_p (official 0.95); 0: roles.rubric_generator.top_p"`

	// Pairs.
	Strategies        []string          `key:"strategies" default:"temporal,backtranslate,rubric_guided" help:"pair strategies in use (temporal, backtranslate, rubric_guided); the others get weight 0"`
	WeightTemporal    float64           `key:"weight_temporal" default:"1" min:"0" help:"mixing weight of the temporal-contrast pair strategy"`
	WeightBacktrans   float64           `key:"weight_backtranslate" default:"1" min:"0" help:"mixing weight of the question back-translation strategy"`
	WeightRubricGuide float64           `key:"weight_rubric_guided" default:"1" min:"0" help:"mixing weight of the rubric-guided strategy"`
	InferTemp         float64           `key:"infer_temperature" default:"0.3" min:"0" help:"question back-translation temperature"`
	InferSource       pairs.InferSource `key:"backtranslate_source" default:"policy" help:"the model that infers back-translated questions: policy (the model being trained) or frozen_initial (the official default: a frozen copy of roles.policy.model, loaded a second time on its device and never updated)"`
	ReplaySize        int               `key:"replay_size" default:"2048" min:"1" max:"16777216" help:"replay buffer entries for temporal contrast"`
	ReplayFill        pairs.ReplayFill  `key:"replay_fill" default:"step_batch" help:"which answers of a policy step enter the replay buffer, one (the group's first) per prompt: step_batch (the step's own prompts) or every_group (the official code's: every prompt whose rewards were computed, active-sampling refills and groups whose rewards tie included)"`
	MinAge            int64             `key:"temporal_min_age" default:"20" min:"1" help:"temporal contrast: youngest buffered answer, in steps"`
	MaxAge            int64             `key:"temporal_max_age" default:"100" help:"temporal contrast: oldest buffered answer, in steps (≥ temporal_min_age)"`
	Widen             int64             `key:"temporal_widen" default:"10" min:"1" help:"temporal contrast: widen an empty age window by this many steps per side"`
	TemporalAge       pairs.AgeClock    `key:"temporal_age" default:"policy_steps" help:"temporal contrast age clock: policy_steps (the newest buffered policy step minus the entry's, policy steps only), global_steps (this step minus the entry's, rubric steps included) or newest_global (the official code's: the newest buffered entry's step minus the entry's, rubric steps included)"`
	TemporalFallback  pairs.Fallback    `key:"temporal_fallback" default:"official" help:"empty age window: official (drop the max age, then halve the min age, then the older half of the buffer, then anything) or widen (by temporal_widen per side)"`

	// Learner.
	LR                float64       `key:"lr" default:"1e-6" gt:"0" help:"AdamW learning rate (constant)"`
	Beta              float64       `key:"beta" default:"0.001" min:"0" help:"KL coefficient β (k3 estimator against the initial policy); 0 disables the reference"`
	Epsilon           float64       `key:"epsilon" default:"0.2" gt:"0" lt:"1" help:"PPO clip range ε"`
	EpsilonHigh       float64       `key:"epsilon_high" default:"0" min:"0" help:"upper clip range (DAPO clip-higher); 0: same as epsilon"`
	LossNorm          grpo.LossNorm `key:"loss_norm" default:"grpo" help:"grpo: token mean per sequence then batch mean; dapo: token mean over the batch; dr_grpo: sum / (B·max_tokens); pack: token mean per packed row of pack_length tokens, then mean over rows (official)"`
	PackLength        int           `key:"pack_length" default:"18500" min:"1" max:"4194304" help:"loss_norm pack: packed row length in tokens (official PACK_LENGTH)"`
	MicroBatch        int           `key:"micro_batch" default:"8" min:"1" max:"65536" help:"sequences per forward/backward pass; gradients accumulate over the step"`
	MaxGradNorm       float64       `key:"max_grad_norm" default:"1" help:"clip the global gradient norm to this (≤ 0: no clipping)"`
	WeightDecay       float64       `key:"weight_decay" default:"0" min:"0" help:"AdamW weight decay on ≥2-dim tensors"`
	TISCap            float64       `key:"tis_cap" default:"0" min:"0" help:"truncated importance sampling: weight each token's policy-gradient term by min(exp(logπ_learner − logπ_sampler), tis_cap) (verl, TRL; 2 is TRL's former default); 0 disables it"`
	LoRARank          int           `key:"lora_rank" default:"0" min:"0" max:"4096" help:"LoRA rank r of the trained roles' adapters; 0: full fine-tuning"`
	LoRAAlpha         float64       `key:"lora_alpha" default:"16" gt:"0" help:"LoRA alpha (the adapter's term is scaled by alpha/r)"`
	LoRADropout       float64       `key:"lora_dropout" default:"0" min:"0" lt:"1" help:"LoRA dropout on the adapter's input while training"`
	LoRATargets       []string      `key:"lora_targets" default:"q,k,v,o,gate,up,down" help:"LoRA target modules (q, k, v, o, gate, up, down or their *_proj names)"`
	GradCheckpointing bool          `key:"grad_checkpointing" default:"false" help:"recompute each decoder layer in backward instead of keeping its activations (less memory, ~30% more compute)"`
	MaxSkippedUpdates int           `key:"max_skipped_updates" default:"3" min:"1" max:"1000" help:"stop the run after this many updates in a row skipped for a NaN or Inf loss or gradient norm"`

	// Checkpoints and guards.
	CheckpointEvery int  `key:"checkpoint_every" default:"25" min:"1" help:"write a checkpoint every this many steps (and after the last)"`
	MemoryCheck     bool `key:"memory_check" default:"true" help:"refuse at start a configuration whose memory plan (evolm plan) exceeds the policy device's free memory"`
	// Volatile: accepting a changed model is a decision about this resume,
	// not a setting of the run.
	AcceptChangedModels bool `key:"accept_changed_models" default:"false" volatile:"true" help:"resume even though a model's files changed since the run started (the run's models.json holds their fingerprints); the new ones are recorded"`

	// Generation on a fleet of servers.
	GenBackend   GenBackend    `key:"generation_backend" default:"torch" help:"where the trained role generates (rollouts, rubrics, question inference, rubric-guided answers): torch (in process, on the weights being trained) or a fleet backend (openai: generation_endpoints, vLLM, SGLang or evolm serve, whose weights are synced after every step: LoRA adapters through vLLM's load_lora_adapter, full weights through SGLang's update_weights_from_disk)"`
	GenEndpoints []string      `key:"generation_endpoints" volatile:"true" example:"http://127.0.0.1:8001/v1,http://127.0.0.1:8002/v1" help:"generation_backend openai: base URLs of the servers"`
	GenInFlight  int           `key:"generation_max_in_flight" default:"64" min:"1" max:"65536" volatile:"true" help:"generation_backend openai: most generation requests in flight over all servers"`
	GenTimeout   time.Duration `key:"generation_request_timeout" default:"10m" gt:"0" volatile:"true" help:"generation_backend openai: timeout of one HTTP attempt (a weight load included)"`
	GenAttempts  int           `key:"generation_max_attempts" default:"6" min:"1" max:"100" volatile:"true" help:"generation_backend openai: attempts per request (retries on 429, 5xx, timeouts, a server that died or lacks the current weights)"`
	SyncDir      string        `key:"sync_dir" volatile:"true" help:"generation_backend openai: directory for the weights the servers load after each step, readable by every server at the same path; empty: <run>/sync"`

	// Data parallelism.
	ZeRO        int           `key:"zero_stage" default:"0" min:"0" max:"2" help:"data parallelism (evolm run --nproc N, or torchrun): 0 replicates the AdamW state on every rank, 1 shards it (and fp32 master weights) across ranks by whole tensors, 2 also shards the gradients (each reduced to its owning rank during backward and freed elsewhere)"`
	DistTimeout time.Duration `key:"dist_timeout" default:"10m" gt:"0" volatile:"true" help:"data parallelism: timeout of the rendezvous and of every collective; a rank that died or stalled makes the others stop within it"`

	// Trackers (package pipeline/track): the keys every stage that reports
	// to trackers declares.
	track.Keys
}

// UnusableRule is unusable_rubric: what a rubric with no criterion the
// judge can apply gets.
type UnusableRule string

const (
	// UnusableZero makes no judge call: the rubric phase pays 0 (no margin,
	// no format credit), the policy phase's answers have no score.
	UnusableZero UnusableRule = "zero"
	// UnusableJudge asks the generative judge under the rubric's text
	// anyway (the official code's rule).
	UnusableJudge UnusableRule = "judge"
)

// Enum lists the rules.
func (UnusableRule) Enum() []string { return []string{string(UnusableZero), string(UnusableJudge)} }

// GenBackend is generation_backend: the trained role's own engine (torch,
// in process) or a backend that serves a fleet (roles.FleetBackends).
type GenBackend string

// genInProcess is generation_backend's default: the trained role generates
// on its own engine.
const genInProcess GenBackend = "torch"

// Enum lists in-process generation and the registered fleet backends.
func (GenBackend) Enum() []string {
	return append([]string{string(genInProcess)}, roles.FleetBackends()...)
}
