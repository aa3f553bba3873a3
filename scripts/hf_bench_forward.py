"""HF side of model/llama's BenchmarkVsHF: times transformers on a checkpoint.

Usage: hf_bench_forward.py DIR BATCH SEQ THREADS

Loads DIR in float32 (eager attention, as evolm computes it), then times a
no-grad prefill of (BATCH, SEQ) random ids and one forward+backward of the
mean next-token cross-entropy on the same ids, after a warm-up, with
torch.set_num_threads(THREADS). Prints JSON {"prefill_tok_s", "fwd_bwd_s"}.
"""
import json
import sys
import time

import torch
from transformers import AutoModelForCausalLM


def timed(fn, min_s=2.0):
    fn()  # warm-up
    n, t0 = 0, time.perf_counter()
    while True:
        fn()
        n += 1
        dt = time.perf_counter() - t0
        if dt >= min_s and n >= 3:
            return dt / n


def main():
    d, B, T, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    torch.set_num_threads(threads)
    model = AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float32, attn_implementation="eager")
    ids = torch.randint(0, model.config.vocab_size, (B, T), generator=torch.Generator().manual_seed(0))

    def prefill():
        with torch.no_grad():
            model(input_ids=ids)

    def fwd_bwd():
        logits = model(input_ids=ids).logits
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
        loss.backward()
        model.zero_grad(set_to_none=True)

    model.train(False)
    t_prefill = timed(prefill)
    t_step = timed(fwd_bwd)
    print(json.dumps({"prefill_tok_s": B * T / t_prefill, "fwd_bwd_s": t_step}))


if __name__ == "__main__":
    main()
