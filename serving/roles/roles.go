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
// sampling defaults (temperature, top_p, top_k, max_tokens, stop, and
// vLLM's min_p, repetition_penalty, presence_penalty, frequency_penalty,
// min_tokens, stop_token_ids, include_stop_str_in_output,
// skip_special_tokens, truncate_prompt_tokens: the same on the torch engine
// and on any vLLM-compatible server; response_format, structured output,
// off by default as in the paper) and its
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
// A role runs on the backend its section names. Backends register
// themselves (Register, a BackendSpec) from init(): their keys in the role
// sections, their opener, and what else they can do — train a role in
// process, generate for a trained role on a fleet of servers, join a
// data-parallel group, keep weights on a device. The `backend` key's
// values, the sections' keys and flags, --help, the memory planner and
// `evolm run` all come from the registry. The two built in:
//
//   - torch (serving/torchbe): in process on libtorch; it trains roles and
//     opens process groups;
//   - openai (serving/openai): any OpenAI-compatible server (vLLM, SGLang,
//     `evolm serve`); it also generates for a trained role on a fleet whose
//     weights follow the learner's.
//
// cmd/evolm links both (backends.go). Keeping the engines out of this
// package keeps them out of everything that only composes roles.
package roles

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/evolm/evolm/method/prompts"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/serving/backend"
)

// Role names: the last component of each section.
const (
	Policy          = schemas.RolePolicy          // "policy"
	RubricGenerator = schemas.RoleRubricGenerator // "rubric_generator"
	Judge           = schemas.RoleJudge           // "judge"
)

// Names lists the roles in the order they are documented.
var Names = []string{Policy, RubricGenerator, Judge}

// Backend names of the built-in backends. BackendTorch is every role's
// default.
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
	// vLLM's sampling controls (backend.Sampling).
	KeyMinP              = "min_p"
	KeyRepetitionPenalty = "repetition_penalty"
	KeyPresencePenalty   = "presence_penalty"
	KeyFrequencyPenalty  = "frequency_penalty"
	KeyMinTokens         = "min_tokens"
	KeyStopTokenIDs      = "stop_token_ids"
	KeyIncludeStop       = "include_stop_str_in_output"
	KeySkipSpecial       = "skip_special_tokens"
	KeyTruncatePrompt    = "truncate_prompt_tokens"
	KeyResponseFormat    = "response_format"
	KeyPromptFiles       = "prompt_files"
	KeyVariant           = "prompt_variant"
	KeyMode              = "mode"         // judge only
	KeyTopLogprobs       = "top_logprobs" // judge only
)

// engineKeys are the keys that choose and run a model: the backend, and
// every key a registered backend declares. A shared rubric generator takes
// them from the policy.
func engineKeys(role string) []string {
	keys := []string{KeyBackend}
	seen := map[string]bool{KeyBackend: true}
	for _, f := range backendFields(role) {
		if !seen[f.Key] {
			seen[f.Key] = true
			keys = append(keys, f.Key)
		}
	}
	return keys
}

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
	RubricGenerator: "official: the official EVOLM code's rubric_generation_v3 in evolm's words: instructions and a worked example in the system message, the bare question as the user message, 2 to 5 criteria with scoring levels and a high-weight dealbreaker stating a checkable answer; evolm: evolm's first one-message prompt",
	Judge:           "official: as the official EVOLM code's judge, in evolm's words: a one-line system message, then the question, the rubric as the generator wrote it and the answer, followed by the grading instructions and worked examples; evolm: evolm's first prompt, criteria and weights only",
}

// fields returns a role section's keys: the common ones, then each
// registered backend's (BackendSpec.Fields), each key once.
func fields(role string) []pipeline.Field {
	var (
		temp      = map[string]float64{Policy: 1.0, RubricGenerator: 0.6, Judge: 0.6}[role]
		maxTokens = map[string]int{Policy: 1024, RubricGenerator: 2048, Judge: 1024}[role]
		modelDesc = map[string]string{
			Policy:          "torch: HF checkpoint directory (also the KL reference of 'evolm run'); openai: the served model name",
			RubricGenerator: "empty: the policy's model plays the rubric generator (shared-model design); set: a model of its own (two-model ablation)",
			Judge:           "torch: the frozen judge's checkpoint directory; openai: the served model name",
		}[role]
		example = map[string]any{Policy: "models/Qwen3-8B", RubricGenerator: "models/Qwen3-8B", Judge: "models/Qwen3-1.7B"}[role]
	)
	var names []string
	for _, n := range templates[role] {
		names = append(names, string(n))
	}
	var summaries []string
	for _, b := range Backends() {
		summaries = append(summaries, b.Name+" ("+b.Summary+")")
	}
	zero, one := pipeline.Bound(0), pipeline.Bound(1)
	fs := []pipeline.Field{
		{Key: KeyBackend, Type: pipeline.TypeString, Default: BackendTorch, Enum: BackendNames(),
			Description: "the engine the role runs on: " + strings.Join(summaries, "; ")},
		{Key: KeyModel, Type: pipeline.TypeString, Default: "", Description: modelDesc, Example: example},
		{Key: KeyBatchRows, Type: pipeline.TypeInt, Default: 64, Min: one, Max: pipeline.Bound(1 << 20), Description: "requests handed to the backend per call"},
		{Key: KeyTemperature, Type: pipeline.TypeFloat, Default: temp, Min: zero, Description: "sampling temperature; 0 is greedy"},
		{Key: KeyTopP, Type: pipeline.TypeFloat, Default: 1.0, Min: zero, ExclusiveMin: true, Max: one, Description: "nucleus mass; 1 disables it"},
		{Key: KeyTopK, Type: pipeline.TypeInt, Default: 0, Min: zero, Max: pipeline.Bound(1 << 20), Description: "keep the k most likely tokens; 0 disables it"},
		{Key: KeyMaxTokens, Type: pipeline.TypeInt, Default: maxTokens, Min: one, Max: pipeline.Bound(1 << 20), Description: "most new tokens per generation"},
		{Key: KeyStop, Type: pipeline.TypeStrings, Default: []string{}, Description: "stop strings"},
		{Key: KeyMinP, Type: pipeline.TypeFloat, Default: 0.0, Min: zero, Max: one, Description: "drop tokens less likely than min_p × the most likely one (after temperature); 0 disables it"},
		{Key: KeyRepetitionPenalty, Type: pipeline.TypeFloat, Default: 1.0, Min: zero, ExclusiveMin: true, Max: pipeline.Bound(100),
			Description: "divide the positive logits (multiply the negative ones) of every token already in the prompt or the output by it, as vLLM and transformers do; 1 disables it"},
		{Key: KeyPresencePenalty, Type: pipeline.TypeFloat, Default: 0.0, Min: pipeline.Bound(-2), Max: pipeline.Bound(2), Description: "subtracted from the logit of every token already in the output (OpenAI's and vLLM's); 0 disables it"},
		{Key: KeyFrequencyPenalty, Type: pipeline.TypeFloat, Default: 0.0, Min: pipeline.Bound(-2), Max: pipeline.Bound(2), Description: "subtracted from a token's logit once per time it is already in the output; 0 disables it"},
		{Key: KeyMinTokens, Type: pipeline.TypeInt, Default: 0, Min: zero, Max: pipeline.Bound(1 << 20), Description: "no end token or stop string ends a generation before this many tokens"},
		{Key: KeyStopTokenIDs, Type: pipeline.TypeStrings, Default: []string{}, Description: "token ids that end a generation besides the model's end tokens"},
		{Key: KeyIncludeStop, Type: pipeline.TypeBool, Default: false, Description: "keep the stop string (or the end token's text) that ended a generation in its text"},
		{Key: KeySkipSpecial, Type: pipeline.TypeBool, Default: true, Description: "leave special tokens out of the generated text"},
		{Key: KeyTruncatePrompt, Type: pipeline.TypeInt, Default: 0, Min: zero, Max: pipeline.Bound(1 << 24), Description: "keep only the prompt's last k tokens; 0 keeps all"},
		{Key: KeyResponseFormat, Type: pipeline.TypeString, Default: "",
			Description: "structured output by constrained decoding: empty (none, as the paper), json_object, or the path of a JSON schema file. " +
				"For the rubric generator a schema makes every rubric parse, so R_format stops varying within a group and no longer shapes the reward: " +
				"it changes the method, and thinking (before the JSON) is not possible under it",
			Example: "rubric.schema.json"},
		{Key: KeyPromptFiles, Type: pipeline.TypeStrings, Default: []string{},
			Description: "overrides of this role's prompts as name=path (names: " + strings.Join(names, ", ") + "); an override wins over prompt_variant",
			Example:     []string{names[0] + "=prompts/" + names[0] + ".tmpl"}},
		{Key: KeyVariant, Type: pipeline.TypeString, Default: variants[role][0], Enum: variants[role],
			Description: variantDesc[role]},
	}
	if role == Judge {
		fs = append(fs, pipeline.Field{Key: KeyMode, Type: pipeline.TypeString, Default: schemas.JudgeGenerative, Enum: []string{schemas.JudgeGenerative, schemas.JudgeYesNo},
			Description: "generative: one JSON verdict per (response, rubric); yesno: P(yes) per criterion from next-token log-probs"})
	}
	return append(fs, backendFields(role)...)
}

// backendFields returns the registered backends' keys of a role section,
// each once (the first backend, by name, that declares it).
func backendFields(role string) []pipeline.Field {
	var out []pipeline.Field
	seen := map[string]bool{}
	for _, b := range Backends() {
		if b.Fields == nil {
			continue
		}
		for _, f := range b.Fields(role) {
			if !seen[f.Key] {
				seen[f.Key] = true
				out = append(out, f)
			}
		}
	}
	return out
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
		pipeline.RegisterSection(pipeline.SectionSpec{Name: Section(r), Summary: summary[r], Flag: Flag(r), FieldsFunc: func() ([]pipeline.Field, error) { return fields(r), nil }})
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
	// Engine is the section that holds the role's engine keys (the policy's
	// for a shared rubric generator): a backend reads its own keys there.
	Engine *pipeline.Config
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
			TopP: sec.Float(KeyTopP), TopK: sec.Int(KeyTopK), Stop: sec.Strings(KeyStop),
			MinP: sec.Float(KeyMinP), RepetitionPenalty: sec.Float(KeyRepetitionPenalty),
			PresencePenalty: sec.Float(KeyPresencePenalty), FrequencyPenalty: sec.Float(KeyFrequencyPenalty),
			MinTokens: sec.Int(KeyMinTokens), IncludeStopStr: sec.Bool(KeyIncludeStop), KeepSpecialTokens: !sec.Bool(KeySkipSpecial),
			TruncatePromptTokens: sec.Int(KeyTruncatePrompt)},
		Mode: sec.String(KeyMode), TopLogprobs: sec.Int(KeyTopLogprobs), PromptVariant: sec.String(KeyVariant),
	}
	engine := sec
	if role == RubricGenerator && sec.String(KeyModel) == "" {
		for _, k := range engineKeys(role) {
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
	c.Engine = engine
	if b, ok := Lookup(c.Backend); ok && b.Check != nil {
		if err := b.Check(c, engine); err != nil {
			return c, err
		}
	}
	for i, s := range c.Sampling.Stop {
		if s == "" {
			return c, sec.Errorf(KeyStop, "entry %d is empty", i)
		}
	}
	for i, s := range sec.Strings(KeyStopTokenIDs) {
		id, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || id < 0 {
			return c, sec.Errorf(KeyStopTokenIDs, "entry %d %q: want a token id", i, s)
		}
		c.Sampling.StopTokenIDs = append(c.Sampling.StopTokenIDs, id)
	}
	switch rf := sec.String(KeyResponseFormat); rf {
	case "":
	case backend.FormatJSONObject:
		c.Sampling.Format = &backend.OutputFormat{Type: backend.FormatJSONObject}
	default:
		b, err := os.ReadFile(rf)
		if err != nil {
			return c, sec.Errorf(KeyResponseFormat, "%v", err)
		}
		if !json.Valid(b) {
			return c, sec.Errorf(KeyResponseFormat, "%s is not JSON: want a JSON schema", rf)
		}
		c.Sampling.Format = &backend.OutputFormat{Type: backend.FormatJSONSchema, Schema: b}
	}
	if c.Sampling.MinTokens > c.Sampling.MaxTokens {
		return c, sec.Errorf(KeyMinTokens, "%d exceeds %s %d", c.Sampling.MinTokens, KeyMaxTokens, c.Sampling.MaxTokens)
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
