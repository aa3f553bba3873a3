"""Side-by-side GRPO step benchmark: evolm's trainer (Go, libtorch via gotch)
vs the same step in PyTorch with HF transformers' Qwen3 (PyTorch 2.1.0, the
same libtorch), on one checkpoint and one batch.

usage (from the repository root, after `make deps`):
  .venv/bin/python bench/grpo/compare.py [--preset small | --model DIR]
      [--threads 1] [--warmup 1] [--reps 3] [--micro-batch 8] [--runs 3]

One invocation:
  1. builds bench/grpo; creates a random Qwen3 checkpoint of --preset with
     `grpo-bench -init` (model.Init: Qwen3 shape, full Qwen vocab) unless
     --model names one;
  2. `grpo-bench -make-batch` draws the batch both sides read (batch.go):
     8 prompts x 4 completions, 64 + 64 tokens, group advantages, old and
     reference log-probs = the checkpoint's own log-probs + N(0, 0.1^2);
  3. --runs times: runs the Go step as a subprocess, then the PyTorch step in
     this process, both with --threads intra-op threads (GOMAXPROCS too),
     each doing --warmup untimed then --reps timed optimizer steps from the
     same weights;
  4. prints, per run, both sides' step times, loss, grad norm and KL at every
     step, then the median step times and the ratio torch/evolm as
     min / median / max over the runs, with the load average before and
     after; it exits 1 if the sides disagree in any run (not the same
     computation). The first step's loss and KL depend only on the batch (old
     and reference log-probs are the starting weights' own plus noise); its
     grad norm and the later steps' losses depend on the weights each side
     computed and updated, and are the real check.

The PyTorch step is TRL's GRPOTrainer.compute_loss on precomputed reference
log-probs: forward with logits_to_keep = T+1 (only completion positions reach
the LM head), log_softmax + gather, ratio exp(logp - old), clipped surrogate
(eps 0.2), k3 KL (beta 0.001), grpo normalisation (per-sequence token mean,
mean over sequences), gradients accumulated over micro-batches of
--micro-batch sequences (each micro-batch's loss is its share of the batch
mean), clip_grad_norm_(1.0), torch.optim.AdamW(lr=1e-6, weight_decay=0).
fp32, CPU, eager attention on both sides.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

# Never reach for the network (a stuck DNS lookup would hang the run).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

BETA, EPS, LR, MAX_GRAD_NORM = 0.001, 0.2, 1e-6, 1.0


def torch_side(model_dir, batch, threads, warmup, reps, micro):
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    m = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32, attn_implementation="eager")
    m.train()  # dropout is 0 in Qwen3; train mode as in TRL
    params = [p for p in m.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=LR, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    rows = batch["rows"]

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
        return ids, mask, pos, cm, old, ref, adv, T

    def step():
        t0 = time.perf_counter()
        n = len(rows)
        loss_sum = kl_sum = clipped = tokens = 0.0
        for s in range(0, n, micro):
            ids, mask, pos, cm, old, ref, adv, T = micro_tensors(rows[s:s + micro])
            logits = m(input_ids=ids, attention_mask=mask, position_ids=pos, logits_to_keep=T + 1).logits[:, :-1]
            logps = torch.log_softmax(logits, -1).gather(-1, ids[:, -T:].unsqueeze(-1)).squeeze(-1)
            coef_1 = torch.exp(logps - old)
            coef_2 = torch.clamp(coef_1, 1 - EPS, 1 + EPS)
            a = adv.unsqueeze(1)
            per_token_loss = -torch.min(coef_1 * a, coef_2 * a)
            per_token_kl = torch.exp(ref - logps) - (ref - logps) - 1
            per_token_loss = per_token_loss + BETA * per_token_kl
            # TRL's grpo loss is the mean over sequences; this micro-batch's share.
            loss = ((per_token_loss * cm).sum(-1) / cm.sum(-1).clamp(min=1.0)).sum() / n
            loss.backward()
            with torch.no_grad():
                loss_sum += loss.item()
                kl_sum += (per_token_kl * cm).sum().item()
                is_low = (coef_1 < 1 - EPS) & (a < 0)
                is_high = (coef_1 > 1 + EPS) & (a > 0)
                clipped += ((is_low | is_high).float() * cm).sum().item()
                tokens += cm.sum().item()
        norm = torch.nn.utils.clip_grad_norm_(params, MAX_GRAD_NORM)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return {"seconds": time.perf_counter() - t0, "loss": loss_sum, "grad_norm": norm.item(),
                "kl": kl_sum / tokens, "clip_frac": clipped / tokens, "tokens": int(tokens)}

    steps = [step() for _ in range(warmup + reps)]
    return {"threads": torch.get_num_threads(), "micro_batch": micro, "warmup": warmup,
            "step_s": statistics.median(s["seconds"] for s in steps[warmup:]), "steps": steps}


def close(a, b, rtol, atol):
    return abs(a - b) <= atol + rtol * abs(b)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="small")
    ap.add_argument("--model", default="", help="existing HF checkpoint dir (default: create one of --preset)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--micro-batch", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--runs", type=int, default=3, help="side-by-side runs; the ratio is shown as min / median / max")
    a = ap.parse_args()
    env = dict(os.environ)
    env.setdefault("GOWORK", os.path.join(ROOT, "build", "go.work"))
    env.setdefault("GOFLAGS", "-overlay=" + os.path.join(ROOT, "build", "overlay.json"))
    env["GOMAXPROCS"] = str(a.threads)
    with tempfile.TemporaryDirectory() as tmp:
        exe = os.path.join(tmp, "grpo-bench")
        subprocess.run(["go", "build", "-o", exe, "./bench/grpo"], cwd=ROOT, env=env, check=True)
        ckpt = a.model
        if not ckpt:
            ckpt = os.path.join(tmp, "ckpt")
            subprocess.run([exe, "-model", ckpt, "-init", a.preset], cwd=ROOT, env=env, check=True)
        cfg = json.load(open(os.path.join(ckpt, "config.json")))
        bpath = os.path.join(tmp, "batch.json")
        subprocess.run([exe, "-model", ckpt, "-make-batch", bpath, "-seed", str(a.seed), "-threads", str(a.threads)],
                       cwd=ROOT, env=env, check=True)
        batch = json.load(open(bpath))
        load0 = os.getloadavg()
        runs = []
        for _ in range(a.runs):
            out = subprocess.run([exe, "-model", ckpt, "-batch", bpath, "-threads", str(a.threads), "-warmup", str(a.warmup),
                                  "-reps", str(a.reps), "-micro-batch", str(a.micro_batch)],
                                 cwd=ROOT, env=env, check=True, capture_output=True, text=True)
            ev = json.loads(out.stdout)
            pt = torch_side(ckpt, batch, a.threads, a.warmup, a.reps, a.micro_batch)
            runs.append((ev, pt))
        load1 = os.getloadavg()
    sp = batch["spec"]
    ev, pt = runs[0]
    print(f"checkpoint: {a.model or 'qwen3 preset ' + a.preset}: hidden {cfg['hidden_size']}, "
          f"layers {cfg['num_hidden_layers']}, vocab {cfg['vocab_size']}")
    print(f"batch: {sp['prompts']} prompts x {sp['group']} completions, {sp['prompt_len']} + {sp['completion_len']} "
          f"tokens, micro-batch {a.micro_batch}; threads evolm {ev['threads']} / torch {pt['threads']}; "
          f"median of {a.reps} steps after {a.warmup} warm-up, {a.runs} runs")
    print("load average (1, 5, 15 min): before %.2f %.2f %.2f, after %.2f %.2f %.2f" % (*load0, *load1))
    ok = True
    for r, (ev, pt) in enumerate(runs):
        print(f"run {r + 1}")
        print(f"{'step':<6}{'evolm s':>10}{'torch s':>10}{'evolm loss':>14}{'torch loss':>14}"
              f"{'evolm |g|':>12}{'torch |g|':>12}{'evolm kl':>11}{'torch kl':>11}{'clip e/t':>12}")
        for i, (e, t) in enumerate(zip(ev["steps"], pt["steps"])):
            same = (close(e["loss"], t["loss"], 1e-3, 1e-6) and close(e["grad_norm"], t["grad_norm"], 1e-3, 1e-6)
                    and close(e["kl"], t["kl"], 1e-3, 1e-7) and e["tokens"] == t["tokens"])
            ok = ok and same
            print(f"{i + 1:<6}{e['seconds']:>10.3f}{t['seconds']:>10.3f}{e['loss']:>14.7f}{t['loss']:>14.7f}"
                  f"{e['grad_norm']:>12.6f}{t['grad_norm']:>12.6f}{e['kl']:>11.6f}{t['kl']:>11.6f}"
                  f"{e['clip_frac']:>6.3f}/{t['clip_frac']:.3f}{'' if same else '  MISMATCH'}")
    ratio = sorted(pt["step_s"] / ev["step_s"] for ev, pt in runs)
    print(f"median step: evolm {statistics.median(ev['step_s'] for ev, _ in runs):.3f} s, "
          f"torch {statistics.median(pt['step_s'] for _, pt in runs):.3f} s; "
          f"torch/evolm min / median / max = {ratio[0]:.2f} / {statistics.median(ratio):.2f} / {ratio[-1]:.2f} "
          f"(> 1: evolm is faster)")
    json.dump({"runs": [{"evolm": ev, "torch": pt} for ev, pt in runs], "load_before": load0, "load_after": load1}, sys.stderr)
    print(file=sys.stderr)
    if not ok:
        print("losses, grad norms or KL differ: the two sides did not compute the same step", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
