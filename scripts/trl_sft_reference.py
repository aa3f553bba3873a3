"""TRL SFTTrainer as the reference of evolm's SFT loss (stages/sft, model/learner).

Usage: trl_sft_reference.py CONFIG.json OUT_DIR

CONFIG holds: model (an HF checkpoint directory), examples (a list of
{"messages": [...]} or {"prompt": str, "completion": str}), batch_size
(per_device_train_batch_size), grad_accum, steps, lr, weight_decay,
max_grad_norm (0: no clipping) and seed.

It trains with TRL 0.19.1's SFTTrainer in float32 (bf16=False), a constant
learning rate without warm-up, no packing, and the examples in file order
(a SequentialSampler instead of TRL's shuffled one, so that evolm can feed
the same micro-batches). Conversations get assistant_only_loss with a
chat template that renders exactly what evolm's Qwen3 ChatML renderer
(model/chat, no tools) renders, its assistant turns after the
"<|im_start|>assistant\\n" header wrapped in {% generation %}; prompt-
completion examples get TRL's completion-only loss.

OUT_DIR receives:
  tokens.json        per example: input_ids and labels (-100 outside the loss) as TRL built them
  losses.json        per optimizer step: the loss TRL backpropagated (the sum over the step's
                     micro-batches of Σ CE / num_items_in_batch), and num_items_in_batch
  grads.safetensors  the gradient of every parameter at step 1, before the optimizer step
  final.safetensors  the weights after the last step
"""

import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from torch.utils.data import SequentialSampler  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback  # noqa: E402
from trl import SFTConfig, SFTTrainer  # noqa: E402

# Qwen3's ChatML without tools, as model/chat renders it, with the assistant
# turns' bodies (after the header, through <|im_end|>) in {% generation %}.
CHAT_TEMPLATE = r"""
{%- set ns = namespace(last_query=messages|length - 1) -%}
{%- for m in messages[::-1] -%}
  {%- set i = messages|length - 1 - loop.index0 -%}
  {%- if ns.last_query == messages|length - 1 and m.role == 'user' and not (m.content.startswith('<tool_response>') and m.content.endswith('</tool_response>')) -%}
    {%- set ns.last_query = i -%}
  {%- endif -%}
{%- endfor -%}
{%- for m in messages -%}
  {%- if m.role == 'user' or m.role == 'system' -%}
{{- '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' -}}
  {%- elif m.role == 'assistant' -%}
    {%- set content = m.content -%}
    {%- set reasoning = '' -%}
    {%- if '</think>' in content -%}
      {%- set reasoning = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') -%}
      {%- set content = content.split('</think>')[-1].lstrip('\n') -%}
    {%- endif -%}
{{- '<|im_start|>assistant\n' -}}
{%- generation -%}
    {%- if loop.index0 > ns.last_query and (loop.last or reasoning) -%}
{{- '<think>\n' + reasoning.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') -}}
    {%- else -%}
{{- content -}}
    {%- endif -%}
{{- '<|im_end|>' -}}
{%- endgeneration -%}
{{- '\n' -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|im_start|>assistant\n' -}}
{%- endif -%}
"""


class InOrder(SFTTrainer):
    """SFTTrainer that records each micro-batch's loss and reads the data in order."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.micro_losses = []  # (loss, num_items_in_batch) per micro-batch

    def _get_train_sampler(self, *args, **kwargs):
        return SequentialSampler(self.train_dataset)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        out = super().compute_loss(model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch)
        loss = out[0] if return_outputs else out
        n = int(num_items_in_batch) if num_items_in_batch is not None else None
        self.micro_losses.append((float(loss.detach()), n))
        return out


class GradDump(TrainerCallback):
    def __init__(self, model, path):
        self.model, self.path, self.done = model, path, False

    def on_pre_optimizer_step(self, args, state, control, **kw):
        if self.done:
            return
        grads = {n: p.grad.detach().clone().contiguous() for n, p in self.model.named_parameters() if p.grad is not None}
        save_file(grads, self.path)
        self.done = True


def main():
    cfg_path, out = sys.argv[1], sys.argv[2]
    cfg = json.load(open(cfg_path))
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(cfg.get("seed", 0))
    tok = AutoTokenizer.from_pretrained(cfg["model"])
    tok.chat_template = CHAT_TEMPLATE
    model = AutoModelForCausalLM.from_pretrained(cfg["model"], torch_dtype=torch.float32, attn_implementation="eager")
    conversational = "messages" in cfg["examples"][0]
    ds = Dataset.from_list(cfg["examples"])
    args = SFTConfig(
        output_dir=os.path.join(out, "trainer"),
        per_device_train_batch_size=cfg["batch_size"],
        gradient_accumulation_steps=cfg["grad_accum"],
        max_steps=cfg["steps"],
        learning_rate=cfg["lr"],
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=cfg.get("weight_decay", 0.0),
        max_grad_norm=cfg.get("max_grad_norm", 0.0),
        adam_beta1=0.9,
        adam_beta2=0.999,
        adam_epsilon=1e-8,
        optim="adamw_torch",
        bf16=False,
        fp16=False,
        assistant_only_loss=conversational,
        packing=False,
        max_length=cfg.get("max_length", 1024),
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        seed=cfg.get("seed", 0),
        data_seed=cfg.get("seed", 0),
        dataloader_num_workers=0,
        use_cpu=True,
        disable_tqdm=True,
    )
    trainer = InOrder(model=model, args=args, train_dataset=ds, processing_class=tok)
    trainer.add_callback(GradDump(model, os.path.join(out, "grads.safetensors")))

    tokens = []
    for row in trainer.train_dataset:
        ids = list(row["input_ids"])
        mask = row.get("assistant_masks") if conversational else row.get("completion_mask")
        labels = [i if m else -100 for i, m in zip(ids, mask)]
        tokens.append({"input_ids": ids, "labels": labels})
    json.dump(tokens, open(os.path.join(out, "tokens.json"), "w"))

    trainer.train()
    ga = cfg["grad_accum"]
    steps = []
    for s in range(cfg["steps"]):
        micro = trainer.micro_losses[s * ga : (s + 1) * ga]
        steps.append({"loss": sum(m[0] for m in micro), "num_items_in_batch": micro[0][1]})
    json.dump(steps, open(os.path.join(out, "losses.json"), "w"))
    state = {n: p.detach().clone().contiguous() for n, p in model.named_parameters()}
    save_file(state, os.path.join(out, "final.safetensors"))


if __name__ == "__main__":
    main()
