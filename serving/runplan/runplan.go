// Package runplan builds the memory plan (model/plan) of `evolm run` from
// the merged config: the roles' models and devices (roles.*) and the
// learner the run builds from stages.run. `evolm plan` prints it; the loop calls Refuse
// at start, before any model is loaded, and stops with the plan when the
// configuration cannot fit its device.
//
// What it reads:
//
//   - model shapes: each role's config.json (roles.<role>.model is an HF
//     checkpoint directory) or, when the directory has none, a preset name
//     (the directory's base name, case-insensitive: models/Qwen3-8B is the
//     qwen3-8b preset, model.Presets);
//   - element size: roles.<role>.dtype, or its default (float32 on CPU,
//     bfloat16 on CUDA);
//   - the judge counts on the policy's device when its backend keeps it in
//     process on the same device (roles.Placement); a rubric generator with a model of
//     its own (two-model ablation) is a second trained model there;
//   - the learner the run builds (backend.LearnerConfig, from stages.run):
//     micro_batch, beta, LoRA (rank 0: full fine-tuning) and its targets,
//     grad_checkpointing, the ZeRO stage;
//   - sequence lengths: a prompt of Options.PromptTokens tokens; the policy
//     generates roles.policy.max_tokens; the rubric generator sees the
//     question alone and writes roles.rubric_generator.max_tokens; question
//     back-translation reads a whole answer and writes up to the policy's
//     budget; the judge reads the question, an answer and the rubric (at
//     generator's budget) and writes up to its max_tokens. The
//     learner's sequence is the longest sequence it trains on; the
//     generation batch is the engine's max_batch rows of the longest
//     generated sequence.
package runplan

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/evolm/evolm/model"
	_ "github.com/evolm/evolm/model/llama" // the architectures config.json names

	"github.com/evolm/evolm/model/plan"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/serving/roles"
)

// DefaultPromptTokens is the prompt length the plan assumes.
const DefaultPromptTokens = 1024

// Options adjusts the plan.
type Options struct {
	// PromptTokens is the length of one prompt (DefaultPromptTokens if 0).
	PromptTokens int
	// Capacity is the device memory in bytes to check against; 0 queries
	// the policy's device (free CUDA memory, or MemAvailable on CPU).
	Capacity int64
	// FrozenInferrer counts a frozen copy of the initial policy on its
	// device, the model that infers back-translated questions
	// (stages.run.backtranslate_source frozen_initial).
	FrozenInferrer bool
	// WorldSize is the number of data-parallel learner ranks (evolm plan
	// --nproc); 0 reads torchrun's WORLD_SIZE, else 1. With zero_stage ≥ 1 a
	// rank holds 1/WorldSize of the AdamW state and master weights, and with
	// zero_stage 2 of the gradients too (plus those in flight).
	WorldSize int
}

// ShapeOf resolves a role's model to a shape: its config.json, or a preset
// named by the directory's base name.
func ShapeOf(modelPath string) (plan.Shape, string, error) {
	if modelPath == "" {
		return plan.Shape{}, "", fmt.Errorf("no model set")
	}
	if _, err := os.Stat(filepath.Join(modelPath, "config.json")); err == nil {
		cfg, err := model.ReadConfig(modelPath)
		if err != nil {
			return plan.Shape{}, "", err
		}
		return plan.ShapeOf(cfg), filepath.Join(modelPath, "config.json"), nil
	}
	name := strings.ToLower(filepath.Base(filepath.Clean(modelPath)))
	if _, ok := model.Presets[name]; ok {
		cfg, err := model.PresetConfig("qwen3", name, model.QwenVocabSize)
		if err != nil {
			return plan.Shape{}, "", err
		}
		return plan.ShapeOf(cfg), "preset " + name, nil
	}
	return plan.Shape{}, "", fmt.Errorf("%s: no config.json there, and %q is not a preset (%s)", modelPath, name, strings.Join(model.PresetNames(), ", "))
}

// elemBytes is the parameter element size of a role: its dtype, or float32
// on CPU and bfloat16 on CUDA.
func elemBytes(c roles.Config) (int, error) {
	switch strings.ToLower(c.DType) {
	case "":
		if isCUDA(c.Device) {
			return 2, nil
		}
		return 4, nil
	case "bfloat16", "bf16", "float16", "fp16", "half":
		return 2, nil
	case "float32", "fp32", "float":
		return 4, nil
	}
	return 0, fmt.Errorf("%s.%s = %q: want float32, bfloat16 or float16", roles.Section(c.Role), roles.KeyDType, c.DType)
}

func isCUDA(dev string) bool {
	return strings.HasPrefix(strings.ToLower(strings.TrimSpace(dev)), "cuda")
}

// sameDevice compares devices with cuda = cuda:0.
func sameDevice(a, b string) bool {
	norm := func(d string) string {
		d = strings.ToLower(strings.TrimSpace(d))
		if d == "cuda" {
			return "cuda:0"
		}
		if d == "" {
			return "cpu"
		}
		return d
	}
	return norm(a) == norm(b)
}

// Sources says where each model shape of a plan came from.
type Sources struct {
	Policy, RubricGenerator, Judge string
	Device                         string
}

// Input builds the plan input of `evolm run` from the merged config (any
// view of it: the roles' sections) and the learner the run would build
// (stages/run's Config.Learner).
func Input(cfg *pipeline.Config, lc backend.LearnerConfig, o Options) (plan.Input, Sources, error) {
	var src Sources
	pol, err := roles.Read(cfg, roles.Policy)
	if err != nil {
		return plan.Input{}, src, err
	}
	rub, err := roles.Read(cfg, roles.RubricGenerator)
	if err != nil {
		return plan.Input{}, src, err
	}
	jud, err := roles.Read(cfg, roles.Judge)
	if err != nil {
		return plan.Input{}, src, err
	}
	P := o.PromptTokens
	if P <= 0 {
		P = DefaultPromptTokens
	}
	in := plan.Input{Beta: lc.Beta, MicroBatch: lc.MicroBatch, GradCheckpointing: lc.GradCheckpointing,
		CUDA: isCUDA(pol.Device), GenRows: pol.MaxBatch, ZeROStage: lc.ZeRO, WorldSize: o.WorldSize}
	if in.WorldSize <= 0 {
		if n, err := strconv.Atoi(os.Getenv("WORLD_SIZE")); err == nil && n > 0 {
			in.WorldSize = n
		}
	}
	if lc.LoRA.Rank > 0 {
		in.LoRA = plan.LoRA{Rank: lc.LoRA.Rank, Targets: lc.LoRA.Targets, Dropout: lc.LoRA.Dropout}
	}
	src.Device = pol.Device
	if in.Policy, src.Policy, err = ShapeOf(pol.Model); err != nil {
		return in, src, fmt.Errorf("%s.%s: %w", roles.Section(roles.Policy), roles.KeyModel, err)
	}
	if o.FrozenInferrer {
		sh := in.Policy
		in.Inferrer = &sh
	}
	if in.ParamBytes, err = elemBytes(pol); err != nil {
		return in, src, err
	}
	// Trained sequences: an answer (prompt + policy max_tokens) and a rubric
	// (the generator sees the question alone: prompt + rubric max_tokens).
	// Generated sequences also include question back-translation, whose
	// prompt holds a whole answer: prompt + 2·policy max_tokens.
	// A role's truncate_prompt_tokens caps the prompts it reads.
	policySeq := promptOf(pol, P) + pol.Sampling.MaxTokens
	rubricSeq := promptOf(rub, P) + rub.Sampling.MaxTokens
	inferSeq := promptOf(pol, P+pol.Sampling.MaxTokens) + pol.Sampling.MaxTokens
	in.SeqLen, in.GenTokens = max(policySeq, rubricSeq), max(policySeq, rubricSeq, inferSeq)
	if rub.Shared {
		src.RubricGenerator = "the policy's model (shared)"
	} else if dev, local := roles.Placement(rub); local && sameDevice(dev, pol.Device) {
		sh, from, err := ShapeOf(rub.Model)
		if err != nil {
			return in, src, fmt.Errorf("%s.%s: %w", roles.Section(roles.RubricGenerator), roles.KeyModel, err)
		}
		in.RubricGenerator, src.RubricGenerator = &sh, from
	} else {
		src.RubricGenerator = "on another device"
	}
	judDev, judLocal := roles.Placement(jud)
	if judLocal && sameDevice(judDev, pol.Device) {
		sh, from, err := ShapeOf(jud.Model)
		if err != nil {
			return in, src, fmt.Errorf("%s.%s: %w", roles.Section(roles.Judge), roles.KeyModel, err)
		}
		if in.JudgeBytes, err = elemBytes(jud); err != nil {
			return in, src, err
		}
		in.Judge, src.Judge = &sh, from
		in.JudgeRows = jud.MaxBatch
		// The judge reads the question, an answer and the rubric as the
		// generator wrote it (thinking stripped; each at most its role's
		// budget), and writes up to its own budget.
		in.JudgeTok = promptOf(jud, P+pol.Sampling.MaxTokens+rub.Sampling.MaxTokens) + jud.Sampling.MaxTokens
	} else if judLocal {
		src.Judge = "in process on " + judDev
	} else {
		src.Judge = "served (" + jud.Backend + ")"
	}
	return in, src, nil
}

// promptOf is the most prompt tokens role c reads of a prompt of p
// tokens: p, or its truncate_prompt_tokens when that is smaller.
func promptOf(c roles.Config, p int) int {
	if k := c.Sampling.TruncatePromptTokens; k > 0 {
		return min(p, k)
	}
	return p
}

// ForRun estimates the plan of `evolm run` and checks it against the
// device: o.Capacity, or the free memory of the policy's device. A device
// whose memory cannot be read leaves the plan unchecked (Capacity 0).
func ForRun(cfg *pipeline.Config, lc backend.LearnerConfig, o Options) (plan.Plan, Sources, error) {
	in, src, err := Input(cfg, lc, o)
	if err != nil {
		return plan.Plan{}, src, err
	}
	p := plan.Estimate(in)
	capacity := o.Capacity
	if capacity <= 0 {
		if capacity, err = plan.Available(src.Device); err != nil {
			return p, src, nil
		}
	}
	return p.Check(capacity), src, nil
}

// Refuse is what `evolm run` calls at start, before loading a model: nil
// when the plan fits the policy's device, when the device's memory cannot be
// read, or when a model's shape cannot be read (a checkpoint directory that
// does not exist: loading the model reports that, naming the key);
// otherwise an error that holds the whole plan.
func Refuse(cfg *pipeline.Config, lc backend.LearnerConfig, o Options) error {
	p, _, err := ForRun(cfg, lc, o)
	if err != nil {
		return nil
	}
	if p.Fits() {
		return nil
	}
	var b strings.Builder
	p.Fprint(&b)
	return fmt.Errorf("this configuration does not fit the device (evolm plan estimates %s, %s available); lower stages.run.micro_batch or roles.policy.max_batch, turn on grad_checkpointing or LoRA, or serve the judge:\n%s",
		plan.GiB(p.Total), plan.GiB(p.Capacity), b.String())
}
