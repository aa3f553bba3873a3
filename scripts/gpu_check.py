#!/usr/bin/env python3
"""The reference half of scripts/gpu-check.sh: HF transformers and PyTorch on
the same device as evolm's half (cmd/gpucheck), and the comparison. Each
subcommand prints one JSON object whose "pass" says whether the check held
(timings have no pass threshold: they report ratios).

  logits   --model DIR --device D --dtype DT --in ROWS --evolm DIR --tol X
           HF's logits of the rows, left-padded into one batch (mask 0 and
           position 1 on padding, positions cumsum(mask) - 1, as HF generate
           builds them), against evolm's logits.f32 at every unpadded
           position, and the log-softmax of those logits at each row's next
           token against evolm's logprobs.f32 (the learner's chunked
           selective log-softmax). pass: both max |difference| <= X.
  generate --model DIR --device D --in ROWS --new N --evolm OUT
           HF greedy search (no EOS: exactly N tokens) per prompt; pass:
           evolm's greedy tokens and its sampled tokens (temperature 1,
           top-k 1) both equal them.
  decode   --model DIR --device D --dtype DT --prompts ROWS --new N --reps R --evolm OUT
           HF model.generate greedy over the same prompts, batched (no
           padding, no EOS); the ratio evolm tokens/s / HF tokens/s.
  grpo     --model DIR --device D --dtype DT --batch BATCH --micro M --warmup W --reps R --evolm OUT --tol X
           The GRPO step in PyTorch (TRL's GRPOTrainer.compute_loss on the
           batch's old and reference log-probs: clipped surrogate eps 0.2,
           k3 KL beta 0.001, per-sequence token mean then mean over
           sequences, micro-batches accumulated, clip_grad_norm_(1.0),
           AdamW lr 1e-6) on the same batch; pass: the first step's loss and
           grad norm (which depend only on the batch and the starting
           weights) agree within X relative plus --atol; the ratio torch
           step time / evolm step time (> 1: evolm is faster).
"""
import argparse
import json
import os
import statistics
import sys
import time

# Never reach for the network (a stuck DNS lookup would hang the check).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np
import torch

BETA, EPS, LR, MAX_GRAD_NORM = 0.001, 0.2, 1e-6, 1.0


def load(model_dir, device, dtype):
    from transformers import AutoModelForCausalLM

    dt = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
    m = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=dt).to(device)
    m.generation_config.eos_token_id = None  # every row runs to max_new_tokens
    m.generation_config.pad_token_id = 0
    return m


def sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def rows_of(path):
    with open(path) as f:
        return json.load(f)["rows"]


def cmd_logits(a):
    rows = rows_of(a.input)
    m = load(a.model, a.device, a.dtype).eval()
    B, T = len(rows), max(len(r) for r in rows)
    ids = torch.zeros(B, T, dtype=torch.long)
    mask = torch.zeros(B, T, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, T - len(r):] = torch.tensor(r)
        mask[i, T - len(r):] = 1
    pos = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
    with torch.no_grad():
        logits = m(input_ids=ids.to(a.device), attention_mask=mask.to(a.device),
                   position_ids=pos.to(a.device)).logits.float().cpu()
    V = logits.shape[-1]
    ev = torch.from_numpy(np.fromfile(os.path.join(a.evolm, "logits.f32"), dtype="<f4").reshape(B, T, V))
    evlp = torch.from_numpy(np.fromfile(os.path.join(a.evolm, "logprobs.f32"), dtype="<f4").reshape(B, T - 1))
    lsm = torch.log_softmax(logits, -1)
    d_logit = d_lp = 0.0
    for i, r in enumerate(rows):
        p = T - len(r)
        d_logit = max(d_logit, (ev[i, p:] - logits[i, p:]).abs().max().item())
        want = lsm[i, p:T - 1].gather(-1, ids[i, p + 1:].unsqueeze(-1)).squeeze(-1)
        d_lp = max(d_lp, (evlp[i, :len(r) - 1] - want).abs().max().item())
    scale = max(logits[i, T - len(r):].abs().max().item() for i, r in enumerate(rows))
    tol = a.tol * (scale if a.relative else 1.0)
    ok = d_logit <= tol and d_lp <= tol and not (np.isnan(d_logit) or np.isnan(d_lp))
    return {"pass": ok, "max_logit_diff": d_logit, "max_logprob_diff": d_lp, "max_abs_logit": scale, "tol": tol,
            "B": B, "T": T, "V": V, "hf_attention": m.config._attn_implementation}


def cmd_generate(a):
    rows = rows_of(a.input)
    m = load(a.model, a.device, "float32").eval()
    with open(a.evolm) as f:
        ev = json.load(f)
    want = []
    with torch.no_grad():
        for r in rows:
            ids = torch.tensor([r], device=a.device)
            out = m.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=a.new, do_sample=False)
            want.append(out[0, len(r):].tolist())
    greedy = ev["greedy"] == want
    sampled = ev["sampled"] == want
    first = next((i for i in range(len(want)) if ev["greedy"][i] != want[i] or ev["sampled"][i] != want[i]), None)
    res = {"pass": greedy and sampled, "greedy_equal": greedy, "sampled_equal": sampled, "rows": len(rows), "new": a.new}
    if first is not None:
        res.update({"row": first, "hf": want[first], "evolm_greedy": ev["greedy"][first], "evolm_sampled": ev["sampled"][first]})
    return res


def cmd_decode(a):
    rows = rows_of(a.prompts)
    m = load(a.model, a.device, a.dtype).eval()
    with open(a.evolm) as f:
        ev = json.load(f)
    ids = torch.tensor(rows, device=a.device)
    times = []
    with torch.no_grad():
        for i in range(a.reps + 1):
            sync(a.device)
            t0 = time.perf_counter()
            out = m.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=a.new, min_new_tokens=a.new,
                             do_sample=False)
            sync(a.device)
            if i > 0:
                times.append(time.perf_counter() - t0)
            assert out.shape[1] == ids.shape[1] + a.new, out.shape
    hf = len(rows) * a.new / statistics.median(times)
    return {"pass": True, "evolm_tokens_per_s": ev["tokens_per_s"], "hf_tokens_per_s": hf,
            "ratio": ev["tokens_per_s"] / hf, "hf_seconds": times}


def cmd_grpo(a):
    with open(a.batch) as f:
        rows = json.load(f)["rows"]
    with open(a.evolm) as f:
        ev = json.load(f)
    m = load(a.model, a.device, a.dtype)
    m.train()  # dropout is 0 in Qwen3; train mode as in TRL
    params = [p for p in m.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=LR, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    dev = a.device

    def micro_tensors(mb):
        P = max(len(r["prompt"]) for r in mb)
        T = max(len(r["completion"]) for r in mb)
        B = len(mb)
        ids = torch.zeros(B, P + T, dtype=torch.long)
        mask = torch.zeros_like(ids)
        cm = torch.zeros(B, T)
        old = torch.zeros(B, T)
        ref = torch.zeros(B, T)
        for i, r in enumerate(mb):
            p, c = r["prompt"], r["completion"]
            ids[i, P - len(p):P] = torch.tensor(p)  # prompts left-padded, completions right-padded
            ids[i, P:P + len(c)] = torch.tensor(c)
            mask[i, P - len(p):P + len(c)] = 1
            cm[i, :len(c)] = 1
            old[i, :len(c)] = torch.tensor(r["old_logps"], dtype=torch.float64).float()
            ref[i, :len(c)] = torch.tensor(r["ref_logps"], dtype=torch.float64).float()
        adv = torch.tensor([r["advantage"] for r in mb], dtype=torch.float64).float()
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        return [t.to(dev) for t in (ids, mask, pos, cm, old, ref, adv)] + [T]

    def step():
        sync(dev)
        t0 = time.perf_counter()
        n = len(rows)
        loss_sum = 0.0
        for s in range(0, n, a.micro):
            ids, mask, pos, cm, old, ref, adv, T = micro_tensors(rows[s:s + a.micro])
            logits = m(input_ids=ids, attention_mask=mask, position_ids=pos, logits_to_keep=T + 1).logits[:, :-1].float()
            logps = torch.log_softmax(logits, -1).gather(-1, ids[:, -T:].unsqueeze(-1)).squeeze(-1)
            coef_1 = torch.exp(logps - old)
            coef_2 = torch.clamp(coef_1, 1 - EPS, 1 + EPS)
            adv_ = adv.unsqueeze(1)
            per_token = -torch.min(coef_1 * adv_, coef_2 * adv_) + BETA * (torch.exp(ref - logps) - (ref - logps) - 1)
            loss = ((per_token * cm).sum(-1) / cm.sum(-1).clamp(min=1.0)).sum() / n
            loss.backward()
            loss_sum += loss.item()
        norm = torch.nn.utils.clip_grad_norm_(params, MAX_GRAD_NORM)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync(dev)
        return {"seconds": time.perf_counter() - t0, "loss": loss_sum, "grad_norm": norm.item()}

    steps = [step() for _ in range(a.warmup + a.reps)]
    torch_s = statistics.median(s["seconds"] for s in steps[a.warmup:])
    e1, t1 = ev["steps"][0], steps[0]

    def close(x, y):
        return abs(x - y) <= a.atol + a.tol * abs(y)

    ok = close(e1["loss"], t1["loss"]) and close(e1["grad_norm"], t1["grad_norm"])
    return {"pass": ok, "evolm_step_s": ev["step_s"], "torch_step_s": torch_s, "ratio": torch_s / ev["step_s"],
            "first_step": {"evolm_loss": e1["loss"], "torch_loss": t1["loss"], "evolm_grad_norm": e1["grad_norm"],
                           "torch_grad_norm": t1["grad_norm"]}, "tol": a.tol, "atol": a.atol, "torch_steps": steps}


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("logits", "generate", "decode", "grpo"):
        p = sub.add_parser(name)
        p.add_argument("--model", required=True)
        p.add_argument("--device", default="cpu")
        p.add_argument("--dtype", default="float32")
        p.add_argument("--evolm", required=True)
        p.add_argument("--threads", type=int, default=0)
        if name == "logits":
            p.add_argument("--in", dest="input", required=True)
            p.add_argument("--tol", type=float, required=True)
            p.add_argument("--relative", action="store_true", help="tol is relative to the largest |logit|")
        if name == "generate":
            p.add_argument("--in", dest="input", required=True)
            p.add_argument("--new", type=int, required=True)
        if name == "decode":
            p.add_argument("--prompts", required=True)
            p.add_argument("--new", type=int, required=True)
            p.add_argument("--reps", type=int, default=3)
        if name == "grpo":
            p.add_argument("--batch", required=True)
            p.add_argument("--micro", type=int, default=8)
            p.add_argument("--warmup", type=int, default=1)
            p.add_argument("--reps", type=int, default=3)
            p.add_argument("--tol", type=float, required=True, help="relative tolerance of step 1's loss and grad norm")
            p.add_argument("--atol", type=float, default=1e-6, help="absolute tolerance added to it")
    a = ap.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    res = {"logits": cmd_logits, "generate": cmd_generate, "decode": cmd_decode, "grpo": cmd_grpo}[a.cmd](a)
    json.dump(res, sys.stdout)
    print()


if __name__ == "__main__":
    main()
