#!/usr/bin/env python3
"""HF PEFT reference for evolm's LoRA (model/lora, README.md, "LoRA").

Needs peft==0.15.2 with accelerate==1.15.0 pinned beside torch 2.1.0 and
transformers 4.51.3 (scripts/requirements.txt). Everything runs on CPU, one
thread, fp32, eager attention, with the adapters' dropout off (eval mode).

Subcommands:

  golden OUT
      For each tiny base model (a Qwen3 with tied embeddings and a Llama with
      untied embeddings and attention bias) writes OUT/<name>/base (the HF
      checkpoint), OUT/<name>/adapter (a PEFT adapter saved by
      save_pretrained: r=4, lora_alpha=8, dropout 0.05, every default target;
      lora_A and lora_B perturbed away from PEFT's zero-B init so that the
      adapters change the output) and OUT/<name>/ref.safetensors:

        case{i}.ids/mask/pos  (B, T) int64, as in hf_make_checkpoints.py
        case{i}.logits        (B, T, V) PEFT model logits
        case{i}.merged        (B, T, V) logits of merge_and_unload()
        case{i}.base          (B, T, V) logits with disable_adapter()
        grad.<peft name>      d loss / d lora weight, with
                              loss = -Σ_rows Σ_real pairs log p(next token)
                              over every case (the loss of model/llama's
                              gradient test)

      Prints the JSON list of names.

  check JOBS
      JOBS is a JSON file [{"base": DIR, "adapter": DIR, "ref": FILE}, ...].
      For each job, loads the adapter that evolm saved with
      PeftModel.from_pretrained on the base checkpoint, runs the cases of
      FILE (case{i}.ids/mask/pos and case{i}.logits, evolm's) and prints a
      JSON list with one {"max_diff": float, "cases": n, "r": r,
      "lora_alpha": a, "lora_dropout": p, "target_modules": [...],
      "trainable": n} per job.

  merged --base DIR --adapter DIR --model DIR
      Loads the merged checkpoint that `evolm model merge` wrote (--model)
      with plain transformers, and PEFT's own merge_and_unload() of the
      adapter on the base, runs both on the golden inputs and prints
      {"max_diff": float, "cases": n, "lora_delta": float}: the largest
      logit difference between the two, and how far the merge moved the
      logits from the base (so a merge that did nothing cannot pass).
"""
import argparse
import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch
from safetensors.torch import load_file, save_file

import _common

torch.set_num_threads(1)
VOCAB = 256
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def specs():
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    return [
        ("qwen3", Qwen3Config, Qwen3ForCausalLM,
         dict(hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, tie_word_embeddings=True, rope_theta=1e6)),
        ("llama", LlamaConfig, LlamaForCausalLM,
         dict(hidden_size=64, intermediate_size=112, num_hidden_layers=2, num_attention_heads=8,
              num_key_value_heads=2, tie_word_embeddings=False, attention_bias=True, rope_theta=10000.0)),
    ]


def inputs():
    return _common.inputs(4321, VOCAB)


def next_token_loss(logits, ids, mask):
    """-Σ log p(ids[t+1] | ≤t) over pairs whose query and target are real."""
    lp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    tgt = ids[:, 1:].unsqueeze(-1)
    w = (mask[:, :-1] * mask[:, 1:]).float()
    return -(lp.gather(-1, tgt).squeeze(-1) * w).sum()


def peft_state_name(n):
    """named_parameters name -> adapter_model.safetensors key (no adapter name)."""
    return n.replace(".lora_A.default.", ".lora_A.").replace(".lora_B.default.", ".lora_B.")


def cmd_golden(a):
    from peft import LoraConfig, get_peft_model

    names = []
    for i, (name, cfg_cls, model_cls, kw) in enumerate(specs()):
        torch.manual_seed(10 + i)
        cfg = cfg_cls(vocab_size=VOCAB, max_position_embeddings=512, attn_implementation="eager", **kw)
        base = model_cls(cfg).eval()
        _common.perturb(base, torch.Generator().manual_seed(200 + i), 0.15)
        d = os.path.join(a.out, name)
        base.save_pretrained(os.path.join(d, "base"), safe_serialization=True)
        lc = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.05, target_modules=TARGETS, task_type="CAUSAL_LM")
        pm = get_peft_model(base, lc).eval()
        g = torch.Generator().manual_seed(300 + i)
        with torch.no_grad():
            for n, p in pm.named_parameters():
                if ".lora_" in n:
                    p.copy_(0.1 * torch.randn(p.shape, generator=g))
        pm.save_pretrained(os.path.join(d, "adapter"))
        tensors = {}
        for c, (ids, mask, pos) in enumerate(inputs()):
            logits = pm(input_ids=ids, attention_mask=mask, position_ids=pos).logits.float()
            next_token_loss(logits, ids, mask).backward()
            with torch.no_grad(), pm.disable_adapter():
                base_logits = pm(input_ids=ids, attention_mask=mask, position_ids=pos).logits.float()
            tensors[f"case{c}.ids"] = ids.contiguous()
            tensors[f"case{c}.mask"] = mask.contiguous()
            tensors[f"case{c}.pos"] = pos.contiguous()
            tensors[f"case{c}.logits"] = logits.detach().contiguous()
            tensors[f"case{c}.base"] = base_logits.contiguous()
        for n, p in pm.named_parameters():
            if p.requires_grad:
                tensors["grad." + peft_state_name(n)] = p.grad.detach().contiguous()
        merged = pm.merge_and_unload().eval()
        with torch.no_grad():
            for c, (ids, mask, pos) in enumerate(inputs()):
                tensors[f"case{c}.merged"] = merged(input_ids=ids, attention_mask=mask, position_ids=pos).logits.float().contiguous()
        save_file(tensors, os.path.join(d, "ref.safetensors"))
        names.append(name)
    print(json.dumps(names))


def cases_of(ref):
    c = 0
    while f"case{c}.ids" in ref:
        yield c, ref[f"case{c}.ids"], ref[f"case{c}.mask"], ref[f"case{c}.pos"]
        c += 1


def max_diff(got, want, mask):
    m = mask.bool().unsqueeze(-1).expand_as(got)
    return (got - want).abs()[m].max().item()


def cmd_check(a):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    out = []
    for job in json.load(open(a.jobs)):
        base = AutoModelForCausalLM.from_pretrained(job["base"], torch_dtype=torch.float32, attn_implementation="eager")
        pm = PeftModel.from_pretrained(base, job["adapter"]).eval()
        ref = load_file(job["ref"])
        worst, n = 0.0, 0
        with torch.no_grad():
            for c, ids, mask, pos in cases_of(ref):
                logits = pm(input_ids=ids, attention_mask=mask, position_ids=pos).logits.float()
                worst = max(worst, max_diff(logits, ref[f"case{c}.logits"], mask))
                n += 1
        lc = pm.peft_config["default"]
        trainable = sum(p.numel() for n_, p in pm.named_parameters() if ".lora_" in n_)
        out.append({"max_diff": worst, "cases": n, "r": lc.r, "lora_alpha": lc.lora_alpha,
                    "lora_dropout": lc.lora_dropout, "target_modules": sorted(lc.target_modules),
                    "trainable": trainable})
    print(json.dumps(out))


def cmd_merged(a):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    def load(d):
        return AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float32, attn_implementation="eager").eval()

    ours = load(a.model)
    base = load(a.base)
    with torch.no_grad():
        base_logits = [base(input_ids=ids, attention_mask=mask, position_ids=pos).logits.float() for ids, mask, pos in inputs()]
    peft = PeftModel.from_pretrained(base, a.adapter).merge_and_unload().eval()
    worst, delta, n = 0.0, 0.0, 0
    with torch.no_grad():
        for (ids, mask, pos), b in zip(inputs(), base_logits):
            got = ours(input_ids=ids, attention_mask=mask, position_ids=pos).logits.float()
            want = peft(input_ids=ids, attention_mask=mask, position_ids=pos).logits.float()
            worst = max(worst, max_diff(got, want, mask))
            delta = max(delta, max_diff(want, b, mask))
            n += 1
    print(json.dumps({"max_diff": worst, "cases": n, "lora_delta": delta}))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("golden")
    g.add_argument("out")
    c = sub.add_parser("check")
    c.add_argument("jobs")
    m = sub.add_parser("merged")
    m.add_argument("--base", required=True)
    m.add_argument("--adapter", required=True)
    m.add_argument("--model", required=True)
    a = ap.parse_args()
    {"golden": cmd_golden, "check": cmd_check, "merged": cmd_merged}[a.cmd](a)


if __name__ == "__main__":
    main()
