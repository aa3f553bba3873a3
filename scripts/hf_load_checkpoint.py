"""Loads an evolm checkpoint directory with HF transformers (the test that a
trained checkpoint is usable by the ecosystem) and runs one forward pass.
Fails on missing or unexpected keys or non-finite logits."""
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

torch.set_num_threads(1)
path = sys.argv[1]
model, info = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32, output_loading_info=True)
bad = {k: v for k, v in info.items() if v}
if bad:
    sys.exit(f"{path}: loading info not clean: {bad}")
tok = AutoTokenizer.from_pretrained(path)
ids = tok("What is 2+2?", return_tensors="pt").input_ids
with torch.no_grad():
    logits = model(ids).logits
if not torch.isfinite(logits).all():
    sys.exit(f"{path}: non-finite logits")
print(f"loaded {type(model).__name__} from {path}: {sum(p.numel() for p in model.parameters())} parameters, logits {tuple(logits.shape)}")
