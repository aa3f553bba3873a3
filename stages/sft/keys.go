package sft

import (
	"time"

	"github.com/evolm/evolm/pipeline/track"
)

// Keys are stages.sft's keys, each declared once: its name, default, bounds
// and help are the field's tags (pipeline.FieldsOf), and FromConfig reads
// them with pipeline.Bind. The defaults are TRL SFTConfig's where TRL has
// the key.
type Keys struct {
	// Data.
	Input     []string `key:"input" required:"true" example:"data/sft.parquet" help:"training examples, Parquet or JSONL files or globs: a messages column (a chat, list of {role, content}; loss on the assistant turns) or prompt and completion columns (plain text; loss on the completion and the EOS after it)"`
	Role      string   `key:"role" default:"policy" enum:"policy,judge" help:"the role whose model (roles.<role>.model, on its device) is fine-tuned"`
	Output    string   `key:"output" help:"directory of the fine-tuned model (an HF checkpoint; with LoRA the PEFT adapter); empty: <run>/model"`
	MaxLength int      `key:"max_length" default:"1024" min:"2" max:"4194304" help:"truncate each tokenized example to this many tokens (from the right, TRL's max_length); with packing also the packed row length"`
	Packing   bool     `key:"packing" default:"false" help:"pack the examples of a step into rows of max_length tokens (first-fit decreasing; each example attends to itself only, positions restart) instead of padding each micro-batch"`
	Shuffle   bool     `key:"shuffle" default:"true" help:"visit the examples in a seeded order, reshuffled every epoch; false: file order"`
	Seed      int64    `key:"seed" default:"42" help:"seed of the data order and of the LoRA adapter's initial weights (TRL's seed)"`

	// Schedule.
	Epochs    int `key:"epochs" default:"1" min:"1" max:"100000" help:"passes over the data (when steps is 0)"`
	Steps     int `key:"steps" default:"0" min:"0" max:"1e9" volatile:"true" help:"optimizer steps; 0: epochs × ⌈examples / batch_size⌉; raising it continues a run (under a linear or cosine schedule the rates after the checkpoint follow the new total)"`
	BatchSize int `key:"batch_size" default:"8" min:"1" max:"1048576" help:"examples per optimizer step (the global batch: TRL's per_device_train_batch_size × gradient_accumulation_steps × ranks)"`
	// Learner.
	MicroBatch        int      `key:"micro_batch" default:"8" min:"1" max:"65536" help:"rows (examples, or packed rows) per forward/backward pass; gradients accumulate over the step"`
	LR                float64  `key:"lr" default:"2e-5" gt:"0" help:"AdamW peak learning rate"`
	Scheduler         string   `key:"lr_scheduler" default:"linear" enum:"linear,constant,cosine" help:"learning-rate schedule after warm-up: linear decay to 0 (TRL's default), constant, or cosine to 0"`
	WarmupSteps       int      `key:"warmup_steps" default:"0" min:"0" help:"linear warm-up from 0 over this many steps"`
	WeightDecay       float64  `key:"weight_decay" default:"0" min:"0" help:"AdamW weight decay on ≥2-dim tensors"`
	MaxGradNorm       float64  `key:"max_grad_norm" default:"1" help:"clip the global gradient norm to this (≤ 0: no clipping)"`
	LoRARank          int      `key:"lora_rank" default:"0" min:"0" max:"4096" help:"LoRA rank r of the adapter; 0: full fine-tuning"`
	LoRAAlpha         float64  `key:"lora_alpha" default:"16" gt:"0" help:"LoRA alpha (the adapter's term is scaled by alpha/r)"`
	LoRADropout       float64  `key:"lora_dropout" default:"0" min:"0" lt:"1" help:"LoRA dropout on the adapter's input while training"`
	LoRATargets       []string `key:"lora_targets" default:"q,k,v,o,gate,up,down" help:"LoRA target modules (q, k, v, o, gate, up, down or their *_proj names)"`
	GradCheckpointing bool     `key:"grad_checkpointing" default:"false" help:"recompute each decoder layer in backward instead of keeping its activations"`

	// Checkpoints.
	CheckpointEvery   int `key:"checkpoint_every" default:"500" min:"1" help:"write a checkpoint every this many steps (and after the last); a rerun resumes from the newest"`
	MaxSkippedUpdates int `key:"max_skipped_updates" default:"3" min:"1" max:"1000" help:"stop after this many updates in a row skipped for a NaN or Inf loss or gradient norm"`

	// Data parallelism.
	ZeRO        int           `key:"zero_stage" default:"0" min:"0" max:"2" help:"data parallelism (evolm sft --nproc N, or torchrun): 0 replicates the AdamW state on every rank, 1 shards it (and fp32 master weights) across ranks by whole tensors, 2 also shards the gradients (each reduced to its owning rank during backward and freed elsewhere)"`
	DistTimeout time.Duration `key:"dist_timeout" default:"10m" gt:"0" volatile:"true" help:"data parallelism: timeout of the rendezvous and of every collective; a rank that died or stalled makes the others stop within it"`

	// Trackers (package pipeline/track): the keys every stage that reports
	// to trackers declares.
	track.Keys
}
