"""Log-probs under an adapter loaded by PEFT's AutoPeftModelForCausalLM.

Usage: peft_auto.py ADAPTER_DIR < ROWS.json

AutoPeftModelForCausalLM.from_pretrained(ADAPTER_DIR) finds the base model
through the adapter's base_model_name_or_path alone. ROWS.json is a list of
{"prompt": [ids], "completion": [ids]}; prints the JSON list of the
completion tokens' log-probs (fp32, eager attention, CPU), and the base
model's path as PEFT read it.
"""
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch
from peft import AutoPeftModelForCausalLM

torch.set_num_threads(1)


def main():
    model = AutoPeftModelForCausalLM.from_pretrained(sys.argv[1], torch_dtype=torch.float32, attn_implementation="eager").eval()
    out = []
    with torch.no_grad():
        for row in json.load(sys.stdin):
            p, c = row["prompt"], row["completion"]
            logits = model(input_ids=torch.tensor([p + c])).logits[0].float()
            lsm = torch.log_softmax(logits[len(p) - 1 : len(p) + len(c) - 1], dim=-1)
            out.append(lsm.gather(-1, torch.tensor(c).unsqueeze(-1)).squeeze(-1).tolist())
    print(json.dumps({"logprobs": out, "base": model.peft_config["default"].base_model_name_or_path}))


if __name__ == "__main__":
    main()
