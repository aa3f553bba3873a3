#!/usr/bin/env python3
"""HF transformers reference for model/generate (README.md, "Correctness, against references nobody here wrote").

Subcommands (all JSON in/out, torch on CPU with 1 thread, fp32):

  make     --arch qwen3|llama --out DIR [--seed S] [--tied 0|1]
           Writes a tiny random HF checkpoint (config.json, model.safetensors,
           generation_config.json) created by transformers itself.
  greedy   --model DIR --in REQ --out OUT
           REQ: {"prompts": [[ids...], ...], "max_new_tokens": 32}
           Left-pads the batch (pad id 0, attention mask 0) and runs
           model.generate(do_sample=False) with no EOS, so every row yields
           exactly max_new_tokens ids. OUT: {"sequences": [[new ids...], ...]}
  logprobs --model DIR --in REQ --out OUT
           REQ: {"rows": [{"prompt": [...], "completion": [...]}, ...]}
           Runs each row alone (no padding) and returns the log-softmax of the
           raw fp32 logits at each completion token and the entropy of that
           distribution. OUT: {"logprobs": [[...]], "entropy": [[...]]}
"""
import argparse
import json
import os
import sys

# Never reach for the network (a stuck DNS lookup would hang a test).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch

torch.set_num_threads(1)


def tiny_config(arch, tied):
    from transformers import LlamaConfig, Qwen3Config

    common = dict(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=112,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        rms_norm_eps=1e-6,
        tie_word_embeddings=tied,
        # A wider init than HF's 0.02 makes the tiny models' next-token
        # distributions peaked, so greedy parity is not decided by near-ties.
        initializer_range=0.15,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        torch_dtype="float32",
    )
    if arch == "qwen3":
        return Qwen3Config(head_dim=16, rope_theta=1e6, **common)
    if arch == "llama":
        return LlamaConfig(head_dim=16, rope_theta=10000.0, **common)
    raise SystemExit(f"hf_generate make: unknown arch {arch!r}")


def cmd_make(a):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(a.seed)
    cfg = tiny_config(a.arch, bool(a.tied))
    model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.float32)
    # Norm weights start at 1; perturb them so a wrong norm shows up in parity.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.add_(0.1 * torch.randn_like(p))
    model.save_pretrained(a.out, safe_serialization=True)


def load(model_dir):
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32, attn_implementation="eager")
    m.eval()
    return m


def cmd_greedy(a):
    from transformers import GenerationConfig

    req = json.load(open(a.inp))
    prompts = req["prompts"]
    T = max(len(p) for p in prompts)
    ids = torch.zeros(len(prompts), T, dtype=torch.long)
    mask = torch.zeros(len(prompts), T, dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, T - len(p):] = torch.tensor(p)
        mask[i, T - len(p):] = 1
    model = load(a.model)
    # Otherwise generate() copies the checkpoint's eos/bos back into gc.
    model.generation_config.eos_token_id = None
    model.generation_config.bos_token_id = None
    gc = GenerationConfig(
        do_sample=False,
        max_new_tokens=req["max_new_tokens"],
        eos_token_id=None,
        pad_token_id=0,
        bos_token_id=None,
    )
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, generation_config=gc)
    json.dump({"sequences": out[:, T:].tolist()}, open(a.out, "w"))


def cmd_logprobs(a):
    req = json.load(open(a.inp))
    model = load(a.model)
    lps, ents = [], []
    with torch.no_grad():
        for row in req["rows"]:
            p, c = row["prompt"], row["completion"]
            ids = torch.tensor([p + c])
            logits = model(input_ids=ids).logits[0].float()  # (T, V)
            lsm = torch.log_softmax(logits[len(p) - 1 : len(p) + len(c) - 1], dim=-1)  # (Tc, V)
            lp = lsm.gather(-1, torch.tensor(c).unsqueeze(-1)).squeeze(-1)
            ent = -(lsm.exp() * lsm).sum(-1)
            lps.append(lp.tolist())
            ents.append(ent.tolist())
    json.dump({"logprobs": lps, "entropy": ents}, open(a.out, "w"))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("--arch", required=True)
    m.add_argument("--out", required=True)
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--tied", type=int, default=1)
    for name in ("greedy", "logprobs"):
        s = sub.add_parser(name)
        s.add_argument("--model", required=True)
        s.add_argument("--in", dest="inp", required=True)
        s.add_argument("--out", required=True)
    a = ap.parse_args()
    {"make": cmd_make, "greedy": cmd_greedy, "logprobs": cmd_logprobs}[a.cmd](a)


if __name__ == "__main__":
    main()
