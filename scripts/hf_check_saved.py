"""Checks that checkpoints evolm wrote load in transformers with the same logits.

Usage: hf_check_saved.py DIR...

Each DIR is an HF checkpoint directory written by evolm's model.Save (or
model.Init) plus DIR/ours.safetensors, holding inputs and evolm's logits for
them (case{i}.ids, .mask, .pos, .logits as in hf_make_checkpoints.py).
transformers loads DIR in float32 with eager attention and reports what it
found missing, unexpected or mis-shaped; the script runs the inputs and
prints, per DIR, the largest |HF - evolm| logit difference over unpadded
positions, as JSON: {DIR: {"max_diff": x, "missing": [...], ...}}.
"""
import json
import sys

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

torch.set_num_threads(1)


def main():
    report = {}
    for d in sys.argv[1:]:
        model, info = AutoModelForCausalLM.from_pretrained(
            d, torch_dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
        model.eval()
        ours = load_file(f"{d}/ours.safetensors")
        worst = 0.0
        c = 0
        with torch.no_grad():
            while f"case{c}.ids" in ours:
                ids, mask, pos = ours[f"case{c}.ids"], ours[f"case{c}.mask"], ours[f"case{c}.pos"]
                logits = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits.float()
                diff = (logits - ours[f"case{c}.logits"]).abs()
                diff = diff[mask.bool()]
                worst = max(worst, float(diff.max()))
                c += 1
        report[d] = {
            "max_diff": worst,
            "cases": c,
            "architecture": type(model).__name__,
            "missing": sorted(info["missing_keys"]),
            "unexpected": sorted(info["unexpected_keys"]),
            "mismatched": sorted(str(m) for m in info["mismatched_keys"]),
            "tied": model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr(),
        }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
