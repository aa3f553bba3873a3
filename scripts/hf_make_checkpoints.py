"""Golden references for evolm's HF parity tests (model/llama, model).

Usage: hf_make_checkpoints.py OUTDIR

Creates small random Qwen3, Llama and Qwen2 checkpoints with transformers
(several head layouts: GQA and MHA, tied and untied embeddings, q/k norm,
biases, an explicit head_dim, a sharded save and a bf16 save), runs fixed
inputs through each in float32 with eager attention and writes, per
checkpoint, OUTDIR/<name>/ (the HF checkpoint) and OUTDIR/<name>/ref.safetensors:

  case{i}.ids     (B, T) int64
  case{i}.mask    (B, T) int64  1 = token, 0 = left padding
  case{i}.pos     (B, T) int64  position ids, cumsum(mask) - 1 (HF generate)
  case{i}.logits  (B, T, V) float32

and the same four tensors as long.* for one longer left-padded (2, 300)
batch, longer than evolm's eager attention block (model/llama AttnBlock),

and OUTDIR/<name>/params.json, the names of model.named_parameters() in order.

Prints a JSON list of the checkpoint names.
"""
import json
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import (LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config,
                          Qwen3ForCausalLM)

import _common

torch.set_num_threads(1)
VOCAB = 256

SPECS = [
    # name, config class, model class, config kwargs, save kwargs
    ("qwen3_gqa_tied", Qwen3Config, Qwen3ForCausalLM,
     dict(hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
          num_key_value_heads=2, head_dim=16, tie_word_embeddings=True, rope_theta=1e6), {}),
    ("qwen3_mha_untied_bias", Qwen3Config, Qwen3ForCausalLM,
     dict(hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
          num_key_value_heads=4, head_dim=8, tie_word_embeddings=False, attention_bias=True, rope_theta=1e6), {}),
    ("qwen3_sharded_bf16", Qwen3Config, Qwen3ForCausalLM,
     dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=8,
          num_key_value_heads=2, head_dim=16, tie_word_embeddings=True, rope_theta=1e6),
     dict(max_shard_size="40KB", dtype=torch.bfloat16)),
    ("llama_gqa_untied", LlamaConfig, LlamaForCausalLM,
     dict(hidden_size=64, intermediate_size=112, num_hidden_layers=2, num_attention_heads=8,
          num_key_value_heads=2, tie_word_embeddings=False, rope_theta=10000.0), {}),
    ("llama_mha_tied_bias", LlamaConfig, LlamaForCausalLM,
     dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
          num_key_value_heads=2, tie_word_embeddings=True, attention_bias=True, rope_theta=500000.0), {}),
    ("qwen2_gqa_untied", Qwen2Config, Qwen2ForCausalLM,
     dict(hidden_size=48, intermediate_size=80, num_hidden_layers=2, num_attention_heads=6,
          num_key_value_heads=2, tie_word_embeddings=False, rope_theta=1e6), {}),
    ("qwen2_mha_tied_f16", Qwen2Config, Qwen2ForCausalLM,
     dict(hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=4,
          num_key_value_heads=4, tie_word_embeddings=True, rope_theta=1e6),
     dict(dtype=torch.float16)),
]


def inputs():
    return _common.inputs(1234, VOCAB)


def long_input():
    """A (2, 300) batch whose second row has 37 tokens of left padding."""
    g = torch.Generator().manual_seed(4321)
    ids = torch.randint(0, VOCAB, (2, 300), generator=g)
    mask = torch.ones_like(ids)
    mask[1, :37] = 0
    ids = ids.masked_fill(mask == 0, 0)
    pos = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
    return ids, mask, pos


def main():
    out = sys.argv[1]
    names = []
    for i, (name, cfg_cls, model_cls, kw, save_kw) in enumerate(SPECS):
        torch.manual_seed(i)
        cfg = cfg_cls(vocab_size=VOCAB, max_position_embeddings=512, attn_implementation="eager", **kw)
        model = model_cls(cfg).eval()
        _common.perturb(model, torch.Generator().manual_seed(100 + i), 0.15)
        d = os.path.join(out, name)
        dtype = save_kw.get("dtype")
        model.save_pretrained(d, max_shard_size=save_kw.get("max_shard_size", "5GB"), safe_serialization=True,
                              state_dict={k: v.to(dtype or v.dtype) for k, v in model.state_dict().items()})
        if dtype is not None:
            # The reference runs in float32 on the rounded weights the file
            # holds. A fresh model keeps inv_freq exact (model.to(dtype) would
            # round that buffer too, which no loader of the file would do).
            cfg.torch_dtype = dtype
            cfg.save_pretrained(d)
            rounded = {k: v.to(dtype).float() for k, v in model.state_dict().items()}
            model = model_cls(cfg).eval().float()
            model.load_state_dict(rounded)
        tensors = {}
        with torch.no_grad():
            cases = [(f"case{c}", x) for c, x in enumerate(inputs())] + [("long", long_input())]
            for key, (ids, mask, pos) in cases:
                logits = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits.float()
                tensors[f"{key}.ids"] = ids.contiguous()
                tensors[f"{key}.mask"] = mask.contiguous()
                tensors[f"{key}.pos"] = pos.contiguous()
                tensors[f"{key}.logits"] = logits.contiguous()
        save_file(tensors, os.path.join(d, "ref.safetensors"))
        with open(os.path.join(d, "params.json"), "w") as f:
            json.dump([n for n, _ in model.named_parameters()], f)
        names.append(name)
    print(json.dumps(names))


if __name__ == "__main__":
    main()
