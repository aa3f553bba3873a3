"""Inputs and weights shared by the HF reference scripts that make tiny random
checkpoints (hf_make_checkpoints.py, peft_lora.py). The scripts run as
`python scripts/<name>.py`, so this directory is on sys.path."""
import torch


def inputs(seed, vocab):
    """Two cases of (ids, mask, pos): a plain (2, 9) batch, and a left-padded
    (3, 7) batch with its mask; pos = cumsum(mask) - 1 as HF generate makes it."""
    g = torch.Generator().manual_seed(seed)
    ids0 = torch.randint(0, vocab, (2, 9), generator=g)
    mask0 = torch.ones_like(ids0)
    ids1 = torch.randint(0, vocab, (3, 7), generator=g)
    mask1 = torch.tensor([[0, 0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1], [0, 1, 1, 1, 1, 1, 1]])
    ids1 = ids1.masked_fill(mask1 == 0, 0)
    out = []
    for ids, mask in ((ids0, mask0), (ids1, mask1)):
        pos = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
        out.append((ids, mask, pos))
    return out


def perturb(model, g, scale):
    """HF's init leaves norms at 1 and biases at 0, which would hide bugs in
    them; give every parameter a random value of a sensible scale (weights
    N(0, scale²), norms 1 + N(0, 0.04), biases N(0, 0.04))."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith(".bias"):
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(scale * torch.randn(p.shape, generator=g))
