package server

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"

	"github.com/evolm/evolm/model/constrain"
	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/serving/openai"
)

// common are the fields both endpoints turn into a backend request.
type common struct {
	maxTokens  *int
	defMax     int
	zeroMax    bool // max_tokens 0 is allowed (completions' echo)
	temp, topP *float64
	n          *int
	seed       *int64
	stop       []string
	stream     bool
	sp         *openai.SamplingParams
}

// sampling checks the sampling fields (vLLM's ranges) and returns the
// backend's Sampling and the number of samples.
func (s *server) sampling(c common) (backend.Sampling, int, error) {
	p := c.sp
	sp := backend.Sampling{MaxTokens: c.defMax, Temperature: 1, TopP: 1, Seed: c.seed, Stop: c.stop,
		StopTokenIDs: p.StopTokenIDs, IncludeStopStr: p.IncludeStopStrInOutput, IgnoreEOS: p.IgnoreEOS, MinTokens: p.MinTokens}
	if c.maxTokens != nil {
		if *c.maxTokens < 0 || *c.maxTokens == 0 && !c.zeroMax {
			return sp, 0, badRequest("max_tokens", "max_tokens = %d, want > 0", *c.maxTokens)
		}
		sp.MaxTokens = *c.maxTokens
	}
	inRange := func(name string, v *float64, lo, hi float64, loOpen bool) (float64, error) {
		if v == nil {
			return 0, nil
		}
		if math.IsNaN(*v) || *v > hi || *v < lo || loOpen && *v == lo {
			open := "["
			if loOpen {
				open = "("
			}
			return 0, badRequest(name, "%s = %v, want in %s%v, %v]", name, *v, open, lo, hi)
		}
		return *v, nil
	}
	var err error
	if c.temp != nil {
		if sp.Temperature, err = inRange("temperature", c.temp, 0, 2, false); err != nil {
			return sp, 0, err
		}
	}
	if c.topP != nil {
		if sp.TopP, err = inRange("top_p", c.topP, 0, 1, true); err != nil {
			return sp, 0, err
		}
	}
	if sp.MinP, err = inRange("min_p", p.MinP, 0, 1, false); err != nil {
		return sp, 0, err
	}
	if sp.PresencePenalty, err = inRange("presence_penalty", p.PresencePenalty, -2, 2, false); err != nil {
		return sp, 0, err
	}
	if sp.FrequencyPenalty, err = inRange("frequency_penalty", p.FrequencyPenalty, -2, 2, false); err != nil {
		return sp, 0, err
	}
	if sp.RepetitionPenalty, err = inRange("repetition_penalty", p.RepetitionPenalty, 0, math.MaxFloat64, true); err != nil {
		return sp, 0, err
	}
	if p.TopK != nil {
		// vLLM takes 0 and -1 for "off".
		if *p.TopK < -1 {
			return sp, 0, badRequest("top_k", "top_k = %d, want >= -1", *p.TopK)
		}
		sp.TopK = max(*p.TopK, 0)
	}
	samples := 1
	if c.n != nil {
		if *c.n < 1 || *c.n > s.cfg.MaxN {
			return sp, 0, badRequest("n", "n = %d, want in [1, %d]", *c.n, s.cfg.MaxN)
		}
		samples = *c.n
	}
	for i, st := range c.stop {
		if st == "" {
			return sp, 0, badRequest("stop", "stop[%d] is empty", i)
		}
	}
	if err := s.tokenControls(&sp, p); err != nil {
		return sp, 0, err
	}
	return sp, samples, nil
}

// tokenControls checks the token-level sampling fields into sp.
func (s *server) tokenControls(sp *backend.Sampling, p *openai.SamplingParams) error {
	if p.MinTokens < 0 || p.MinTokens > sp.MaxTokens {
		return badRequest("min_tokens", "min_tokens = %d, want in [0, max_tokens %d]", p.MinTokens, sp.MaxTokens)
	}
	if p.AllowedTokenIDs != nil {
		if len(p.AllowedTokenIDs) == 0 {
			return badRequest("allowed_token_ids", "allowed_token_ids is empty: no token could be generated")
		}
		sp.AllowedTokenIDs = p.AllowedTokenIDs
	}
	for _, id := range append(append([]int(nil), p.StopTokenIDs...), p.AllowedTokenIDs...) {
		if id < 0 {
			return badRequest("stop_token_ids", "token id %d is negative", id)
		}
	}
	if len(p.LogitBias) > 0 {
		sp.LogitBias = make(map[int]float64, len(p.LogitBias))
		for k, v := range p.LogitBias {
			id, err := strconv.Atoi(k)
			if err != nil || id < 0 {
				return badRequest("logit_bias", "logit_bias key %q: want a token id", k)
			}
			if math.IsNaN(v) {
				return badRequest("logit_bias", "logit_bias[%s] is NaN", k)
			}
			sp.LogitBias[id] = math.Max(-100, math.Min(100, v)) // vLLM clamps
		}
	}
	if p.SkipSpecialTokens != nil {
		sp.KeepSpecialTokens = !*p.SkipSpecialTokens
	}
	if p.TruncatePromptTokens != nil {
		if *p.TruncatePromptTokens < 1 {
			return badRequest("truncate_prompt_tokens", "truncate_prompt_tokens = %d, want >= 1", *p.TruncatePromptTokens)
		}
		sp.TruncatePromptTokens = *p.TruncatePromptTokens
	}
	return nil
}

// promptLogprobs checks prompt_logprobs: how many alternatives, or -1 for
// none.
func (s *server) promptLogprobs(p *openai.SamplingParams, stream bool) (int, error) {
	if p.PromptLogprobs == nil {
		return -1, nil
	}
	k := *p.PromptLogprobs
	switch {
	case k < 0 || k > s.cfg.MaxTopLogprobs:
		return 0, badRequest("prompt_logprobs", "prompt_logprobs = %d, want in [0, %d]", k, s.cfg.MaxTopLogprobs)
	case stream && k > 0:
		return 0, badRequest("prompt_logprobs", "prompt_logprobs is not available when stream=true")
	}
	return k, nil
}

// format reads the structured-output fields (response_format, guided_json,
// guided_choice) into one output format; nil: none.
func format(p *openai.SamplingParams) (*backend.OutputFormat, error) {
	var out *backend.OutputFormat
	set := 0
	if rf := p.ResponseFormat; rf != nil {
		switch rf.Type {
		case "text":
		case "json_object":
			out, set = &backend.OutputFormat{Type: backend.FormatJSONObject}, set+1
		case "json_schema":
			if rf.JSONSchema == nil || len(bytes.TrimSpace(rf.JSONSchema.Schema)) == 0 || string(rf.JSONSchema.Schema) == "null" {
				return nil, badRequest("response_format.json_schema.schema", "response_format json_schema needs json_schema.schema")
			}
			out, set = &backend.OutputFormat{Type: backend.FormatJSONSchema, Schema: rf.JSONSchema.Schema}, set+1
		default:
			return nil, badRequest("response_format.type", "response_format type %q: evolm serve supports text, json_object and json_schema", rf.Type)
		}
	}
	if g := bytes.TrimSpace(p.GuidedJSON); len(g) > 0 && string(g) != "null" {
		schema := g
		if g[0] == '"' { // a schema given as a JSON string, as vLLM takes it
			var str string
			if err := json.Unmarshal(g, &str); err != nil {
				return nil, badRequest("guided_json", "guided_json: %v", err)
			}
			schema = []byte(str)
		}
		out, set = &backend.OutputFormat{Type: backend.FormatJSONSchema, Schema: schema}, set+1
	}
	if p.GuidedChoice != nil {
		for i, c := range p.GuidedChoice {
			if c == "" {
				return nil, badRequest("guided_choice", "guided_choice[%d] is empty", i)
			}
		}
		if len(p.GuidedChoice) == 0 {
			return nil, badRequest("guided_choice", "guided_choice is empty")
		}
		out, set = &backend.OutputFormat{Type: backend.FormatChoice, Choices: p.GuidedChoice}, set+1
	}
	if set > 1 {
		return nil, badRequest("response_format", "only one of response_format, guided_json and guided_choice may be set")
	}
	if out != nil && out.Type == backend.FormatJSONSchema {
		param := "response_format.json_schema.schema"
		if len(bytes.TrimSpace(p.GuidedJSON)) > 0 && string(bytes.TrimSpace(p.GuidedJSON)) != "null" {
			param = "guided_json"
		}
		// Refused here, by name, if it is not a schema or says what
		// constrained decoding cannot enforce.
		if _, err := constrain.NewValidator(out.Schema); err != nil {
			return nil, badRequest(param, "%s: %v", param, err)
		}
		if _, err := constrain.Schema(out.Schema, noVocab); err != nil {
			return nil, badRequest(param, "%s: %v", param, err)
		}
	}
	return out, nil
}

// noVocab compiles schemas for their checks alone.
var noVocab = constrain.NewVocab(nil)

// streamOptions checks stream_options: with stream false it must be absent
// or empty (vLLM answers 400). It returns whether the stream ends with a
// usage chunk and whether every chunk carries usage.
func streamOptions(p *openai.SamplingParams, stream bool) (usage, continuous bool, err error) {
	o := p.StreamOptions
	if o == nil {
		return false, false, nil
	}
	if !stream {
		if o.IncludeUsage != nil || o.ContinuousUsageStats {
			return false, false, badRequest("stream_options", "stream_options can only be defined when stream=true")
		}
		return false, false, nil
	}
	usage = o.IncludeUsage == nil || *o.IncludeUsage
	return usage, usage && o.ContinuousUsageStats, nil
}
