"""Reference side of model/safetensors' interop test.

Usage: hf_safetensors_interop.py OURS THEIRS
Loads OURS (written by evolm) with the safetensors library and prints its
values; writes THEIRS with the library (several dtypes, shapes, metadata) and
prints the values it holds. Output: {"ours": {...}, "theirs": {...}} as JSON.
"""
import json
import sys

import torch
from safetensors.torch import load_file, save_file

torch.set_num_threads(1)


def values(t):
    return [float(x) for x in t.float().flatten().tolist()] if t.dtype != torch.bool else [float(x) for x in t.flatten().tolist()]


def main():
    ours, theirs = sys.argv[1], sys.argv[2]
    got = {k: values(v) for k, v in load_file(ours).items()}
    g = torch.Generator().manual_seed(0)
    mine = {
        "model.embed_tokens.weight": torch.randn(3, 4, generator=g),
        "bf16": torch.randn(5, generator=g).to(torch.bfloat16),
        "f64": torch.randn(2, 1, generator=g).double(),
        "i64": torch.tensor([1, -2, 3 << 40]),
        "i32": torch.tensor([[4, -5]], dtype=torch.int32),
        "u8": torch.tensor([0, 255], dtype=torch.uint8),
        "mask": torch.tensor([True, False, True]),
    }
    save_file(mine, theirs, metadata={"format": "pt"})
    print(json.dumps({"ours": got, "theirs": {k: values(v) for k, v in mine.items()}}))


if __name__ == "__main__":
    main()
