// Package server is the HTTP server behind `evolm serve`: the OpenAI API
// with vLLM's extensions, over the backend interfaces, so that one frozen
// judge (or policy) can serve many workers, the `openai` backend can be
// tested end to end, and tools written for vLLM (the openai SDK,
// lm-evaluation-harness) run against evolm's engine.
//
// # Routes
//
//	GET  /v1/models            the served model (with max_model_len) and its loaded adapters
//	POST /v1/completions       text or token-id prompts; n, seed, stop, logprobs, echo (max_tokens 0),
//	                           prompt_logprobs, vLLM's sampling controls, structured output, streaming
//	POST /v1/chat/completions  the model's chat template (tools, tool messages, enable_thinking,
//	                           add_generation_prompt, continue_final_message), tool calls,
//	                           logprobs + top_logprobs, prompt_logprobs, streaming
//	POST /tokenize             vLLM's: a prompt, or messages through the chat template, as token ids
//	POST /detokenize           vLLM's: token ids as text
//	GET  /version              {"version": Version}
//	POST /v1/evolm/score       extension: backend.Scorer (prefix, suffixes, candidates, among_candidates)
//	GET  /health               200 when serving
//
// and, when enabled, the runtime loads of loads.go (SGLang's
// /update_weights_from_disk, vLLM's /v1/load_lora_adapter and
// /v1/unload_lora_adapter).
//
// # Requests
//
// Every field of vLLM 0.10.1.1's CompletionRequest and
// ChatCompletionRequest is one of three kinds (CompletionFields,
// ChatFields; the tests walk them all):
//
//   - implemented, with vLLM's meaning;
//   - harmless: accepted because it cannot change the answer here;
//   - rejected: a 400 whose param names it, unless it holds vLLM's default
//     (null, false, an empty list …), which changes nothing.
//
// A field in neither schema is refused the same way (vLLM only logs it),
// and so is an unknown key of stream_options, response_format,
// chat_template_kwargs, a message, a tool call or a tool.
//
// Harmless fields: user (an end-user id for the provider's records);
// length_penalty (beam search only, which is off); spaces_between_special_tokens
// (only slow tokenizers put spaces there); add_special_tokens (evolm's
// tokenizers add none); priority (orders the queue); cache_salt (there is
// no cross-request prefix cache to isolate); guided_decoding_backend (one
// library, the same grammar); reasoning_effort (Qwen3's chat template does
// not read it).
//
// Rejected fields: prompt_embeds; best_of other than 1; use_beam_search;
// suffix; guided_regex, guided_grammar, structural_tag,
// guided_whitespace_pattern (constrained decoding takes JSON schemas and
// choices only); logits_processors; kv_transfer_params; vllm_xargs;
// include_reasoning false (no reasoning parser); documents, chat_template,
// mm_processor_kwargs; chat_template_kwargs other than enable_thinking.
// Combinations refused with a 400: tool_choice required, echo with
// logprobs while streaming, prompt_logprobs > 0 while streaming (as vLLM),
// min_tokens with a response format, continuous_usage_stats without the
// model's tokenizer.
//
// Implemented as vLLM does, where it matters:
//
//   - Log-probs (sampled, top, prompt) are the raw model's, before
//     penalties, bias and temperature; -Inf goes on the wire as -9999.
//     A completion's top_logprobs map holds the token itself and the
//     logprobs most likely (n or n+1 entries); text_offset counts
//     characters from 0.
//   - echo puts the prompt before the text and, with logprobs, the prompt's
//     tokens before the generated ones (the first with a null log-prob);
//     max_tokens 0 is allowed only with echo (it then generates nothing
//     and reports 0 completion tokens, where vLLM reports 1).
//   - prompt_logprobs is vLLM's: null, then per prompt token its own entry
//     (log-prob, rank, decoded token) and the most likely ones.
//   - Sampling: the processors of model/generate and model/sample, in
//     vLLM's order; logit_bias is clamped to ±100; stop strings and stop
//     tokens do not end a sample before min_tokens; stop_reason names the
//     stop string or a stop_token_ids token.
//   - Structured output: response_format json_object (any object) and
//     json_schema (the schema; strict and name change nothing), guided_json
//     and guided_choice, by constrained decoding (model/constrain), on
//     completions and chat alike; a schema with keywords the decoder
//     cannot enforce is refused with the keyword's name. A completion that
//     ends on an end token is checked against the schema by an independent
//     validator.
//   - Chat: message content as a string or text parts (joined with
//     newlines); tool-call arguments are parsed into objects before the
//     template, as vLLM does; tools render as the client sent them. With
//     tools, tool_choice auto (the default) parses <tool_call> blocks into
//     tool_calls (finish_reason tool_calls); a named function constrains
//     the output to its parameters' schema and returns it as that
//     function's call; parallel_tool_calls false keeps the first call.
//   - Streaming (server-sent events): completions chunks carry every key;
//     chat chunks begin with the role; the last chunk of a choice has its
//     finish reason; stream_options.include_usage (true when the object is
//     given) adds a usage chunk with no choices, continuous_usage_stats
//     usage on every chunk; the stream ends with data: [DONE], after an
//     error event too. Chunks carry their tokens' log-probs. The streamed
//     text, joined, equals the unstreamed answer's. With tools the text is
//     held back and the last chunk carries the content or the calls.
//   - A client that goes away (a stream or a plain request) ends its
//     request's decoding at the next step.
//
// # Engine
//
// The handler is generic over backend.Generator. Concurrent requests are
// coalesced into batched Generator calls (Config.MaxBatch), and concurrent
// score requests into batched Scorer calls, those with the same prefix
// next to each other and the first of a burst waiting briefly for the rest
// (backend.ScoreBatcher), so that the rubrics of one response share its
// prefill. Chat messages are rendered to a prompt by Config.RenderChat
// (the model's chat template); without one they are passed to the
// generator as Messages, and the template's fields are refused. A bad
// request gets HTTP 400 (404 for an unknown model) with the OpenAI error
// JSON {"error": {"message", "type", "param", "code"}}; a row the
// generator rejects gets 400 (a prompt over the context or the memory
// budget), an engine that could not run the request (backend.ErrUnavailable:
// out of memory, a libtorch failure) 503, and any other failure of the
// generator 500; a handler panic fails its request with 500, never the
// process.
//
// # Limits
//
// As a network server needs them: every POST must be declared
// application/json (415 otherwise, unread: a web page cannot send one
// without a CORS preflight); a body over MaxBodyBytes is answered 413
// unread, a body not received within BodyTimeout 408; headers and idle
// connections are bounded by ServerOptions. With APIKey set, every route
// but /health and /version needs "Authorization: Bearer <key>" (401
// otherwise), as vLLM's --api-key.
package server
