// Package roles defines the three model roles of EVOLM once each — the
// policy, the rubric generator and the judge — and opens a role into the
// backend interfaces (model/backend: Generator, Scorer, LogProber).
//
// # Config
//
// Each role is one top-level config section, registered here:
//
//	roles.policy.*             env EVOLM_ROLES_POLICY_<KEY>            flags --policy-<key>
//	roles.rubric_generator.*   env EVOLM_ROLES_RUBRIC_GENERATOR_<KEY>  flags --rubric-generator-<key>
//	roles.judge.*              env EVOLM_ROLES_JUDGE_<KEY>             flags --judge-<key>
//
// A role holds its engine (backend, model, endpoints, device, dtype,
// threads, max_batch, disable_thinking, max_in_flight, request_timeout,
// max_attempts), how many requests go to it per call (batch_rows), its
// sampling defaults (temperature, top_p, top_k, max_tokens, stop) and its
// prompt variant (prompt_variant: policy none | assistant; rubric_generator
// and judge official | evolm; see stages/prompts) and prompt overrides
// (prompt_files, which win over the variant); the judge also its mode and
// top_logprobs. Every stage that calls a model (rollout, rubrics, judge,
// eval, replay, run) reads these sections and keeps only what is its own
// (inputs, n, phase, step, seed).
//
// The rubric generator with an empty model is the shared-model design: the
// policy's model plays it by prompt, through the policy's engine settings,
// and only its batch_rows, sampling, prompt_variant and prompt_files are its
// own; setting one of its engine keys without a model is an error. A model of
// its own is the two-model ablation, and then every key of the section
// applies.
//
// # Backends
//
// Open dispatches on the role's backend. `openai` (model/openai) is built
// in; `torch`, the in-process engine, is registered by package
// stages/roles/torchrole, which binaries (cmd/evolm) and tests that run
// models in process import for its side effect. Keeping the engine out of
// this package keeps it out of everything that only composes roles.
package roles

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/evolm/evolm/method/prompts"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/serving/openai"
)

// Role names: the last component of each section.
const (
	Policy          = schemas.RolePolicy          // "policy"
	RubricGenerator = schemas.RoleRubricGenerator // "rubric_generator"
	Judge           = schemas.RoleJudge           // "judge"
)

// Names lists the roles in the order they are documented.
var Names = []string{Policy, RubricGenerator, Judge}

// Backend names.
const (
	BackendTorch  = "torch"
	BackendOpenAI = "openai"
)

// Config keys of a role section.
const (
	KeyBackend     = "backend"
	KeyModel       = "model"
	KeyEndpoints   = "endpoints"
	KeyDevice      = "device"
	KeyDType       = "dtype"
	KeyThreads     = "threads"
	KeyMaxBatch    = "max_batch"
	KeyThinking    = "disable_thinking"
	KeyInFlight    = "max_in_flight"
	KeyTimeout     = "request_timeout"
	KeyAttempts    = "max_attempts"
	KeyBatchRows   = "batch_rows"
	KeyTemperature = "temperature"
	KeyTopP        = "top_p"
	KeyTopK        = "top_k"
	KeyMaxTokens   = "max_tokens"
	KeyStop        = "stop"
	KeyPromptFiles = "prompt_files"
	KeyVariant     = "prompt_variant"
	KeyMode        = "mode"         // judge only
	KeyTopLogprobs = "top_logprobs" // judge only
)

// engineKeys are the keys that choose and run a model; a shared rubric
// generator takes them from the policy.
var engineKeys = []string{KeyBackend, KeyEndpoints, KeyDevice, KeyDType, KeyThreads, KeyMaxBatch, KeyThinking,
	KeyInFlight, KeyTimeout, KeyAttempts}

// Section returns the config section of a role: "roles.<role>".
func Section(role string) string { return "roles." + role }

// Uses returns the sections a stage calling the given roles reads (for
// pipeline.Spec.Uses): the rubric generator brings the policy's, whose
// model it shares by default.
func Uses(rs ...string) []string {
	seen := map[string]bool{}
	var out []string
	add := func(r string) {
		if !seen[r] {
			seen[r] = true
			out = append(out, Section(r))
		}
	}
	for _, r := range rs {
		if r == RubricGenerator {
			add(Policy)
		}
		add(r)
	}
	return out
}

// templates are the role prompts each role renders (prompts.Name).
var templates = map[string][]prompts.Name{
	Policy:          {prompts.Policy, prompts.PolicyWithRubric, prompts.QuestionInference},
	RubricGenerator: {prompts.RubricQuestion, prompts.RubricPair},
	Judge:           {prompts.JudgeGenerative, prompts.JudgeYesNo},
}

// variants are the prompt variants of each role, the default first: the
// variants of its prompts that have any (prompts.Variants).
var variants = map[string][]string{
	Policy:          prompts.Variants[prompts.Policy],
	RubricGenerator: prompts.Variants[prompts.RubricQuestion],
	Judge:           prompts.Variants[prompts.JudgeGenerative],
}

var variantDesc = map[string]string{
	Policy:          "policy system prompt: none (send none) or assistant (the official code's one-line assistant prompt)",
	RubricGenerator: "official: instructions and a worked example in the system message, the bare question as the user message (as the official EVOLM code); evolm: evolm's first one-message prompt",
	Judge:           "official: system message with instructions and worked examples, the whole rubric with its scoring levels (as the official EVOLM code); evolm: evolm's first prompt, criteria and weights only",
}

func fields(role string) []pipeline.Field {
	var (
		temp      = map[string]float64{Policy: 1.0, RubricGenerator: 0.6, Judge: 0.6}[role]
		maxTokens = map[string]int{Policy: 1024, RubricGenerator: 2048, Judge: 1024}[role]
		modelDesc = map[string]string{
			Policy:          "torch: HF checkpoint directory (also the KL reference of `evolm run`); openai: the served model name",
			RubricGenerator: "empty: the policy's model plays the rubric generator (shared-model design); set: a model of its own (two-model ablation)",
			Judge:           "torch: the frozen judge's checkpoint directory; openai: the served model name",
		}[role]
		example = map[string]any{Policy: "models/Qwen3-8B", RubricGenerator: "models/Qwen3-8B", Judge: "models/Qwen3-1.7B"}[role]
	)
	var names []string
	for _, n := range templates[role] {
		names = append(names, string(n))
	}
	zero, one := pipeline.Bound(0), pipeline.Bound(1)
	fs := []pipeline.Field{
		{Key: KeyBackend, Type: pipeline.TypeString, Default: BackendTorch, Enum: []string{BackendTorch, BackendOpenAI},
			Description: "torch (in process) or openai (OpenAI-compatible endpoints: vLLM, SGLang, `evolm serve`)"},
		{Key: KeyModel, Type: pipeline.TypeString, Default: "", Description: modelDesc, Example: example},
		{Key: KeyEndpoints, Type: pipeline.TypeStrings, Default: []string{},
			Description: "openai: base URLs of the servers", Example: []string{"http://127.0.0.1:8000/v1"}},
		{Key: KeyDevice, Type: pipeline.TypeString, Default: "cpu", Description: "torch: cpu, cuda or cuda:N"},
		{Key: KeyDType, Type: pipeline.TypeString, Default: "", Description: "torch: parameter dtype; empty: float32 on CPU, bfloat16 on CUDA"},
		{Key: KeyThreads, Type: pipeline.TypeInt, Default: 0, Min: zero, Max: pipeline.Bound(4096), Description: "torch: libtorch intra-op threads; 0: libtorch's default"},
		{Key: KeyMaxBatch, Type: pipeline.TypeInt, Default: 64, Min: one, Max: pipeline.Bound(1 << 16), Description: "torch: most sequences decoded or scored together"},
		{Key: KeyThinking, Type: pipeline.TypeBool, Default: false, Description: "torch: render chats with Qwen3 thinking disabled (enable_thinking=False)"},
		{Key: KeyInFlight, Type: pipeline.TypeInt, Default: 16, Min: one, Max: pipeline.Bound(1 << 16), Description: "openai: most requests in flight over all endpoints"},
		{Key: KeyTimeout, Type: pipeline.TypeDuration, Default: "10m", Min: zero, ExclusiveMin: true, Description: "openai: timeout of one HTTP attempt"},
		{Key: KeyAttempts, Type: pipeline.TypeInt, Default: 6, Min: one, Max: pipeline.Bound(100), Description: "openai: attempts per request (retries on 429, 5xx, timeouts)"},
		{Key: KeyBatchRows, Type: pipeline.TypeInt, Default: 64, Min: one, Max: pipeline.Bound(1 << 20), Description: "requests handed to the backend per call"},
		{Key: KeyTemperature, Type: pipeline.TypeFloat, Default: temp, Min: zero, Description: "sampling temperature; 0 is greedy"},
		{Key: KeyTopP, Type: pipeline.TypeFloat, Default: 1.0, Min: zero, ExclusiveMin: true, Max: one, Description: "nucleus mass; 1 disables it"},
		{Key: KeyTopK, Type: pipeline.TypeInt, Default: 0, Min: zero, Max: pipeline.Bound(1 << 20), Description: "keep the k most likely tokens; 0 disables it"},
		{Key: KeyMaxTokens, Type: pipeline.TypeInt, Default: maxTokens, Min: one, Max: pipeline.Bound(1 << 20), Description: "most new tokens per generation"},
		{Key: KeyStop, Type: pipeline.TypeStrings, Default: []string{}, Description: "stop strings"},
		{Key: KeyPromptFiles, Type: pipeline.TypeStrings, Default: []string{},
			Description: "overrides of this role's prompts as name=path (names: " + strings.Join(names, ", ") + "); an override wins over prompt_variant",
			Example:     []string{names[0] + "=prompts/" + names[0] + ".tmpl"}},
		{Key: KeyVariant, Type: pipeline.TypeString, Default: variants[role][0], Enum: variants[role],
			Description: variantDesc[role]},
	}
	if role == Judge {
		fs = append(fs,
			pipeline.Field{Key: KeyMode, Type: pipeline.TypeString, Default: schemas.JudgeGenerative, Enum: []string{schemas.JudgeGenerative, schemas.JudgeYesNo},
				Description: "generative: one JSON verdict per (response, rubric); yesno: P(yes) per criterion from next-token log-probs"},
			pipeline.Field{Key: KeyTopLogprobs, Type: pipeline.TypeInt, Default: 20, Min: zero, Max: pipeline.Bound(1 << 18),
				Description: "openai yesno: alternatives asked per scored position (vLLM caps it at 20); a candidate outside them has no mass"})
	}
	return fs
}

// Flag returns a role's flag prefix: policy, rubric-generator, judge.
func Flag(role string) string { return strings.ReplaceAll(role, "_", "-") }

func init() {
	summary := map[string]string{
		Policy:          "the policy: answers prompts; trained in the policy phase",
		RubricGenerator: "the rubric generator: writes rubrics; trained in the rubric phase",
		Judge:           "the frozen judge: scores answers under rubrics",
	}
	for _, r := range Names {
		pipeline.RegisterSection(pipeline.SectionSpec{Name: Section(r), Summary: summary[r], Flag: Flag(r), Fields: fields(r)})
	}
}

// Config is one role's resolved configuration.
type Config struct {
	Role            string // Policy, RubricGenerator or Judge
	Backend         string // BackendTorch or BackendOpenAI
	Model           string // checkpoint directory (torch) or served model name (openai)
	Endpoints       []string
	Device, DType   string
	Threads         int
	MaxBatch        int
	DisableThinking bool
	MaxInFlight     int
	RequestTimeout  time.Duration
	MaxAttempts     int
	BatchRows       int
	// Sampling holds the role's sampling defaults; Seed is nil (callers
	// derive per-row seeds).
	Sampling backend.Sampling
	// PromptFiles are the role's prompt overrides.
	PromptFiles map[prompts.Name]string
	// PromptVariant is the variant of the role's prompts (prompt_variant).
	PromptVariant string
	Mode          string // judge: schemas.JudgeGenerative or schemas.JudgeYesNo
	TopLogprobs   int    // judge, openai yesno: alternatives per scored position
	// Shared is true for a rubric generator without a model of its own: the
	// policy's model (and engine settings) plays it.
	Shared bool
	// Callers is how many goroutines will call the backend at once: a
	// stage's shard workers (pipeline.MapShards runs up to the run's
	// parallelism, one per shard). 0 and 1 mean one. It is not a config
	// key; the stage sets it. With more than one, the in-process torch
	// engine runs their calls on one goroutine of its own
	// (torchbe.Options.OneThread).
	Callers int
}

// Read reads and checks role's section from cfg (any view of the merged
// config: a stage's, or the whole). Errors name the full key.
func Read(cfg *pipeline.Config, role string) (Config, error) {
	if _, ok := templates[role]; !ok {
		return Config{}, fmt.Errorf("unknown model role %q (roles: %s)", role, strings.Join(Names, ", "))
	}
	sec := cfg.At(Section(role))
	if !sec.Has(KeyBackend) {
		return Config{}, fmt.Errorf("config has no section %s: the stage must list it in its Spec.Uses", Section(role))
	}
	c := Config{Role: role, BatchRows: sec.Int(KeyBatchRows),
		Sampling: backend.Sampling{MaxTokens: sec.Int(KeyMaxTokens), Temperature: sec.Float(KeyTemperature),
			TopP: sec.Float(KeyTopP), TopK: sec.Int(KeyTopK), Stop: sec.Strings(KeyStop)},
		Mode: sec.String(KeyMode), TopLogprobs: sec.Int(KeyTopLogprobs), PromptVariant: sec.String(KeyVariant),
	}
	engine := sec
	if role == RubricGenerator && sec.String(KeyModel) == "" {
		for _, k := range engineKeys {
			// A saved config (evolm run's config.yaml) repeats every
			// default; only a value that differs from it would be ignored.
			if !isDefault(RubricGenerator, k, sec.Get(k)) {
				return Config{}, sec.Errorf(k, "set, but %s.%s is empty: the shared model runs with %s's settings; set %s there, or give the rubric generator a model of its own (two-model ablation)",
					Section(role), KeyModel, Section(Policy), k)
			}
		}
		engine = cfg.At(Section(Policy))
		c.Shared = true
	}
	c.Backend, c.Model, c.Endpoints = engine.String(KeyBackend), engine.String(KeyModel), engine.Strings(KeyEndpoints)
	c.Device, c.DType, c.Threads, c.MaxBatch = engine.String(KeyDevice), engine.String(KeyDType), engine.Int(KeyThreads), engine.Int(KeyMaxBatch)
	c.DisableThinking, c.MaxInFlight = engine.Bool(KeyThinking), engine.Int(KeyInFlight)
	c.RequestTimeout, c.MaxAttempts = engine.Duration(KeyTimeout), engine.Int(KeyAttempts)
	if c.Backend == BackendOpenAI && len(c.Endpoints) == 0 {
		return c, engine.Errorf(KeyEndpoints, "the openai backend needs at least one endpoint")
	}
	for i, s := range c.Sampling.Stop {
		if s == "" {
			return c, sec.Errorf(KeyStop, "entry %d is empty", i)
		}
	}
	var err error
	if c.PromptFiles, err = promptFiles(sec, role); err != nil {
		return c, err
	}
	if c.Model == "" {
		// Last, so that the checks above still run for a config that leaves
		// the model to the command line (pipeline.Validate).
		return c, engine.Unsetf(KeyModel, "required: a checkpoint directory (torch) or a served model name (openai); flag --%s-model or env %s",
			Flag(engineRole(role, c.Shared)), pipeline.EnvName(Section(engineRole(role, c.Shared))+"."+KeyModel))
	}
	return c, nil
}

// isDefault reports whether v is the default of role's key.
func isDefault(role, key string, v any) bool {
	for _, f := range fields(role) {
		if f.Key != key {
			continue
		}
		def := f.Default
		if f.Type == pipeline.TypeDuration {
			if s, ok := def.(string); ok {
				d, err := time.ParseDuration(s)
				if err != nil {
					return false
				}
				def = d
			}
		}
		return fmt.Sprint(def) == fmt.Sprint(v)
	}
	return false
}

// engineRole is the role whose section holds a role's engine keys.
func engineRole(role string, shared bool) string {
	if shared {
		return Policy
	}
	return role
}

// promptFiles parses prompt_files: name=path entries naming the role's own
// templates.
func promptFiles(sec *pipeline.Config, role string) (map[prompts.Name]string, error) {
	out := map[prompts.Name]string{}
	for _, kv := range sec.Strings(KeyPromptFiles) {
		name, path, ok := strings.Cut(kv, "=")
		if !ok || name == "" || path == "" {
			return nil, sec.Errorf(KeyPromptFiles, "entry %q: want name=path", kv)
		}
		for r, ns := range templates {
			for _, n := range ns {
				if string(n) == name && r != role {
					return nil, sec.Errorf(KeyPromptFiles, "prompt %s belongs to the %s role: set it in %s.%s", name, r, Section(r), KeyPromptFiles)
				}
			}
		}
		out[prompts.Name(name)] = path
	}
	return out, nil
}

// Prompts loads the role prompts with the prompt variants and overrides of
// the given roles; a role not given keeps its default prompts.
func Prompts(cs ...Config) (*prompts.Set, error) {
	o := prompts.Options{Overrides: map[prompts.Name]string{}, Variants: map[prompts.Name]string{}}
	for _, c := range cs {
		for n, p := range c.PromptFiles {
			o.Overrides[n] = p
		}
		if c.PromptVariant == "" {
			continue
		}
		for _, n := range templates[c.Role] {
			if len(prompts.Variants[n]) > 0 {
				o.Variants[n] = c.PromptVariant
			}
		}
	}
	set, err := prompts.LoadOptions(o)
	if err != nil {
		var keys []string
		for _, c := range cs {
			keys = append(keys, Section(c.Role)+"."+KeyPromptFiles, Section(c.Role)+"."+KeyVariant)
		}
		return nil, fmt.Errorf("config key %s: %w", strings.Join(keys, ", "), err)
	}
	return set, nil
}

// Backend is an opened role: the backend interfaces its engine serves.
type Backend struct {
	Name  string // BackendTorch or BackendOpenAI
	Model string // model id recorded in outputs
	backend.Generator
	backend.Scorer
	// LogProber is nil when the engine cannot score given continuations.
	LogProber backend.LogProber
	close     func()
}

// NewBackend assembles a Backend; close (may be nil) releases the engine.
func NewBackend(name, model string, g backend.Generator, s backend.Scorer, lp backend.LogProber, close func()) *Backend {
	return &Backend{Name: name, Model: model, Generator: g, Scorer: s, LogProber: lp, close: close}
}

// Close releases the engine (the torch model's weights, idle connections).
func (b *Backend) Close() {
	if b.close != nil {
		b.close()
		b.close = nil
	}
}

// Opener opens a role's engine.
type Opener func(c Config, log *slog.Logger) (*Backend, error)

var openers Registry[Opener]

func init() { openers.Register(BackendOpenAI, openOpenAI) }

// RegisterBackend makes a backend available to Open. Engine packages call
// it from init() (stages/roles/torchrole registers torch).
func RegisterBackend(name string, open Opener) {
	openers.Register(name, open)
}

// Open opens the role's engine.
func Open(c Config, log *slog.Logger) (*Backend, error) {
	open, err := openers.Get(c, func(backend, have string) string {
		return fmt.Sprintf("unknown backend %q (have %s)", backend, have)
	})
	if err != nil {
		return nil, err
	}
	b, err := open(c, log)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.Role, err)
	}
	return b, nil
}

func openOpenAI(c Config, log *slog.Logger) (*Backend, error) {
	cl, err := openai.New(openai.Config{Endpoints: c.Endpoints, Model: c.Model, MaxInFlight: c.MaxInFlight,
		MaxAttempts: c.MaxAttempts, RequestTimeout: c.RequestTimeout, ScoreTopLogprobs: c.TopLogprobs, Logger: log})
	if err != nil {
		return nil, err
	}
	return NewBackend(BackendOpenAI, cl.Model(), cl, cl, nil, cl.Close), nil
}

// stageKeys are the keys the model stages (rollout, rubrics, judge) had
// before the roles were configured once; each now lives in the role's
// section under the same name.
var stageKeys = []string{KeyBackend, KeyModel, KeyEndpoints, KeyDevice, KeyDType, KeyThreads, KeyMaxBatch, KeyThinking,
	KeyInFlight, KeyTimeout, KeyAttempts, KeyBatchRows, KeyMaxTokens, KeyTemperature, KeyTopP, KeyTopK, KeyStop, KeyPromptFiles}

// MovedStageKeys is the Spec.Moved of a stage that calls role: its former
// role keys and their place in the role's section.
func MovedStageKeys(role string) map[string]string {
	out := map[string]string{}
	for _, k := range stageKeys {
		out[k] = Section(role) + "." + k
	}
	if role == Judge {
		out[KeyMode] = Section(Judge) + "." + KeyMode
		out["score_top_logprobs"] = Section(Judge) + "." + KeyTopLogprobs
	}
	return out
}
