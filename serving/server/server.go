package server

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/evolm/evolm/internal/failpoint"
	"github.com/evolm/evolm/model/chat"
	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/serving/openai"
)

// Version is what GET /version reports: the vLLM release whose API evolm
// serve follows, as vLLM reports its own.
const Version = "0.10.1.1"

// Tokenizer is what the tokenizer routes and token-id prompts need from a
// served model.
type Tokenizer interface {
	// Tokenize encodes text as the engine encodes a prompt.
	Tokenize(text string) []int
	// Detokenize decodes ids, special tokens kept; an id outside the
	// vocabulary is an error.
	Detokenize(ids []int) (string, error)
	// TokenStrings are the vocabulary's strings of ids (HF's
	// convert_ids_to_tokens).
	TokenStrings(ids []int) []string
	// MaxModelLen is the most tokens of prompt and completion.
	MaxModelLen() int
}

// Config configures the handler.
type Config struct {
	Generator backend.Generator // required
	// Scorer serves /v1/evolm/score; nil uses the Generator when it is also
	// a backend.Scorer (the torch engine is), else the route answers 404
	// and clients fall back to top log-probs.
	Scorer backend.Scorer
	Model  string // model id served at /v1/models; required
	// RenderChat renders a conversation to prompt text with the model's
	// chat template (the Qwen3 ChatML template of model/chat). nil passes
	// messages to the Generator unrendered, and chat requests can then use
	// none of the template's fields (tools, tool messages,
	// continue_final_message …).
	RenderChat func([]chat.Message, chat.Options) (string, error)
	// Tokenizer serves /tokenize and /detokenize and max_model_len; nil:
	// those routes answer 404.
	Tokenizer Tokenizer
	// DefaultMaxTokens applies when a request gives no max_tokens; default 16
	// for completions (as OpenAI's legacy API) and ChatMaxTokens for chat.
	DefaultMaxTokens int
	ChatMaxTokens    int // default 1024
	MaxTopLogprobs   int // most alternatives per position; default 20
	MaxN             int // most samples per request; default 128
	// MaxBodyBytes is the largest request body; a larger one is answered
	// 413 without being read. Default 32 MiB.
	MaxBodyBytes int64
	// BodyTimeout bounds the reading of a request body (a slow-loris body
	// is answered 408 and its connection closed); default 30s. The reading
	// of headers and idle connections are bounded by ServerOptions.
	BodyTimeout time.Duration
	// APIKey, when set, is required as "Authorization: Bearer <key>" on
	// every route but /health and /version, as vLLM's --api-key (401
	// otherwise).
	APIKey string
	// MaxBatch is the most requests per Generator or Scorer call:
	// concurrent HTTP requests are coalesced by a backend.Batcher (a
	// backend.ScoreBatcher for scores), so an engine that runs one call at
	// a time still decodes them together. Default 32; 1 turns coalescing
	// off and every HTTP request calls the engine on its own.
	MaxBatch int
	// BatchRunners is how many coalesced Generator calls may run at once;
	// default 1. Coalesced Scorer calls run one at a time.
	BatchRunners int
	Logger       *slog.Logger
	// Root is the served model's directory, reported as its root by
	// /v1/models (as vLLM does); "" leaves it out.
	Root string
	// Loader loads engines while the server runs (loads.go). Its routes
	// are off unless enabled: WeightUpdates serves SGLang's POST
	// /update_weights_from_disk, RuntimeLoRA vLLM's POST
	// /v1/load_lora_adapter and /v1/unload_lora_adapter (as vLLM serves
	// them only with VLLM_ALLOW_RUNTIME_LORA_UPDATING). Every path they
	// load must lie under LoadRoot, which they then need.
	Loader        Loader
	WeightUpdates bool
	RuntimeLoRA   bool
	LoadRoot      string
	// MaxLoRAs is the most adapters loaded at once (vLLM's --max-loras);
	// loading one more is refused. Default 8.
	MaxLoRAs int
}

type server struct {
	cfg  Config
	reg  *registry
	log  *slog.Logger
	root string // LoadRoot, absolute with symlinks resolved
}

// NewHandler checks cfg and returns the OpenAI-compatible handler.
func NewHandler(cfg Config) (http.Handler, error) {
	if cfg.Generator == nil {
		return nil, errors.New("serve: no generator")
	}
	if cfg.Model == "" {
		return nil, errors.New("serve: no model id")
	}
	defaults(&cfg)
	s := &server{cfg: cfg, log: cfg.Logger}
	if s.log == nil {
		s.log = slog.Default()
	}
	if cfg.WeightUpdates || cfg.RuntimeLoRA {
		if cfg.Loader == nil {
			return nil, errors.New("serve: runtime loads enabled without a loader")
		}
		root, err := resolveRoot(cfg.LoadRoot)
		if err != nil {
			return nil, err
		}
		s.root = root
	}
	s.reg = &registry{adapters: map[string]*entry{}, log: s.log, loads: make(chan struct{}, 1)}
	s.reg.base = s.newEntry(cfg.Model, cfg.Root, "", Engine{Generator: cfg.Generator, Scorer: cfg.Scorer, RenderChat: cfg.RenderChat, Tokenizer: cfg.Tokenizer})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("POST /v1/completions", handle(s, completionTable, func(q *openai.CompletionRequest) string { return q.Model }, s.doCompletions))
	mux.HandleFunc("POST /v1/chat/completions", handle(s, chatTable, func(q *openai.ChatRequest) string { return q.Model }, s.doChat))
	mux.HandleFunc("POST /v1/evolm/score", handle(s, nil, func(q *openai.ScoreBody) string { return q.Model }, s.doScore))
	mux.HandleFunc("POST /tokenize", handle(s, nil, func(q *openai.TokenizeRequest) string { return q.Model }, s.doTokenize))
	mux.HandleFunc("POST /detokenize", handle(s, nil, func(q *openai.DetokenizeRequest) string { return q.Model }, s.doDetokenize))
	mux.HandleFunc("GET /version", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, openai.VersionResponse{Version: Version})
	})
	if cfg.WeightUpdates {
		mux.HandleFunc("POST "+openai.UpdateWeightsFromDiskPath, s.updateWeightsFromDisk)
	}
	if cfg.RuntimeLoRA {
		mux.HandleFunc("POST /v1"+openai.LoadLoRAAdapterPath, s.loadLoRAAdapter)
		mux.HandleFunc("POST /v1"+openai.UnloadLoRAAdapterPath, s.unloadLoRAAdapter)
	}
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "invalid_request_error", "", fmt.Sprintf("no route %s %s", r.Method, r.URL.Path))
	})
	var h http.Handler = mux
	if cfg.APIKey != "" {
		h = requireKey(cfg.APIKey, h)
	}
	return s.recoverPanics(h), nil
}

func defaults(cfg *Config) {
	if cfg.DefaultMaxTokens <= 0 {
		cfg.DefaultMaxTokens = 16
	}
	if cfg.ChatMaxTokens <= 0 {
		cfg.ChatMaxTokens = 1024
	}
	if cfg.MaxTopLogprobs <= 0 {
		cfg.MaxTopLogprobs = 20
	}
	if cfg.MaxN <= 0 {
		cfg.MaxN = 128
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 32 << 20
	}
	if cfg.BodyTimeout <= 0 {
		cfg.BodyTimeout = 30 * time.Second
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 32
	}
	if cfg.MaxLoRAs <= 0 {
		cfg.MaxLoRAs = 8
	}
}

// requireKey answers 401 to a request (any method but OPTIONS) on any
// route but /health and /version without "Authorization: Bearer <key>",
// before its body is read.
func requireKey(key string, next http.Handler) http.Handler {
	want := []byte("Bearer " + key)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		open := r.URL.Path == "/health" || r.URL.Path == "/version"
		if r.Method != http.MethodOptions && !open &&
			subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="evolm"`)
			writeAPIError(w, &apiError{status: http.StatusUnauthorized, typ: "invalid_request_error", code: "invalid_api_key",
				msg: "Unauthorized: this server needs an API key (Authorization: Bearer <key>)"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// recoverPanics fails a request whose handler panics with a 500, and logs
// the stack, instead of dropping the connection (net/http's default).
func (s *server) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			p := recover()
			if p == nil {
				return
			}
			if p == http.ErrAbortHandler {
				panic(p)
			}
			s.log.Error("serve: handler panic; the request fails, the server goes on", "path", r.URL.Path,
				"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			writeError(w, http.StatusInternalServerError, "server_error", "", fmt.Sprintf("internal error: %v", p))
		}()
		next.ServeHTTP(w, r)
	})
}

func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// handle is the handler of a POST endpoint: it reads the body, refuses
// fields the table does not accept (checkFields; nil: any), decodes it as a
// Q, finds the model it names (model; 404 when it is not served) and
// answers it with do on that model; an error from any of them is the
// response (s.fail), unless do has begun a stream.
func handle[Q any](s *server, fields fieldTable, model func(*Q) string, do func(w http.ResponseWriter, r *http.Request, req *Q, e *entry) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req Q
		body, err := s.readBody(w, r)
		if err == nil && fields != nil {
			err = checkFields(body, fields)
		}
		if err == nil {
			err = unmarshal(body, &req)
		}
		if err == nil {
			var e *entry
			// Fault tests: EVOLM_FAILPOINT=serve-request@N kills the
			// server at its N-th request, mid-step for a learner.
			failpoint.Hit("serve-request")
			if e, err = s.reg.acquire(model(&req)); err == nil {
				err = do(w, r, &req, e)
				s.reg.release(e)
			}
		}
		if err != nil {
			s.fail(w, r, err)
		}
	}
}

// engineTemplate reports why e's chat requests cannot use a template
// field: e has no chat template of its own.
func noTemplate(e *entry, field string) error {
	if e.eng.RenderChat == nil {
		return badRequest(field, "%s needs the served model's chat template, and this server renders none", field)
	}
	return nil
}
