"""transformers' log-likelihoods of the requests an lm-evaluation-harness run made.

Usage: lmeval_reference.py MODEL_DIR SAMPLES.jsonl...

Reads lm-eval's --log_samples files of loglikelihood (multiple_choice) tasks,
encodes each (context, continuation) as lm-eval 0.4.13's _encode_pair does
(trailing context spaces moved to the continuation; the whole encoded, the
context's tokens split off) with the checkpoint's tokenizer, and computes
with transformers (fp32, eager attention, CPU) the sum of the continuation
tokens' log-probs. Prints a JSON list of {"lmeval": float, "hf": float,
"tokens": n} per request.
"""
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

torch.set_num_threads(1)


def encode_pair(tok, context, continuation):
    n = len(context) - len(context.rstrip())
    if n > 0:
        continuation = context[-n:] + continuation
        context = context[:-n]
    whole = tok.encode(context + continuation, add_special_tokens=False)
    ctx = tok.encode(context, add_special_tokens=False)
    return ctx, whole[len(ctx):]


def main():
    model_dir, files = sys.argv[1], sys.argv[2:]
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32, attn_implementation="eager").eval()
    out = []
    for path in files:
        for line in open(path):
            s = json.loads(line)
            args = s["arguments"]  # {"gen_args_i": {"arg_0": context, "arg_1": continuation}}
            for i, resp in enumerate(s["resps"]):
                a = args[f"gen_args_{i}"]
                ctx, cont = encode_pair(tok, a["arg_0"], a["arg_1"])
                ids = torch.tensor([ctx + cont])
                with torch.no_grad():
                    logits = model(input_ids=ids).logits[0].float()
                lsm = torch.log_softmax(logits[len(ctx) - 1 : len(ctx) + len(cont) - 1], dim=-1)
                hf = lsm.gather(-1, torch.tensor(cont).unsqueeze(-1)).sum().item()
                out.append({"lmeval": float(resp[0][0]), "hf": hf, "tokens": len(cont)})
    print(json.dumps(out))


if __name__ == "__main__":
    main()
