#!/usr/bin/env python3
"""Reference logit processors for model/sample and model/generate: transformers'
own processors, and vLLM's formulas where transformers has none.

Subcommands (JSON on stdin, JSON on stdout, torch on CPU, fp32):

  process  {"logits": [[...], ...], "rows": [{"prompt": [...], "output": [...],
            "repetition_penalty": r, "frequency_penalty": f, "presence_penalty": p,
            "logit_bias": {"id": v}, "min_tokens": k, "stop": [...],
            "temperature": t, "min_p": m}, ...]}
           Row i's logits go through, in order: transformers'
           SequenceBiasLogitsProcessor (logit_bias as one-token sequences),
           RepetitionPenaltyLogitsProcessor over prompt+output, the
           frequency and presence penalties as vLLM computes them
           (logits -= f * count_in_output + p * (count_in_output > 0)), and
           transformers' MinNewTokensLengthLogitsProcessor (min_tokens,
           stop ids); then TemperatureLogitsWarper and MinPLogitsWarper, and
           a softmax.
           Out: {"logits": [[...]], "probs": [[...]]} (-inf as null).
  greedy   {"model": DIR, "prompts": [[...]], "max_new_tokens": n,
            "repetition_penalty": r, "logit_bias": {"id": v},
            "min_new_tokens": k, "eos": [ids], "bad_words": [[id], ...]}
           transformers' generate(do_sample=False) with those processors,
           each prompt alone. Out: {"sequences": [[new ids...]]}, each cut
           after its first eos.
"""
import json
import math
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch

torch.set_num_threads(1)


def process(req):
    from transformers.generation.logits_process import (
        MinNewTokensLengthLogitsProcessor,
        MinPLogitsWarper,
        RepetitionPenaltyLogitsProcessor,
        SequenceBiasLogitsProcessor,
        TemperatureLogitsWarper,
    )

    out_logits, out_probs = [], []
    for row, logits in zip(req["rows"], req["logits"]):
        x = torch.tensor([logits], dtype=torch.float32)
        prompt, output = row["prompt"], row["output"]
        ids = torch.tensor([prompt + output], dtype=torch.long)
        bias = {(int(k),): float(v) for k, v in (row.get("logit_bias") or {}).items()}
        if bias:
            x = SequenceBiasLogitsProcessor(sequence_bias=bias)(ids, x)
        r = row.get("repetition_penalty") or 1.0
        if r != 1.0:
            x = RepetitionPenaltyLogitsProcessor(penalty=r)(ids, x)
        f, p = row.get("frequency_penalty") or 0.0, row.get("presence_penalty") or 0.0
        if output and (f or p):
            counts = torch.bincount(torch.tensor(output), minlength=x.shape[1]).to(torch.float32)
            x = x - (f * counts + p * (counts > 0).to(torch.float32)).unsqueeze(0)
        k = row.get("min_tokens") or 0
        if k > 0 and row.get("stop"):
            x = MinNewTokensLengthLogitsProcessor(len(prompt), k, torch.tensor(row["stop"]))(ids, x)
        out_logits.append([None if math.isinf(v) else v for v in x[0].tolist()])
        t = row.get("temperature", 1.0)
        y = TemperatureLogitsWarper(t)(ids, x) if t != 1.0 else x
        m = row.get("min_p") or 0.0
        if m > 0:
            y = MinPLogitsWarper(min_p=m)(ids, y)
        out_probs.append(torch.softmax(y, dim=-1)[0].tolist())
    return {"logits": out_logits, "probs": out_probs}


def greedy(req):
    from transformers import AutoModelForCausalLM, GenerationConfig

    model = AutoModelForCausalLM.from_pretrained(req["model"], torch_dtype=torch.float32, attn_implementation="eager")
    model.eval()
    model.generation_config.eos_token_id = None
    model.generation_config.bos_token_id = None
    kw = dict(do_sample=False, max_new_tokens=req["max_new_tokens"], pad_token_id=0, bos_token_id=None)
    kw["eos_token_id"] = req.get("eos") or None
    if req.get("repetition_penalty"):
        kw["repetition_penalty"] = req["repetition_penalty"]
    if req.get("logit_bias"):
        kw["sequence_bias"] = {(int(k),): float(v) for k, v in req["logit_bias"].items()}
    if req.get("min_new_tokens"):
        kw["min_new_tokens"] = req["min_new_tokens"]
    if req.get("bad_words"):
        kw["bad_words_ids"] = req["bad_words"]
    gc = GenerationConfig(**kw)
    seqs = []
    with torch.no_grad():
        for p in req["prompts"]:
            out = model.generate(input_ids=torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long), generation_config=gc)
            new = out[0, len(p):].tolist()
            eos = req.get("eos") or []
            for i, t in enumerate(new):
                if t in eos:
                    new = new[: i + 1]
                    break
            seqs.append(new)
    return {"sequences": seqs}


def main():
    cmd = sys.argv[1]
    req = json.load(sys.stdin)
    res = {"process": process, "greedy": greedy}[cmd](req)
    json.dump(res, sys.stdout)


if __name__ == "__main__":
    main()
