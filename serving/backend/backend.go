// Package backend defines the small interfaces through which the stages call a
// language model, and the request and response types they share. Two
// implementations stand behind them (docs/design.md, "Roles and backends"): `torch`, the in-process
// engine, and `openai` (package model/openai), a client for any
// OpenAI-compatible server. Package model/serve exposes any implementation
// over HTTP in the OpenAI shapes.
//
// Contracts shared by every interface:
//
//   - Batches. A call takes a slice of requests and returns a slice of
//     responses of the same length, in the same order: response i answers
//     request i and carries its ID. Implementations may reorder, split or
//     parallelise the work internally.
//   - Row identity. Each request carries an ID chosen by the caller that is
//     stable across reruns (the output row's key, for example
//     "<prompt_id>/<sample>"). IDs must be unique within a call; a duplicate
//     is an error for the whole call. An implementation produces exactly one
//     response per ID, whatever retries happen underneath.
//   - Failures. A returned error means the whole call failed (a context was
//     cancelled, every endpoint is down, a request was malformed) and no
//     response should be written. A row that failed permanently on its own
//     (for example, a server rejected that one prompt as too long) is not an
//     error for the call: its response carries a non-nil Failure with the
//     reason, so that the stage records it instead of dropping it.
//   - Log-probabilities are natural logarithms. A candidate that the model
//     gives no probability mass to, or that a server did not report, has
//     log-prob -Inf.
package backend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// Message is one turn of a chat conversation.
type Message struct {
	Role    string `json:"role"` // "system", "user" or "assistant"
	Content string `json:"content"`
}

// Sampling holds the decoding parameters of a generation request. Beyond
// the first six fields they are vLLM's sampling controls, with vLLM's
// meanings; every zero value is vLLM's default (off).
type Sampling struct {
	// MaxTokens is the most tokens to generate per completion: > 0, or 0
	// with GenerateRequest.PromptLogProbs to score the prompt alone.
	MaxTokens   int
	Temperature float64  // 0 means greedy decoding
	TopP        float64  // nucleus mass in (0, 1]; 0 or 1 disables it
	TopK        int      // keep the k most likely tokens; 0 disables it
	Seed        *int64   // nil: unseeded; otherwise the run is reproducible for a given backend and model
	Stop        []string // generation ends before the first occurrence of any of these strings

	// MinP drops tokens whose probability (after temperature) is below
	// MinP times the most likely one's; in [0, 1].
	MinP float64
	// RepetitionPenalty divides the positive logits, and multiplies the
	// negative ones, of every token of the prompt and the output so far
	// (> 0; 0 or 1: off). PresencePenalty and FrequencyPenalty, in [−2, 2],
	// are subtracted from a token's logit once if it occurs in the output,
	// and once per occurrence.
	RepetitionPenalty, PresencePenalty, FrequencyPenalty float64
	// LogitBias is added to the logits of these token ids; values in
	// [−100, 100].
	LogitBias map[int]float64
	// AllowedTokenIDs, when non-empty, are the only tokens that may be
	// generated; BadWords are never generated (their last token is banned
	// where the output ends with the rest).
	AllowedTokenIDs []int
	BadWords        []string
	// MinTokens: before this many tokens, neither a stop token nor a stop
	// string ends a completion.
	MinTokens int
	// StopTokenIDs end a completion, besides the model's end tokens, which
	// IgnoreEOS turns off.
	StopTokenIDs []int
	IgnoreEOS    bool
	// IncludeStopStr keeps the stop string, or the stop token's text, that
	// ended a completion in its Text.
	IncludeStopStr bool
	// KeepSpecialTokens keeps special tokens in Text
	// (skip_special_tokens=false).
	KeepSpecialTokens bool
	// TruncatePromptTokens keeps only the prompt's last k tokens; 0: all.
	TruncatePromptTokens int
	// Format, when set, constrains every completion to a value of it
	// (structured output).
	Format *OutputFormat
}

// Check checks the ranges of s.
func (s *Sampling) Check() error {
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	switch {
	case s.MaxTokens < 0:
		return fmt.Errorf("max_tokens = %d, want > 0", s.MaxTokens)
	case s.Temperature < 0 || math.IsNaN(s.Temperature):
		return fmt.Errorf("temperature = %v, want >= 0", s.Temperature)
	case s.TopP < 0 || s.TopP > 1 || math.IsNaN(s.TopP):
		return fmt.Errorf("top_p = %v, want in [0, 1]", s.TopP)
	case s.TopK < 0:
		return fmt.Errorf("top_k = %d < 0", s.TopK)
	case s.MinP < 0 || s.MinP > 1 || math.IsNaN(s.MinP):
		return fmt.Errorf("min_p = %v, want in [0, 1]", s.MinP)
	case s.RepetitionPenalty < 0 || !finite(s.RepetitionPenalty):
		return fmt.Errorf("repetition_penalty = %v, want > 0", s.RepetitionPenalty)
	case s.PresencePenalty < -2 || s.PresencePenalty > 2 || math.IsNaN(s.PresencePenalty):
		return fmt.Errorf("presence_penalty = %v, want in [-2, 2]", s.PresencePenalty)
	case s.FrequencyPenalty < -2 || s.FrequencyPenalty > 2 || math.IsNaN(s.FrequencyPenalty):
		return fmt.Errorf("frequency_penalty = %v, want in [-2, 2]", s.FrequencyPenalty)
	case s.MinTokens < 0 || s.MinTokens > s.MaxTokens:
		return fmt.Errorf("min_tokens = %d, want in [0, max_tokens %d]", s.MinTokens, s.MaxTokens)
	case s.TruncatePromptTokens < 0:
		return fmt.Errorf("truncate_prompt_tokens = %d, want >= 1", s.TruncatePromptTokens)
	}
	for id, v := range s.LogitBias {
		if v < -100 || v > 100 || math.IsNaN(v) {
			return fmt.Errorf("logit_bias[%d] = %v, want in [-100, 100]", id, v)
		}
	}
	for i, w := range s.BadWords {
		if w == "" {
			return fmt.Errorf("bad_words[%d] is empty", i)
		}
	}
	return nil
}

// OutputFormat is structured output: the text of every completion is one
// value of it, by constrained decoding.
type OutputFormat struct {
	// Type is FormatJSONObject (any JSON object), FormatJSONSchema (a value
	// of Schema) or FormatChoice (exactly one of Choices).
	Type    string
	Schema  json.RawMessage
	Choices []string
}

// Output format types.
const (
	FormatJSONObject = "json_object"
	FormatJSONSchema = "json_schema"
	FormatChoice     = "choice"
)

// StreamDelta is what one completion of a streamed request gained: new
// tokens, and new text that no later token changes (it may lag the tokens).
// The deltas' texts, joined, are a prefix of the completion's final Text.
type StreamDelta struct {
	Index    int            // the completion's index within its request
	Text     string         // new text
	LogProbs []TokenLogProb // the new tokens (Token, TokenID, LogProb; Top when asked)
}

// GenerateRequest asks for N completions of one prompt. Exactly one of Prompt
// and Messages is set: Prompt is text already rendered with the model's
// template (or plain text for a base model); Messages is a conversation that
// the backend renders with the model's chat template.
type GenerateRequest struct {
	ID       string    // caller's stable row key; see the package contract
	Prompt   string    // rendered prompt text
	Messages []Message // chat conversation, rendered by the backend
	// PromptTokenIDs is the prompt as token ids of the model's vocabulary,
	// instead of Prompt or Messages.
	PromptTokenIDs []int
	N              int // completions to sample; 0 means 1
	Sampling
	// LogProbs asks for the log-prob of every sampled token.
	LogProbs bool
	// TopLogProbs asks, at every sampled position, for this many most likely
	// alternatives with their log-probs (0 = none). It implies LogProbs.
	TopLogProbs int
	// PromptLogProbs asks for the log-prob of every prompt token after the
	// first (GenerateResponse.PromptLogProbs), with its rank and the
	// PromptTopLogProbs most likely alternatives.
	PromptLogProbs    bool
	PromptTopLogProbs int
	// Stream, when set, receives each completion's StreamDeltas as they
	// come, before the response. It must not block: an engine calls it
	// between decode steps.
	Stream func(StreamDelta)
	// Done, when non-nil, ends the request's completions (FinishAbort) once
	// closed: a client that went away. A backend checks it between steps.
	Done <-chan struct{}
}

// Samples returns the number of completions the request asks for.
func (r *GenerateRequest) Samples() int {
	if r.N <= 0 {
		return 1
	}
	return r.N
}

// Validate checks the request on its own.
func (r *GenerateRequest) Validate() error {
	prompts := 0
	for _, set := range []bool{r.Prompt != "", len(r.Messages) > 0, len(r.PromptTokenIDs) > 0} {
		if set {
			prompts++
		}
	}
	switch {
	case r.ID == "":
		return errors.New("empty request id")
	case prompts > 1 && r.Prompt != "" && len(r.Messages) > 0:
		return fmt.Errorf("request %s: both prompt and messages set", r.ID)
	case prompts > 1:
		return fmt.Errorf("request %s: both prompt token ids and a prompt or messages set", r.ID)
	case prompts == 0:
		return fmt.Errorf("request %s: neither prompt nor messages (nor prompt token ids) set", r.ID)
	case r.N < 0:
		return fmt.Errorf("request %s: n = %d < 0", r.ID, r.N)
	case r.MaxTokens <= 0 && !(r.MaxTokens == 0 && r.PromptLogProbs):
		return fmt.Errorf("request %s: max_tokens = %d, want > 0 (or 0 with prompt log-probs)", r.ID, r.MaxTokens)
	case r.TopLogProbs < 0 || r.PromptTopLogProbs < 0:
		return fmt.Errorf("request %s: top_logprobs = %d, prompt_logprobs = %d, want >= 0", r.ID, r.TopLogProbs, r.PromptTopLogProbs)
	}
	if err := r.Sampling.Check(); err != nil {
		return fmt.Errorf("request %s: %w", r.ID, err)
	}
	if f := r.Format; f != nil {
		switch {
		case f.Type == FormatJSONSchema && len(f.Schema) == 0:
			return fmt.Errorf("request %s: json_schema format without a schema", r.ID)
		case f.Type == FormatChoice && len(f.Choices) == 0:
			return fmt.Errorf("request %s: choice format without choices", r.ID)
		case f.Type != FormatJSONObject && f.Type != FormatJSONSchema && f.Type != FormatChoice:
			return fmt.Errorf("request %s: output format %q, want json_object, json_schema or choice", r.ID, f.Type)
		}
	}
	for _, s := range r.Stop {
		if s == "" {
			return fmt.Errorf("request %s: empty stop string", r.ID)
		}
	}
	return nil
}

// FinishReason says why a completion ended.
type FinishReason string

const (
	FinishStop   FinishReason = "stop"   // end-of-sequence token or a stop string
	FinishLength FinishReason = "length" // MaxTokens reached
	FinishAbort  FinishReason = "abort"  // the request's Done closed
)

// TopLogProb is one alternative at a sampled position.
type TopLogProb struct {
	Token   string  // decoded text of the token
	LogProb float64 // natural log-prob under the sampling model's distribution before temperature
}

// TokenLogProb is one sampled token with its log-prob.
type TokenLogProb struct {
	Token   string       // decoded text of the token
	TokenID int          // vocabulary id; -1 when the backend does not know it
	LogProb float64      // natural log-prob of the sampled token
	Top     []TopLogProb // most likely alternatives, most likely first; nil unless asked for
}

// Completion is one sample of a prompt.
type Completion struct {
	Index    int    // 0 ≤ Index < N, the sample index within its request
	Text     string // generated text, without the stop string that ended it
	TokenIDs []int  // generated token ids; nil when the backend does not know them
	// TokenSource says where TokenIDs came from: TokensEngine (the
	// in-process sampler), TokensServer (ids a server returned),
	// TokensRetokenized (the text tokenized again by the caller); "" when
	// unknown.
	TokenSource  string
	FinishReason FinishReason // why generation ended
	// Tokens is the number of generated tokens; -1 when the backend cannot
	// tell (an OpenAI server reports only the total over all samples).
	Tokens   int
	LogProbs []TokenLogProb // one per generated token; nil unless asked for
	// StopString is the stop string that ended the completion, StopTokenID
	// the stop token (nil: none, or unknown); vLLM's stop_reason.
	StopString  string
	StopTokenID *int
}

// PromptLogProb is the log-prob of one prompt token given those before it
// (GenerateRequest.PromptLogProbs): its rank in the vocabulary (1: the most
// likely) and the most likely alternatives.
type PromptLogProb struct {
	TokenID int
	Token   string // decoded text
	LogProb float64
	Rank    int
	Top     []RankedLogProb
}

// RankedLogProb is one alternative at a prompt position.
type RankedLogProb struct {
	TokenID int
	Token   string
	LogProb float64
	Rank    int
}

// Token id sources (Completion.TokenSource).
const (
	TokensEngine      = "engine"
	TokensServer      = "server"
	TokensRetokenized = "retokenized"
)

// GenerateResponse answers one GenerateRequest.
type GenerateResponse struct {
	ID           string       // the request's ID
	Model        string       // model or checkpoint id that produced the completions
	PromptTokens int          // prompt length in tokens; -1 when unknown
	Completions  []Completion // N of them, ordered by Index; nil when Failure is set
	Failure      *RowFailure  // non-nil when this row failed permanently
	// PromptTokenIDs and PromptText are the prompt the model saw (after
	// TruncatePromptTokens), when the backend knows them; PromptLogProbs
	// holds one entry per prompt token after the first, when asked.
	PromptTokenIDs []int
	PromptText     string
	PromptLogProbs []PromptLogProb
}

// Generator samples completions.
type Generator interface {
	// Generate answers every request; see the package contract for the
	// shape of the result and the meaning of an error.
	Generate(ctx context.Context, reqs []GenerateRequest) ([]GenerateResponse, error)
}

// EachGenerator is a Generator that can answer each request of a call as
// soon as it is done, not when the whole call is: deliver(i, resp) is
// called once per request, in the order they finish. When GenerateEach
// returns nil every request has been delivered; an error ends the call, and
// requests not yet delivered get no answer. A Batcher uses it so that a
// short request merged with a long one is answered when it ends, as vLLM
// answers each request of its running batch.
type EachGenerator interface {
	Generator
	GenerateEach(ctx context.Context, reqs []GenerateRequest, deliver func(i int, resp GenerateResponse)) error
}

// ScoreRequest asks, for each suffix, for the log-probs of each candidate as
// the single next token after Prefix+Suffixes[k]. It is the yes/no judge's
// call: the prefix holds the shared (question, response) part of the prompt,
// each suffix one criterion, and the candidates the answer tokens (" yes",
// " no" and their variants). An in-process implementation prefills Prefix
// once and batches the suffixes after it; a remote one sends Prefix+Suffix
// and relies on the server's prefix cache.
type ScoreRequest struct {
	ID         string   // caller's stable row key
	Prefix     string   // shared start of every prompt
	Suffixes   []string // one prompt tail per criterion
	Candidates []string // next-token strings to score; each should be one token
	// AmongCandidates asks for log-probs relative to the candidates alone:
	// log P(c) − log Σ P(c') over the distinct candidates c', the
	// distribution of the next token given that it is one of them. The
	// yes/no judge's P(yes) / (P(yes) + P(no)) is the same either way, and
	// an in-process scorer then needs the head's rows for the candidates
	// only, not the whole vocabulary's.
	AmongCandidates bool
}

// Validate checks the request on its own.
func (r *ScoreRequest) Validate() error {
	switch {
	case r.ID == "":
		return errors.New("empty score request id")
	case len(r.Suffixes) == 0:
		return fmt.Errorf("score request %s: no suffixes", r.ID)
	case len(r.Candidates) == 0:
		return fmt.Errorf("score request %s: no candidates", r.ID)
	}
	for i, c := range r.Candidates {
		if c == "" {
			return fmt.Errorf("score request %s: candidate %d is empty", r.ID, i)
		}
	}
	return nil
}

// ScoreResponse answers one ScoreRequest.
type ScoreResponse struct {
	ID    string // the request's ID
	Model string // model id of the scorer
	// LogProbs[k][j] is the natural log-prob of Candidates[j] as the next
	// token after Prefix+Suffixes[k]; -Inf when the candidate has no mass or
	// was not among the alternatives a server reported.
	LogProbs [][]float64
	Failure  *RowFailure // non-nil when this row failed permanently
}

// AmongCandidates rewrites lps, the log-probs of cands over the whole
// vocabulary (-Inf: no mass, or not reported), as log-probs among the
// distinct candidates (ScoreRequest.AmongCandidates): each minus the
// log-sum-exp of one entry per distinct candidate (by string, or by token
// id where the caller has ids). A row without mass on any candidate, or
// with a NaN or +Inf, is left as it is.
func AmongCandidates[K comparable](cands []K, lps []float64) {
	if slices.ContainsFunc(lps, math.IsNaN) {
		return
	}
	seen := make(map[K]bool, len(cands))
	m := math.Inf(-1)
	for j, c := range cands {
		if !seen[c] {
			seen[c] = true
			m = math.Max(m, lps[j])
		}
	}
	if math.IsInf(m, 0) { // no mass, or a +Inf a caller will reject as it is
		return
	}
	clear(seen)
	var sum float64
	for j, c := range cands {
		if !seen[c] {
			seen[c] = true
			sum += math.Exp(lps[j] - m)
		}
	}
	lse := m + math.Log(sum)
	for j := range lps {
		lps[j] -= lse
	}
}

// Scorer scores next-token candidates after a shared prefix.
type Scorer interface {
	Score(ctx context.Context, reqs []ScoreRequest) ([]ScoreResponse, error)
}

// LogProbRequest asks for the log-prob of every token of Completion given
// Prompt. When token ids are given they are used as is and the texts are
// ignored; otherwise the backend tokenizes the texts (Prompt and Completion
// separately, so that the completion's tokens are the ones it would sample
// after the prompt).
type LogProbRequest struct {
	ID                 string // caller's stable row key
	Prompt             string
	Completion         string
	PromptTokenIDs     []int
	CompletionTokenIDs []int
}

// LogProbResponse answers one LogProbRequest.
type LogProbResponse struct {
	ID       string
	Model    string
	LogProbs []TokenLogProb // one per completion token
	Sum      float64        // sum of LogProbs
	Failure  *RowFailure
}

// LogProber computes log-probs of given continuations (for example the
// reference and old-policy log-probs of GRPO).
type LogProber interface {
	LogProbs(ctx context.Context, reqs []LogProbRequest) ([]LogProbResponse, error)
}

// TrainSample is one sequence of a GRPO batch: a prompt, a sampled
// completion, its group advantage and the per-token log-probs the loss needs.
type TrainSample struct {
	PromptTokenIDs     []int     // (P)
	CompletionTokenIDs []int     // (T)
	Advantage          float64   // (r − mean)/(std + 1e-8) within the sample's group
	OldLogProbs        []float64 // (T) log-probs under the policy that sampled; nil: the current policy (on-policy ratio 1)
	RefLogProbs        []float64 // (T) log-probs under the frozen reference for the k3 KL; nil when β = 0
	// SamplerLogProbs (T) are the log-probs the sampler reported for the
	// completion tokens (an inference server's), for truncated importance
	// sampling; nil or of another length: unknown (weight 1).
	SamplerLogProbs []float64
}

// TrainStats reports one optimizer step.
type TrainStats struct {
	Step     int     // optimizer steps taken after this one
	Loss     float64 // mean over sequences of the per-sequence token-mean loss
	KL       float64 // mean k3 KL against the reference
	ClipFrac float64 // share of tokens whose ratio was clipped
	GradNorm float64 // global gradient norm before clipping
	Tokens   int     // completion tokens in the batch
	// Skipped says why the update was not applied (a NaN or Inf loss or
	// gradient norm); "" when it was.
	Skipped string
	// RefTime is the part of the step spent computing the frozen
	// reference's log-probs (0 when the samples carried them, or β = 0).
	RefTime time.Duration
}

// Trainer takes GRPO steps on a trained role's model. Implementations
// accumulate gradients over micro-batches internally; one call is one
// optimizer step. Token ids in a TrainSample are in the trained model's
// vocabulary: PromptTokenIDs makes a sample's prompt.
type Trainer interface {
	TrainStep(ctx context.Context, batch []TrainSample) (TrainStats, error)
	// Save writes what is trained to dir and returns its id: an HF-format
	// checkpoint when every weight is trained, a PEFT adapter with LoRA.
	Save(ctx context.Context, dir string) (string, error)
	// SaveOptimizer writes the optimizer state to the file path. With Save
	// it is everything a resumed run needs to continue exactly.
	SaveOptimizer(path string) error
	// PromptTokenIDs renders a conversation with the trained model's chat
	// template, ending with the opening of the assistant turn (as the
	// Generator renders Messages), and tokenizes it.
	PromptTokenIDs(msgs []Message) ([]int, error)
}

// TextEncoder is what a trainer offers to re-tokenize generated text: a
// server that returns no token ids (stages/roles/fleet).
type TextEncoder interface {
	// Encode tokenizes text as a completion (no special tokens added).
	Encode(text string) []int
	// EndTokenID is the token that ends a turn (<|im_end|>); -1: none.
	EndTokenID() int
}

// CheckRequests is CheckIDs followed by every request's Validate, the checks
// a backend makes before it answers anything; it returns the first problem.
func CheckRequests[T any, P interface {
	*T
	Validate() error
}](reqs []T, id func(*T) string) error {
	if err := CheckIDs(reqs, id); err != nil {
		return err
	}
	for i := range reqs {
		if err := P(&reqs[i]).Validate(); err != nil {
			return err
		}
	}
	return nil
}

// CheckIDs returns an error naming the first empty or duplicated ID.
func CheckIDs[T any](reqs []T, id func(*T) string) error {
	seen := make(map[string]int, len(reqs))
	for i := range reqs {
		k := id(&reqs[i])
		if k == "" {
			return fmt.Errorf("request %d: empty id", i)
		}
		if j, ok := seen[k]; ok {
			return fmt.Errorf("requests %d and %d share id %q", j, i, k)
		}
		seen[k] = i
	}
	return nil
}
