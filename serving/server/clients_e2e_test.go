//go:build e2e

package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/model/constrain"
	"github.com/evolm/evolm/model/modeltest"
	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/serving/openai"
	"github.com/evolm/evolm/serving/server"
	"github.com/evolm/evolm/serving/torchbe"
)

// tinyServer serves a tiny random Qwen3 (the Qwen3 tokenizer and chat
// template) with the torch engine, one request per engine call, wrapped in
// gen (nil: none); it returns the base URL (…/v1), the model and its
// directory.
func tinyServer(t *testing.T, wrap func(backend.Generator) backend.Generator) (string, *torchbe.Model, string) {
	t.Helper()
	dir := t.TempDir()
	modeltest.InitTiny(t, dir, 5)
	m, err := torchbe.Load(torchbe.Options{Dir: dir, ModelID: "tiny", Threads: 1, OneThread: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	var gen backend.Generator = m
	if wrap != nil {
		gen = wrap(m)
	}
	h, err := server.NewHandler(server.Config{Generator: gen, Scorer: m, Model: m.ID(), RenderChat: m.RenderChat, Tokenizer: m,
		MaxBatch: 1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return startHandler(t, h), m, dir
}

// TestOpenAISDKStreams: the openai SDK streams completions (text and
// token-id prompts) and chat with usage, and each joined stream equals the
// answer without streaming for the same seed (scripts/openai_stream_check.py
// asserts it chunk by chunk).
func TestOpenAISDKStreams(t *testing.T) {
	url, _, _ := tinyServer(t, nil)
	var got struct {
		Completions, TokenIDs, Chat struct {
			Choices []struct {
				Text   string
				Chunks int
			}
			Usage openai.Usage
		} `json:"-"`
		OpenAI string `json:"openai"`
	}
	out := testutil.RunPython(t, "openai_stream_check.py", url, "tiny")
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(out, &raw); err != nil {
		t.Fatalf("script output %q: %v", out, err)
	}
	_ = json.Unmarshal(out, &got)
	for _, k := range []string{"completions", "token_ids", "chat"} {
		var part struct {
			Choices []struct {
				Text   string `json:"text"`
				Chunks int    `json:"chunks"`
			} `json:"choices"`
			Usage openai.Usage `json:"usage"`
		}
		if err := json.Unmarshal(raw[k], &part); err != nil {
			t.Fatal(err)
		}
		if len(part.Choices) != 2 || part.Usage.CompletionTokens == 0 {
			t.Errorf("%s: %+v", k, part)
		}
		for i, c := range part.Choices {
			if c.Chunks < 2 {
				t.Errorf("%s choice %d came in %d chunks: not streamed", k, i, c.Chunks)
			}
		}
		t.Logf("%s (openai %s): %+v", k, got.OpenAI, part)
	}
}

// lmevalPython is lm-evaluation-harness's interpreter (`make lmeval`).
func lmevalPython(t *testing.T) string {
	t.Helper()
	p := os.Getenv("EVOLM_LMEVAL")
	if p == "" {
		p = filepath.Join(testutil.Root(t), ".venv-lmeval", "bin", "python")
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("lm-evaluation-harness interpreter %s not found: run `make lmeval` (or `make test`, which provisions it)", p)
	}
	return p
}

// lmevalTasks writes two offline tasks over four questions: a
// multiple-choice one (loglikelihood requests) and a generative one.
func lmevalTasks(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	data := filepath.Join(dir, "data.jsonl")
	rows := `{"question": "2+2=", "choices": ["3", "4"], "label": 1, "answer": "4"}
{"question": "Capital of France is", "choices": [" Paris", "Rome"], "label": 0, "answer": "Paris"}
{"question": "The sky is ", "choices": ["blue", "green", "red"], "label": 0, "answer": "blue"}
{"question": "Water boils at", "choices": [" 100 degrees", " 50 degrees"], "label": 0, "answer": "100"}
`
	mc := fmt.Sprintf(`task: evtiny_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: %s
test_split: test
output_type: multiple_choice
doc_to_text: "{{question}}"
doc_to_choice: "{{choices}}"
doc_to_target: label
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
`, data)
	gen := fmt.Sprintf(`task: evtiny_gen
dataset_path: json
dataset_kwargs:
  data_files:
    test: %s
test_split: test
output_type: generate_until
doc_to_text: "Q: {{question}}\nA:"
doc_to_target: "{{answer}}"
generation_kwargs:
  until: ["\n"]
  max_gen_toks: 8
  do_sample: false
  temperature: 0
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
`, data)
	for name, body := range map[string]string{"data.jsonl": rows, "evtiny_mc.yaml": mc, "evtiny_gen.yaml": gen} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// runLMEval runs lm_eval with args (offline) and returns its output dir.
func runLMEval(t *testing.T, args ...string) string {
	t.Helper()
	out := t.TempDir()
	cmd := exec.Command(lmevalPython(t), append([]string{"-m", "lm_eval", "--output_path", out, "--log_samples"}, args...)...)
	cmd.Dir = out
	cmd.Env = append(os.Environ(), "HF_HUB_OFFLINE=1", "HF_DATASETS_OFFLINE=1", "HF_HOME="+filepath.Join(out, "hf"), "TOKENIZERS_PARALLELISM=false")
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("lm_eval %v: %v\n%s", args, err, b)
	}
	t.Logf("lm_eval %s:\n%s", args[1], tail(string(b), 8))
	return out
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// samples returns the --log_samples records of a task under out.
func samples(t *testing.T, out, task string) ([]string, []map[string]any) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(out, "*", "samples_"+task+"_*.jsonl"))
	if len(files) != 1 {
		t.Fatalf("samples of %s under %s: %v", task, out, files)
	}
	f, err := os.Open(files[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var recs []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var r map[string]any
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	return files, recs
}

// promptRecorder is a test double around the engine that records the
// requests it was handed.
type promptRecorder struct {
	backend.Generator
	mu   sync.Mutex
	reqs []backend.GenerateRequest
}

func (p *promptRecorder) Generate(ctx context.Context, reqs []backend.GenerateRequest) ([]backend.GenerateResponse, error) {
	p.mu.Lock()
	p.reqs = append(p.reqs, reqs...)
	p.mu.Unlock()
	return p.Generator.Generate(ctx, reqs)
}

// TestLMEvalHarness runs lm-evaluation-harness 0.4.13 against evolm serve:
// a loglikelihood task and a generate_until task with local-completions
// (token-id prompts, its default) and a generate_until task with
// local-chat-completions. Its log-likelihoods equal transformers' within
// 1e-4 (scripts/lmeval_reference.py encodes each request as lm-eval does).
func TestLMEvalHarness(t *testing.T) {
	rec := &promptRecorder{}
	url, _, dir := tinyServer(t, func(g backend.Generator) backend.Generator { rec.Generator = g; return rec })
	tasks := lmevalTasks(t)
	out := runLMEval(t, "--model", "local-completions", "--model_args",
		"model=tiny,base_url="+url+"/completions,tokenizer="+dir+",num_concurrent=1,max_retries=1",
		"--tasks", "evtiny_mc,evtiny_gen", "--include_path", tasks, "--batch_size", "1")
	rec.mu.Lock()
	ids, echo := 0, 0
	for _, q := range rec.reqs {
		if len(q.PromptTokenIDs) > 0 {
			ids++
		}
		if q.PromptLogProbs {
			echo++
		}
	}
	n := len(rec.reqs)
	rec.mu.Unlock()
	if ids != n || echo != 9 {
		t.Errorf("lm-eval sent %d requests, %d with token-id prompts, %d scoring their prompt; want all token ids and 9 loglikelihood requests", n, ids, echo)
	}
	files, recs := samples(t, out, "evtiny_mc")
	if len(recs) != 4 {
		t.Fatalf("%d multiple-choice samples", len(recs))
	}
	var ref []struct {
		LMEval float64 `json:"lmeval"`
		HF     float64 `json:"hf"`
		Tokens int     `json:"tokens"`
	}
	if err := json.Unmarshal(testutil.RunPython(t, "lmeval_reference.py", append([]string{dir}, files...)...), &ref); err != nil {
		t.Fatal(err)
	}
	worst := 0.0
	for i, r := range ref {
		d := math.Abs(r.LMEval - r.HF)
		worst = max(worst, d)
		if d > 1e-4 || r.Tokens == 0 {
			t.Errorf("request %d: lm-eval log-likelihood %v, transformers %v (%d tokens)", i, r.LMEval, r.HF, r.Tokens)
		}
	}
	t.Logf("%d log-likelihoods, largest difference from transformers %.2g", len(ref), worst)
	if _, gen := samples(t, out, "evtiny_gen"); len(gen) != 4 {
		t.Errorf("%d generate_until samples", len(gen))
	}

	chatOut := runLMEval(t, "--model", "local-chat-completions", "--model_args",
		"model=tiny,base_url="+url+"/chat/completions,num_concurrent=1,max_retries=1",
		"--tasks", "evtiny_gen", "--include_path", tasks, "--apply_chat_template")
	if _, gen := samples(t, chatOut, "evtiny_gen"); len(gen) != 4 {
		t.Errorf("%d chat generate_until samples", len(gen))
	}
}

// abortRecorder is a test double around the engine: it reports each
// response the engine gives, including those of requests whose client has
// gone.
type abortRecorder struct {
	backend.Generator
	got chan backend.GenerateResponse
}

func (a *abortRecorder) Generate(ctx context.Context, reqs []backend.GenerateRequest) ([]backend.GenerateResponse, error) {
	// Run on past the caller's context: the request's Done must stop it.
	out, err := a.Generator.Generate(context.Background(), reqs)
	for _, r := range out {
		a.got <- r
	}
	return out, err
}

// TestDisconnectStopsDecoding: a client that reads one chunk of a long
// stream and goes away ends its request's decoding (finish_reason abort)
// long before max_tokens.
func TestDisconnectStopsDecoding(t *testing.T) {
	rec := &abortRecorder{got: make(chan backend.GenerateResponse, 4)}
	url, _, _ := tinyServer(t, func(g backend.Generator) backend.Generator { rec.Generator = g; return rec })
	const maxTokens = 20000
	ctx, cancel := context.WithCancel(context.Background())
	body := fmt.Sprintf(`{"prompt": "Once upon a time", "max_tokens": %d, "stream": true, "ignore_eos": true}`, maxTokens)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first chunk: %q %v", line, err)
	}
	cancel()
	resp.Body.Close()
	r := <-rec.got
	c := r.Completions[0]
	if c.FinishReason != backend.FinishAbort || c.Tokens >= maxTokens {
		t.Errorf("the abandoned request ended %q after %d tokens, want abort well before %d", c.FinishReason, c.Tokens, maxTokens)
	}
	t.Logf("decoding stopped after %d of %d tokens", c.Tokens, maxTokens)
}

// TestStructuredOutputOnTheEngine: with the Qwen3 vocabulary, every sample
// of a json_schema request (a rubric's schema), of json_object and of
// guided_choice parses and validates (santhosh-tekuri/jsonschema), at
// temperature 1 and a tight token budget; a budget below the schema's
// shortest value is refused.
func TestStructuredOutputOnTheEngine(t *testing.T) {
	url, _, _ := tinyServer(t, nil)
	schema := `{"type": "object", "properties": {"criteria": {"type": "array", "minItems": 2, "maxItems": 3, "items": {"type": "object",
		"properties": {"criterion": {"type": "string", "maxLength": 30}, "weight": {"type": "number"}}, "required": ["criterion", "weight"]}}},
		"required": ["criteria"]}`
	val, err := constrain.NewValidator([]byte(schema))
	if err != nil {
		t.Fatal(err)
	}
	check := func(name, body string, ok func(string) error) {
		t.Helper()
		status, answer, _ := post2(t, url+"/chat/completions", body)
		if status != http.StatusOK {
			t.Fatalf("%s: %d %s", name, status, answer)
		}
		var cr openai.ChatResponse
		if err := json.Unmarshal([]byte(answer), &cr); err != nil {
			t.Fatal(err)
		}
		for _, c := range cr.Choices {
			if err := ok(c.Message.Content); err != nil {
				t.Errorf("%s choice %d (%s): %q: %v", name, c.Index, c.FinishReason, c.Message.Content, err)
			}
		}
		t.Logf("%s: %q", name, cr.Choices[0].Message.Content)
	}
	msgs := `"messages": [{"role": "user", "content": "Write a rubric."}], "n": 4, "temperature": 1.0, "seed": 3`
	check("json_schema", `{`+msgs+`, "max_tokens": 90, "response_format": {"type": "json_schema", "json_schema": {"name": "rubric", "schema": `+schema+`}}}`, val.Validate)
	check("json_object", `{`+msgs+`, "max_tokens": 12, "response_format": {"type": "json_object"}}`, func(s string) error {
		var m map[string]any
		return json.Unmarshal([]byte(s), &m)
	})
	check("guided_choice", `{`+msgs+`, "max_tokens": 8, "guided_choice": ["yes", "no", "maybe not"]}`, func(s string) error {
		if s != "yes" && s != "no" && s != "maybe not" {
			return fmt.Errorf("not a choice")
		}
		return nil
	})
	if status, answer, _ := post2(t, url+"/chat/completions", `{`+msgs+`, "max_tokens": 5, "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": `+schema+`}}}`); status != http.StatusBadRequest || !strings.Contains(answer, "too small for the response format") {
		t.Errorf("a budget below the shortest value: %d %s", status, answer)
	}
	if status, answer, param := post2(t, url+"/chat/completions", `{`+msgs+`, "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "string", "pattern": "a+"}}}}`); status != http.StatusBadRequest || !strings.Contains(answer, `pattern`) || param != "response_format.json_schema.schema" {
		t.Errorf("a schema keyword the decoder cannot enforce: %d %s", status, answer)
	}
}

// TestChatTemplateWithToolsMatchesTransformers: /tokenize renders
// conversations with tools, tool calls, tool messages, enable_thinking and
// continue_final_message through the chat template to the token ids
// transformers' apply_chat_template gives for them.
func TestChatTemplateWithToolsMatchesTransformers(t *testing.T) {
	url, _, dir := tinyServer(t, nil)
	root := strings.TrimSuffix(url, "/v1")
	weather := json.RawMessage(`{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}}`)
	calls := []openai.ToolCall{
		{ID: "c1", Type: "function", Function: openai.FunctionCall{Name: "get_weather", Arguments: `{"city": "Paris", "days": 2}`}},
		{ID: "c2", Type: "function", Function: openai.FunctionCall{Name: "get_weather", Arguments: `{"city":"Oslo"}`}},
	}
	conv := []openai.ChatMessage{
		{Role: "system", Content: "You are helpful."},
		{Role: "user", Content: "Weather in Paris and Oslo?"},
		{Role: "assistant", Content: "Let me check.", ToolCalls: calls},
		{Role: "tool", Content: "18C", ToolCallID: "c1"},
		{Role: "tool", Content: "9C", ToolCallID: "c2"},
	}
	f := false
	type tcase struct {
		msgs     []openai.ChatMessage
		tools    []json.RawMessage
		gen      bool
		cont     bool
		thinking *bool
	}
	cases := []tcase{
		{conv, []json.RawMessage{weather}, true, false, nil},
		{conv, []json.RawMessage{weather}, true, false, &f},
		{conv[1:2], []json.RawMessage{weather}, true, false, nil},
		{append(conv[:2:2], openai.ChatMessage{Role: "assistant", Content: "It is"}), nil, false, true, nil},
	}
	var pyCases []map[string]any
	var got [][]int
	for _, c := range cases {
		req := openai.TokenizeRequest{Messages: c.msgs, Tools: c.tools, AddGenerationPrompt: &c.gen, ContinueFinalMessage: c.cont}
		if c.thinking != nil {
			req.ChatTemplateKwargs = map[string]json.RawMessage{"enable_thinking": json.RawMessage(fmt.Sprint(*c.thinking))}
		}
		r := postJSON(t, root+"/tokenize", req)
		var tr openai.TokenizeResponse
		if r.status != http.StatusOK || json.Unmarshal([]byte(r.body), &tr) != nil {
			t.Fatalf("tokenize: %+v", r)
		}
		got = append(got, tr.Tokens)
		// The reference gets the arguments as objects, as vLLM hands them.
		var msgs []map[string]any
		for _, m := range c.msgs {
			pm := map[string]any{"role": m.Role, "content": m.Content}
			var tcs []any
			for _, tc := range m.ToolCalls {
				var args map[string]any
				_ = json.Unmarshal([]byte(tc.Function.Arguments), &args)
				tcs = append(tcs, map[string]any{"type": "function", "function": map[string]any{"name": tc.Function.Name, "arguments": args}})
			}
			if tcs != nil {
				pm["tool_calls"] = tcs
			}
			msgs = append(msgs, pm)
		}
		pyCases = append(pyCases, map[string]any{"messages": msgs, "tools": c.tools, "add_generation_prompt": c.gen,
			"continue_final_message": c.cont, "enable_thinking": c.thinking})
	}
	in, _ := json.Marshal(pyCases)
	var want [][]int
	if err := json.Unmarshal(testutil.RunPythonInput(t, "chat_tools_reference.py", in, dir), &want); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("token ids of the chat template with tools (-transformers +evolm serve):\n%s", diff)
	}
	// /detokenize keeps special tokens, as vLLM's does; /version is vLLM's.
	r := postJSON(t, root+"/detokenize", openai.DetokenizeRequest{Tokens: got[0]})
	var dr openai.DetokenizeResponse
	if r.status != http.StatusOK || json.Unmarshal([]byte(r.body), &dr) != nil || !strings.HasPrefix(dr.Prompt, "<|im_start|>system\nYou are helpful.") {
		t.Errorf("detokenize: %+v", r)
	}
	if r := postJSON(t, root+"/detokenize", openai.DetokenizeRequest{Tokens: []int{-1}}); r.status != http.StatusBadRequest {
		t.Errorf("detokenize of an id outside the vocabulary: %+v", r)
	}
	resp, err := http.Get(root + "/version")
	if err != nil {
		t.Fatal(err)
	}
	var v openai.VersionResponse
	_ = json.NewDecoder(resp.Body).Decode(&v)
	resp.Body.Close()
	if v.Version != server.Version {
		t.Errorf("version %q", v.Version)
	}
}
