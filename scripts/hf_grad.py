#!/usr/bin/env python3
"""torch reference for model/generate gradients and model/optim (README.md, "Correctness, against references nobody here wrote").

Subcommands (torch on CPU, 1 thread, fp32):

  grad   --model DIR --in REQ --out DIR
         REQ: {"rows": [{"prompt": [...], "completion": [...]}, ...]}
         loss = -mean over rows of (mean over the row's completion tokens of
         log p(token)), each row run alone without padding. Writes
         OUT/grads.safetensors (one tensor per HF parameter name, as
         model.named_parameters() lists them: a tied lm_head appears only as
         model.embed_tokens.weight) and OUT/loss.json {"loss": float}.
  adamw  --model DIR --grads FILE --in HP --out DIR
         HP: {"lr", "beta1", "beta2", "eps", "weight_decay", "max_norm",
              "scales": [c1, c2, ...]}
         Runs len(scales) steps of clip_grad_norm_(max_norm) + torch.optim.AdamW
         on the checkpoint's parameters, with grad_s = c_s * FILE[name] and two
         parameter groups: weight_decay on tensors with >= 2 dims, 0 otherwise.
         Writes OUT/adamw.safetensors with "p<s>.<name>" (parameters after
         step s, s from 1), "exp_avg.<name>", "exp_avg_sq.<name>" (final
         state) and OUT/adamw.json {"norms": [pre-clip norm per step]}.
"""
import argparse
import json
import os

# Never reach for the network (a stuck DNS lookup would hang a test).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch
from safetensors.torch import load_file, save_file

torch.set_num_threads(1)


def load(model_dir):
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32, attn_implementation="eager")
    m.eval()  # no dropout; grads still flow
    return m


def cmd_grad(a):
    req = json.load(open(a.inp))
    model = load(a.model)
    rows = req["rows"]
    total = 0.0
    for row in rows:
        p, c = row["prompt"], row["completion"]
        ids = torch.tensor([p + c])
        logits = model(input_ids=ids).logits[0].float()  # (T, V)
        lsm = torch.log_softmax(logits[len(p) - 1 : len(p) + len(c) - 1], dim=-1)
        lp = lsm.gather(-1, torch.tensor(c).unsqueeze(-1)).squeeze(-1)  # (Tc,)
        loss = -lp.mean() / len(rows)
        loss.backward()
        total += loss.item()
    os.makedirs(a.out, exist_ok=True)
    grads = {n: p.grad.detach().contiguous() for n, p in model.named_parameters()}
    save_file(grads, os.path.join(a.out, "grads.safetensors"))
    json.dump({"loss": total}, open(os.path.join(a.out, "loss.json"), "w"))


def cmd_adamw(a):
    hp = json.load(open(a.inp))
    model = load(a.model)
    g = load_file(a.grads)
    named = list(model.named_parameters())
    decay = [p for n, p in named if p.dim() >= 2]
    no_decay = [p for n, p in named if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": hp["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
        lr=hp["lr"],
        betas=(hp["beta1"], hp["beta2"]),
        eps=hp["eps"],
        foreach=False,
    )
    out, norms = {}, []
    for s, c in enumerate(hp["scales"], start=1):
        for n, p in named:
            p.grad = (g[n] * c).clone()
        norms.append(torch.nn.utils.clip_grad_norm_([p for _, p in named], hp["max_norm"]).item())
        opt.step()
        for n, p in named:
            out[f"p{s}.{n}"] = p.detach().clone().contiguous()
    for n, p in named:
        st = opt.state[p]
        out[f"exp_avg.{n}"] = st["exp_avg"].contiguous()
        out[f"exp_avg_sq.{n}"] = st["exp_avg_sq"].contiguous()
    os.makedirs(a.out, exist_ok=True)
    save_file(out, os.path.join(a.out, "adamw.safetensors"))
    json.dump({"norms": norms}, open(os.path.join(a.out, "adamw.json"), "w"))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("grad")
    g.add_argument("--model", required=True)
    g.add_argument("--in", dest="inp", required=True)
    g.add_argument("--out", required=True)
    w = sub.add_parser("adamw")
    w.add_argument("--model", required=True)
    w.add_argument("--grads", required=True)
    w.add_argument("--in", dest="inp", required=True)
    w.add_argument("--out", required=True)
    a = ap.parse_args()
    {"grad": cmd_grad, "adamw": cmd_adamw}[a.cmd](a)


if __name__ == "__main__":
    main()
