#!/usr/bin/env python3
"""HF reference for the torch backend's yes/no Scorer (model/torchbe).

  backend_score_reference.py --model DIR --in REQ --out OUT

REQ: {"requests": [{"prefix": str, "suffixes": [str, ...], "candidates": [str, ...]}]}
For each request and suffix, tokenizes prefix+suffix with the checkpoint's own
tokenizer.json (HF `tokenizers`, no special tokens added), runs one plain
forward pass with HF transformers (fp32, CPU, 1 thread) and returns the
log-softmax at the last position for each candidate's single token id.
OUT: {"logprobs": [[[float per candidate] per suffix] per request],
      "prompt_ids": [[[ids] per suffix] per request]}
A candidate that is not exactly one token is an error.
"""
import argparse
import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM

torch.set_num_threads(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--in", dest="inp", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    tok = Tokenizer.from_file(os.path.join(a.model, "tokenizer.json"))
    model = AutoModelForCausalLM.from_pretrained(a.model, torch_dtype=torch.float32)
    model.eval()
    with open(a.inp) as f:
        req = json.load(f)
    out = {"logprobs": [], "prompt_ids": []}
    for r in req["requests"]:
        cand = []
        for c in r["candidates"]:
            ids = tok.encode(c, add_special_tokens=False).ids
            if len(ids) != 1:
                raise SystemExit(f"candidate {c!r} is {len(ids)} tokens")
            cand.append(ids[0])
        lps, pids = [], []
        for s in r["suffixes"]:
            ids = tok.encode(r["prefix"] + s, add_special_tokens=False).ids
            with torch.no_grad():
                logits = model(torch.tensor([ids])).logits[0, -1].float()
            lsm = torch.log_softmax(logits, dim=-1)
            lps.append([lsm[i].item() for i in cand])
            pids.append(ids)
        out["logprobs"].append(lps)
        out["prompt_ids"].append(pids)
    with open(a.out, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
