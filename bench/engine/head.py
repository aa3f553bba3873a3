"""The lm_head's forms on this CPU: F.linear (MKL, which packs the weight on
every call) against oneDNN's linear over a weight packed once
(mkldnn::_reorder_linear_weight, then mkldnn::_linear_pointwise), the form
model/llama's packedHead takes through model/fused, and against W·hᵀ (one
row padded to two columns), a form evolm took at one row before: MKL
streams it fast on AMD hosts and slowly on Intel ones (docs/engine.md,
"The lm_head").

usage (from the repository root, after `make deps`):
  .venv/bin/python bench/engine/head.py [--threads 1] [--vocab 151936]

For each width C and row count it prints the best of --reps calls of each
form in ms, the ratio F.linear / packed (> 1: packed is faster) and the
largest difference of the packed logits from F.linear's relative to the
largest |logit|; it stops if that exceeds 1e-5. All forms run in this
process on the same libtorch.
"""
import argparse
import sys
import time

import torch
import torch.nn.functional as F


def best(reps, f):
    f()
    b = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        b = min(b, time.perf_counter() - t0)
    return b * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--widths", default="64,256,1024")
    ap.add_argument("--rows", default="1,2,4,8,32,64,512")
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    print(f"threads {torch.get_num_threads()}, vocab {a.vocab}; ms, best of {a.reps}")
    print(f"{'C':>5} {'rows':>5} {'F.linear':>9} {'packed':>8} {'W·hᵀ':>8} {'ratio':>6}  max|Δ|/max|logit|")
    with torch.no_grad():
        for C in map(int, a.widths.split(",")):
            w = torch.randn(a.vocab, C) * 0.02
            packed = torch.ops.mkldnn._reorder_linear_weight(w)
            for n in map(int, a.rows.split(",")):
                x = torch.randn(n, C)
                ref = F.linear(x, w)
                got = torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")
                rel = ((got - ref).abs().max() / ref.abs().max()).item()
                if rel > 1e-5:
                    sys.exit(f"head: C={C} rows={n}: packed logits differ from F.linear by {rel:.3g} of the largest")
                tl = best(a.reps, lambda: F.linear(x, w))
                tp = best(a.reps, lambda: torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], ""))
                # W·hᵀ, one row padded to two columns
                xs = torch.cat([x, torch.zeros(1, C)]) if n == 1 else x
                ts = best(a.reps, lambda: torch.matmul(w, xs.t()).t()[:n].contiguous())
                print(f"{C:>5} {n:>5} {tl:>9.2f} {tp:>8.2f} {ts:>8.2f} {tl / tp:>6.2f}  {rel:.2g}", flush=True)


if __name__ == "__main__":
    main()
