// Package lmstage holds what the model-calling stages (rollout, rubrics,
// judge) share, so that each is written once: the backend config fields and
// opening a backend (`torch` in process via model/torchbe, or `openai`
// against OpenAI-compatible endpoints), input discovery in the run
// directory, the derivation of per-row seeds, role prompt loading with
// overrides, provenance metadata and request batching.
//
// Seeds. A row's seed is DeriveSeed(base, key…): the first 8 bytes of
// SHA-256 over the base seed and the row's key parts, as a non-negative
// int64. It depends only on its inputs, so reruns and both backends sample
// with the same seed.
//
// Inputs. A stage input is a list of files or globs from config; when the
// list is empty the stage reads the committed shards of the producing stage
// from the run's manifest, restricted to the given partitions. No input
// file at all is an error naming what was looked for.
package lmstage

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/evolm/evolm/model/backend"
	"github.com/evolm/evolm/model/openai"
	"github.com/evolm/evolm/model/torchbe"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/stages/prompts"
)

// Backend names.
const (
	BackendTorch  = "torch"
	BackendOpenAI = "openai"
)

// Config keys shared by the model stages.
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
	KeyTopLogprobs = "score_top_logprobs"
	KeyBatchRows   = "batch_rows"
	KeyPromptFiles = "prompt_files"
	KeySeed        = "seed"
	KeyStep        = "step"
	KeyPhase       = "phase"
)

// BackendFields are the config fields of a model stage's backend.
func BackendFields() []pipeline.Field {
	return []pipeline.Field{
		{Key: KeyBackend, Type: pipeline.TypeString, Default: BackendTorch, Enum: []string{BackendTorch, BackendOpenAI},
			Description: "model backend: torch (in process) or openai (OpenAI-compatible endpoints)"},
		{Key: KeyModel, Type: pipeline.TypeString, Default: "",
			Description: "torch: checkpoint directory (HF format); openai: the served model name",
			Example:     "checkpoints/qwen3-tiny"},
		{Key: KeyEndpoints, Type: pipeline.TypeStrings, Default: []string{},
			Description: "openai: base URLs of the servers", Example: []string{"http://127.0.0.1:8000/v1"}},
		{Key: KeyDevice, Type: pipeline.TypeString, Default: "cpu", Description: "torch: cpu, cuda or cuda:N"},
		{Key: KeyDType, Type: pipeline.TypeString, Default: "", Description: "torch: parameter dtype; empty: float32 on CPU, bfloat16 on CUDA"},
		{Key: KeyThreads, Type: pipeline.TypeInt, Default: 0, Description: "torch: libtorch intra-op threads; 0: libtorch's default"},
		{Key: KeyMaxBatch, Type: pipeline.TypeInt, Default: 64, Description: "torch: most sequences decoded or scored together"},
		{Key: KeyThinking, Type: pipeline.TypeBool, Default: false, Description: "torch: render chats with enable_thinking=False"},
		{Key: KeyInFlight, Type: pipeline.TypeInt, Default: 16, Description: "openai: most requests in flight over all endpoints"},
		{Key: KeyTimeout, Type: pipeline.TypeDuration, Default: "10m", Description: "openai: timeout of one HTTP attempt"},
		{Key: KeyAttempts, Type: pipeline.TypeInt, Default: 6, Description: "openai: attempts per request (retries on 429, 5xx, timeouts)"},
		{Key: KeyBatchRows, Type: pipeline.TypeInt, Default: 64, Description: "requests handed to the backend per call"},
		{Key: KeyPromptFiles, Type: pipeline.TypeStrings, Default: []string{},
			Description: "role prompt overrides as role=path", Example: []string{"judge_yesno=prompts/judge_yesno.tmpl"}},
	}
}

// BackendConfig is the backend part of a model stage's config.
type BackendConfig struct {
	Backend         string
	Model           string
	Endpoints       []string
	Device, DType   string
	Threads         int
	MaxBatch        int
	DisableThinking bool
	MaxInFlight     int
	RequestTimeout  time.Duration
	MaxAttempts     int
	TopLogprobs     int // openai Score alternatives; 0: the client's default
	BatchRows       int
}

// ReadBackend reads and checks the backend fields.
func ReadBackend(cfg *pipeline.Config) (BackendConfig, error) {
	bc := BackendConfig{
		Backend: cfg.String(KeyBackend), Model: cfg.String(KeyModel), Endpoints: cfg.Strings(KeyEndpoints),
		Device: cfg.String(KeyDevice), DType: cfg.String(KeyDType), Threads: cfg.Int(KeyThreads),
		MaxBatch: cfg.Int(KeyMaxBatch), DisableThinking: cfg.Bool(KeyThinking), MaxInFlight: cfg.Int(KeyInFlight),
		RequestTimeout: cfg.Duration(KeyTimeout), MaxAttempts: cfg.Int(KeyAttempts), BatchRows: cfg.Int(KeyBatchRows),
	}
	if cfg.Has(KeyTopLogprobs) {
		bc.TopLogprobs = cfg.Int(KeyTopLogprobs)
	}
	switch {
	case bc.Backend == BackendOpenAI && len(bc.Endpoints) == 0:
		return bc, cfg.Errorf(KeyEndpoints, "the openai backend needs at least one endpoint")
	case bc.MaxBatch <= 0:
		return bc, cfg.Errorf(KeyMaxBatch, "%d, want > 0", bc.MaxBatch)
	case bc.MaxInFlight <= 0:
		return bc, cfg.Errorf(KeyInFlight, "%d, want > 0", bc.MaxInFlight)
	case bc.MaxAttempts <= 0:
		return bc, cfg.Errorf(KeyAttempts, "%d, want > 0", bc.MaxAttempts)
	case bc.BatchRows <= 0:
		return bc, cfg.Errorf(KeyBatchRows, "%d, want > 0", bc.BatchRows)
	case bc.Threads < 0:
		return bc, cfg.Errorf(KeyThreads, "%d, want >= 0", bc.Threads)
	case bc.TopLogprobs < 0:
		return bc, cfg.Errorf(KeyTopLogprobs, "%d, want >= 0", bc.TopLogprobs)
	case bc.Model == "":
		// Last, so that the checks above still run for a config that
		// leaves the model to the command line (pipeline.Validate).
		return bc, cfg.Unsetf(KeyModel, "required: a checkpoint directory (torch) or a served model name (openai)")
	}
	return bc, nil
}

// Backend is an opened model backend.
type Backend struct {
	Name  string // BackendTorch or BackendOpenAI
	Model string // model id recorded in outputs
	backend.Generator
	backend.Scorer
	close func()
}

// Close releases the backend (the torch model's weights, idle connections).
func (b *Backend) Close() {
	if b.close != nil {
		b.close()
		b.close = nil
	}
}

// Open opens the configured backend.
func Open(bc BackendConfig, log *slog.Logger) (*Backend, error) {
	switch bc.Backend {
	case BackendTorch:
		m, err := torchbe.Load(torchbe.Options{Dir: bc.Model, Device: bc.Device, DType: bc.DType, Threads: bc.Threads,
			MaxBatch: bc.MaxBatch, DisableThinking: bc.DisableThinking})
		if err != nil {
			return nil, err
		}
		return &Backend{Name: BackendTorch, Model: m.ID(), Generator: m, Scorer: m, close: m.Close}, nil
	case BackendOpenAI:
		c, err := openai.New(openai.Config{Endpoints: bc.Endpoints, Model: bc.Model, MaxInFlight: bc.MaxInFlight,
			MaxAttempts: bc.MaxAttempts, RequestTimeout: bc.RequestTimeout, ScoreTopLogprobs: bc.TopLogprobs, Logger: log})
		if err != nil {
			return nil, err
		}
		return &Backend{Name: BackendOpenAI, Model: c.Model(), Generator: c, Scorer: c, close: c.Close}, nil
	}
	return nil, fmt.Errorf("unknown backend %q", bc.Backend)
}

// DeriveSeed returns the seed of a row: SHA-256 over the base seed and the
// key parts, first 8 bytes, as a non-negative int64.
func DeriveSeed(base int64, parts ...string) int64 {
	h := sha256.New()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(base))
	h.Write(b[:])
	for _, p := range parts {
		h.Write([]byte{0})
		h.Write([]byte(p))
	}
	return int64(binary.LittleEndian.Uint64(h.Sum(nil)[:8]) >> 1)
}

// Prompts loads the role prompts with the overrides of the prompt_files key
// ("role=path" entries).
func Prompts(cfg *pipeline.Config) (*prompts.Set, error) {
	over := map[prompts.Name]string{}
	for _, kv := range cfg.Strings(KeyPromptFiles) {
		role, path, ok := strings.Cut(kv, "=")
		if !ok || role == "" || path == "" {
			return nil, cfg.Errorf(KeyPromptFiles, "entry %q: want role=path", kv)
		}
		over[prompts.Name(role)] = path
	}
	set, err := prompts.Load(over)
	if err != nil {
		return nil, cfg.Errorf(KeyPromptFiles, "%v", err)
	}
	return set, nil
}

// Metadata keys a model stage adds to its output schema (and so to every
// shard's stored Arrow schema).
const (
	MetaBackend      = "evolm.backend"
	MetaModel        = "evolm.model"
	MetaPromptPrefix = "evolm.prompt." // + role: the role prompt's version
	// MetaPromptsFiles is a JSON list of the absolute paths of the prompts
	// files a stage read, so that a later stage (a standalone judge) finds
	// the questions of its rows without being told (PromptsFilesOf).
	MetaPromptsFiles = "evolm.prompts_files"
)

// PromptsFilesMeta returns the MetaPromptsFiles entry for files.
func PromptsFilesMeta(files []string) (map[string]string, error) {
	abs := make([]string, len(files))
	for i, f := range files {
		a, err := filepath.Abs(f)
		if err != nil {
			return nil, err
		}
		abs[i] = a
	}
	b, err := json.Marshal(abs)
	if err != nil {
		return nil, err
	}
	return map[string]string{MetaPromptsFiles: string(b)}, nil
}

// PromptsFilesOf returns the prompts files that the stage which wrote
// shards recorded (MetaPromptsFiles), those that still exist, deduplicated
// and sorted.
func PromptsFilesOf(shards []string) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	for _, sh := range shards {
		r, err := pipeline.OpenShard(sh, pipeline.ReadOptions{})
		if err != nil {
			return nil, err
		}
		raw, ok := r.Metadata()[MetaPromptsFiles]
		r.Close()
		if !ok {
			continue
		}
		var files []string
		if err := json.Unmarshal([]byte(raw), &files); err != nil {
			return nil, fmt.Errorf("%s: metadata %s: %w", sh, MetaPromptsFiles, err)
		}
		for _, f := range files {
			if _, err := os.Stat(f); err == nil && !seen[f] {
				seen[f] = true
				out = append(out, f)
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// WithMeta returns schema with kv added to its metadata.
func WithMeta(schema *arrow.Schema, kv map[string]string) *arrow.Schema {
	md := schema.Metadata()
	keys, vals := append([]string(nil), md.Keys()...), append([]string(nil), md.Values()...)
	ks := make([]string, 0, len(kv))
	for k := range kv {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	for _, k := range ks {
		keys, vals = append(keys, k), append(vals, kv[k])
	}
	m := arrow.NewMetadata(keys, vals)
	return arrow.NewSchema(schema.Fields(), &m)
}

// Provenance is the metadata of a model stage's output: the backend, the
// model and the versions of the role prompts used.
func Provenance(b *Backend, set *prompts.Set, roles ...prompts.Name) map[string]string {
	kv := map[string]string{MetaBackend: b.Name, MetaModel: b.Model}
	for _, r := range roles {
		kv[MetaPromptPrefix+string(r)] = set.Template(r).Version
	}
	return kv
}

// Inputs resolves a stage input: the configured files and globs (sorted,
// deduplicated), or, when none are configured, the committed shards of
// stage under table in the run whose path has every partition in parts,
// each checked against its manifest entry (pipeline.Run.CheckShard).
func Inputs(env *pipeline.Env, configured []string, stage, table string, parts ...pipeline.Partition) ([]string, error) {
	var out []string
	if len(configured) > 0 {
		seen := map[string]bool{}
		for _, g := range configured {
			matches, err := filepath.Glob(g)
			if err != nil {
				return nil, fmt.Errorf("input %q: %w", g, err)
			}
			if len(matches) == 0 {
				return nil, fmt.Errorf("input %q: no such file", g)
			}
			for _, m := range matches {
				if !seen[m] {
					seen[m] = true
					out = append(out, m)
				}
			}
		}
		sort.Strings(out)
		return out, nil
	}
	m, err := env.Run.Manifest(stage)
	if err != nil {
		return nil, err
	}
	for _, p := range m.Paths(table) {
		ok := true
		for _, part := range parts {
			if !strings.Contains("/"+p+"/", "/"+part.String()+"/") {
				ok = false
				break
			}
		}
		if ok {
			info, _ := m.Shard(p)
			if err := env.Run.CheckShard(info); err != nil {
				return nil, fmt.Errorf("stage %s input: %w", env.Stage, err)
			}
			out = append(out, env.Run.Path(p))
		}
	}
	if len(out) == 0 {
		var ps []string
		for _, p := range parts {
			ps = append(ps, p.String())
		}
		return nil, fmt.Errorf("no %s shards committed by stage %s in run %s (partitions %s): run `evolm %s` first or set the input files",
			table, stage, env.Run.Dir, strings.Join(ps, ", "), stage)
	}
	return out, nil
}

// Chunks calls fn on consecutive [start, end) ranges of at most size out of
// n, stopping at the first error or when ctx is done.
func Chunks(ctx context.Context, n, size int, fn func(start, end int) error) error {
	for start := 0; start < n; start += size {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(start, min(start+size, n)); err != nil {
			return err
		}
	}
	return nil
}

// FailureText renders a backend row failure for an output column.
func FailureText(f *backend.RowFailure) string {
	return "backend " + f.Error()
}
