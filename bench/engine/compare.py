"""Side-by-side engine benchmark: evolm's engine (Go, libtorch via gotch) vs
HF transformers (PyTorch 2.1.0, the same libtorch) on one random checkpoint.

usage (from the repository root, after `make deps`):
  .venv/bin/python bench/engine/compare.py [--preset small] [--threads 1] [--passes 2] [--runs 3]

One invocation:
  1. builds bench/engine and creates a random Qwen3 checkpoint of --preset
     with `engine-bench -init` (model.Init: Qwen3 shape, full Qwen vocab);
  2. writes one workload (random token ids, fixed seed) both sides read;
  3. --runs times: runs HF transformers in this process and the Go engine as
     a subprocess, one after the other, both with --threads intra-op
     threads, each reporting the best of --passes timed passes after one
     warm-up;
  4. checks that both sides computed the same thing (the prefill's
     last-position logits within 1e-4, identical greedy ids, the fwd+bwd loss
     within 1e-5 relative) and stops with an error otherwise;
  5. prints the median rates and the ratio evolm / HF (> 1: evolm is faster)
     as min / median / max over the runs, with the load average before and
     after.

Measurements (identical inputs on both sides, fp32, CPU, eager attention):
  prefill       one forward pass over a 512-token prompt, last-position
                logits only (HF: logits_to_keep=1, as generate's prefill)
  greedy b=1    64 greedy tokens after a 64-token prompt
  sampled 8x4   4 prompts (64 tokens) x 8 samples x 32 tokens, temperature
                1, no top-k/top-p, no EOS. HF: generate(num_return_sequences=8),
                which prefills each prompt 8 times; evolm prefills once.
  fwd+bwd       4 rows x (64 prompt + 64 completion) tokens: loss = -mean
                over rows of the mean completion log-prob, backward. Both
                sides project only the 64 positions that predict the
                completion onto the vocabulary (HF: logits_to_keep given
                those indices).
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

# Never reach for the network (a stuck DNS lookup would hang the run).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def workload(vocab, seed=1234):
    rng = random.Random(seed)
    ids = lambda n: [rng.randrange(vocab) for _ in range(n)]
    return {
        "prefill": ids(512),
        "gen_prompt": ids(64),
        "gen_new": 64,
        "prompts": [ids(64) for _ in range(4)],
        "samples": 8,
        "sampled_new": 32,
        "train": [{"prompt": ids(64), "completion": ids(64)} for _ in range(4)],
    }


def best(passes, f):
    f()
    b = None
    for _ in range(passes):
        t0 = time.perf_counter()
        f()
        d = time.perf_counter() - t0
        b = d if b is None or d < b else b
    return b


def hf_side(model_dir, w, threads, passes):
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    torch.set_num_threads(threads)
    m = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32, attn_implementation="eager")
    m.eval()
    # A blank generation config: otherwise generate() fills every argument
    # left at its default (temperature 1, top_k …) from the checkpoint's
    # generation_config.json (Qwen's sampling defaults, EOS).
    m.generation_config = GenerationConfig()
    res = {"threads": torch.get_num_threads()}

    check = {}

    def prefill():
        with torch.no_grad():
            out = m(input_ids=torch.tensor([w["prefill"]]), logits_to_keep=1, use_cache=True)
            out.logits.sum().item()
        check["prefill_logits"] = out.logits[0, -1]

    res["prefill_s"] = best(passes, prefill)
    res["prefill_tokens"] = len(w["prefill"])

    n = {}

    def greedy():
        gc = GenerationConfig(do_sample=False, max_new_tokens=w["gen_new"], min_new_tokens=w["gen_new"], pad_token_id=0)
        with torch.no_grad():
            out = m.generate(input_ids=torch.tensor([w["gen_prompt"]]), generation_config=gc)
        n["g"] = out.shape[1] - len(w["gen_prompt"])
        check["greedy_ids"] = out[0, len(w["gen_prompt"]):].tolist()

    res["greedy_b1_s"] = best(passes, greedy)
    res["greedy_b1_tokens"] = n["g"]

    def sampled():
        gc = GenerationConfig(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=w["sampled_new"],
                              min_new_tokens=w["sampled_new"], num_return_sequences=w["samples"], pad_token_id=0)
        ids = torch.tensor(w["prompts"])
        with torch.no_grad():
            out = m.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=gc)
        n["s"] = out.shape[0] * (out.shape[1] - ids.shape[1])

    res["sampled_s"] = best(passes, sampled)
    res["sampled_tokens"] = n["s"]

    rows = w["train"]
    P = max(len(r["prompt"]) for r in rows)
    T = max(len(r["completion"]) for r in rows)
    ids = torch.zeros(len(rows), P + T, dtype=torch.long)
    mask = torch.zeros_like(ids)
    tgt = torch.zeros(len(rows), T, dtype=torch.long)
    cm = torch.zeros(len(rows), T)
    for i, r in enumerate(rows):
        p, c = r["prompt"], r["completion"]
        ids[i, P - len(p):P] = torch.tensor(p)
        ids[i, P:P + len(c)] = torch.tensor(c)
        mask[i, P - len(p):P + len(c)] = 1
        tgt[i, :len(c)] = torch.tensor(c)
        cm[i, :len(c)] = 1
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    keep = torch.arange(P - 1, P + T - 1)  # the positions that predict the completion

    def fwd_bwd():
        logits = m(input_ids=ids, attention_mask=mask, position_ids=pos, logits_to_keep=keep).logits.float()
        lp = torch.log_softmax(logits, -1).gather(-1, tgt.unsqueeze(-1)).squeeze(-1) * cm
        loss = -(lp.sum(-1) / cm.sum(-1)).mean()
        loss.backward()
        m.zero_grad(set_to_none=True)
        check["loss"] = loss.item()

    res["fwd_bwd_s"] = best(passes, fwd_bwd)
    return res, check


def agree(hf, ev):
    """Fails unless both sides computed the same outputs."""
    import torch

    d = (hf["prefill_logits"] - torch.tensor(ev["prefill_logits"])).abs().max().item()
    if d > 1e-4:
        sys.exit(f"compare: prefill logits differ by {d:.3g} (max abs) > 1e-4: the sides did not compute the same thing")
    if hf["greedy_ids"] != ev["greedy_ids"]:
        sys.exit(f"compare: greedy ids differ:\n  HF    {hf['greedy_ids']}\n  evolm {ev['greedy_ids']}")
    dl = abs(hf["loss"] - ev["loss"])
    if dl > 1e-5 * max(1.0, abs(hf["loss"])):
        sys.exit(f"compare: fwd+bwd loss HF {hf['loss']:.8g}, evolm {ev['loss']:.8g}: they differ")
    return {"prefill_logits_max_abs_diff": d, "greedy_ids_equal": True, "loss_abs_diff": dl}


def rates(r):
    return {
        "prefill tok/s": r["prefill_tokens"] / r["prefill_s"],
        "greedy b=1 tok/s": r["greedy_b1_tokens"] / r["greedy_b1_s"],
        "sampled 8x4 tok/s": r["sampled_tokens"] / r["sampled_s"],
        "fwd+bwd steps/s": 1 / r["fwd_bwd_s"],
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="small")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3, help="side-by-side runs; ratios are shown as min / median / max")
    a = ap.parse_args()
    env = dict(os.environ)
    env.setdefault("GOWORK", os.path.join(ROOT, "build", "go.work"))
    env.setdefault("GOFLAGS", "-overlay=" + os.path.join(ROOT, "build", "overlay.json"))
    load0 = os.getloadavg()
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        exe = os.path.join(tmp, "engine-bench")
        subprocess.run(["go", "build", "-o", exe, "./bench/engine"], cwd=ROOT, env=env, check=True)
        ckpt = os.path.join(tmp, "ckpt")
        subprocess.run([exe, "-model", ckpt, "-init", a.preset], cwd=ROOT, env=env, check=True)
        cfg = json.load(open(os.path.join(ckpt, "config.json")))
        w = workload(cfg["vocab_size"])
        wpath = os.path.join(tmp, "workload.json")
        cpath = os.path.join(tmp, "check.json")
        json.dump(w, open(wpath, "w"))
        for _ in range(a.runs):
            hf, hf_check = hf_side(ckpt, w, a.threads, a.passes)
            out = subprocess.run([exe, "-model", ckpt, "-workload", wpath, "-threads", str(a.threads), "-passes", str(a.passes),
                                  "-check", cpath], cwd=ROOT, env=env, check=True, capture_output=True, text=True)
            ev = json.loads(out.stdout)
            checks = agree(hf_check, json.load(open(cpath)))
            runs.append({"evolm": ev, "hf": hf, "checks": checks})
    load1 = os.getloadavg()
    print(f"checkpoint: qwen3 preset {a.preset}: hidden {cfg['hidden_size']}, layers {cfg['num_hidden_layers']}, "
          f"vocab {cfg['vocab_size']}; threads evolm {runs[0]['evolm']['threads']} / HF {runs[0]['hf']['threads']}; "
          f"best of {a.passes} passes, {a.runs} runs")
    print("outputs agree in every run: prefill logits within %.2g, identical greedy ids, loss within %.2g" % (
        max(r["checks"]["prefill_logits_max_abs_diff"] for r in runs), max(r["checks"]["loss_abs_diff"] for r in runs)))
    print("load average (1, 5, 15 min): before %.2f %.2f %.2f, after %.2f %.2f %.2f" % (*load0, *load1))
    print(f"{'measure':<20}{'evolm':>12}{'HF':>12}{'evolm/HF min / median / max':>32}")
    for k in rates(runs[0]["evolm"]):
        re = [rates(r["evolm"])[k] for r in runs]
        rh = [rates(r["hf"])[k] for r in runs]
        ratio = sorted(e / h for e, h in zip(re, rh))
        print(f"{k:<20}{statistics.median(re):>12.2f}{statistics.median(rh):>12.2f}"
              f"{'%.2f / %.2f / %.2f' % (ratio[0], statistics.median(ratio), ratio[-1]):>32}")
    json.dump({"runs": runs, "load_before": load0, "load_after": load1}, sys.stderr)
    print(file=sys.stderr)


if __name__ == "__main__":
    main()
