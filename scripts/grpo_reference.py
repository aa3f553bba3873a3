"""Reference GRPO loss written from the formulas in TRL's GRPOTrainer docs
(compute_loss): ratio, clipped surrogate, k3 KL, and the grpo / dapo / dr_grpo
normalisations; plus "pack", open-instruct's packed loss (sequences packed
greedily into rows of pack_length tokens, masked_mean with axis=1 over the
rows), built here by actually packing the per-token losses into rows.
Reads a batch as JSON on argv[1], prints JSON results.

Used by stages/grpo tests: evolm's loss, metrics and gradients must match.
"""
import json
import sys

import torch

torch.set_num_threads(1)


def pack_rows(prompt_lens, completion_lens, pack_length):
    """Greedy in-order packing as open-instruct's pack_sequences: flush the
    current row when the next query+response would overflow it."""
    rows, cur, used = [], [], 0
    for i, (p, c) in enumerate(zip(prompt_lens, completion_lens)):
        n = p + c
        if used + n > pack_length and cur:
            rows.append(cur)
            cur, used = [], 0
        cur.append(i)
        used += n
    if cur:
        rows.append(cur)
    return rows


def packed_masked_mean(per_token_loss, mask, prompt_lens, pack_length):
    lens = [int(m.sum().item()) for m in mask]
    rows = pack_rows(prompt_lens, lens, pack_length)
    width = max(sum(prompt_lens[i] + lens[i] for i in row) for row in rows)
    values, masks = [], []
    for row in rows:
        v, m = [], []
        for i in row:
            # the prompt's tokens carry no loss (mask 0), then the response's
            v.append(torch.zeros(prompt_lens[i]))
            m.append(torch.zeros(prompt_lens[i]))
            v.append(per_token_loss[i, : lens[i]])
            m.append(mask[i, : lens[i]])
        v, m = torch.cat(v), torch.cat(m)
        pad = width - v.numel()
        values.append(torch.cat([v, torch.zeros(pad)]))
        masks.append(torch.cat([m, torch.zeros(pad)]))
    values, masks = torch.stack(values), torch.stack(masks)
    # open-instruct masked_mean(values, mask, axis=1)
    return ((values * masks).sum(axis=1) / masks.sum(axis=1)).mean()


def trl_loss(logps, old_logps, ref_logps, adv, mask, beta, eps_low, eps_high, loss_type, max_len,
             prompt_lens=None, pack_length=None):
    coef_1 = torch.exp(logps - old_logps)
    coef_2 = torch.clamp(coef_1, 1 - eps_low, 1 + eps_high)
    per_token_loss1 = coef_1 * adv.unsqueeze(1)
    per_token_loss2 = coef_2 * adv.unsqueeze(1)
    per_token_loss = -torch.min(per_token_loss1, per_token_loss2)
    per_token_kl = torch.exp(ref_logps - logps) - (ref_logps - logps) - 1
    if beta != 0.0:
        per_token_loss = per_token_loss + beta * per_token_kl
    if loss_type == "grpo":
        loss = ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    elif loss_type == "dapo":
        loss = (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0)
    elif loss_type == "dr_grpo":
        loss = (per_token_loss * mask).sum() / (per_token_loss.size(0) * max_len)
    elif loss_type == "pack":
        loss = packed_masked_mean(per_token_loss, mask, prompt_lens, pack_length)
    else:
        raise ValueError(loss_type)
    is_low = (coef_1 < 1 - eps_low) & (adv.unsqueeze(1) < 0)
    is_high = (coef_1 > 1 + eps_high) & (adv.unsqueeze(1) > 0)
    clipped = ((is_low | is_high).float() * mask).sum()
    kl_sum = (per_token_kl * mask).sum()
    return loss, kl_sum.detach(), clipped, mask.sum()


def main():
    b = json.load(open(sys.argv[1]))
    out = []
    for case in b["cases"]:
        shape = (case["B"], case["T"])
        t = lambda k: torch.tensor(case[k], dtype=torch.float32).reshape(shape)
        logps = t("logps").requires_grad_(True)
        old = t("old_logps") if case.get("old_logps") else logps.detach()
        ref = t("ref_logps")
        adv = torch.tensor(case["adv"], dtype=torch.float32)
        mask = t("mask")
        loss, kl_sum, clipped, tokens = trl_loss(
            logps, old, ref, adv, mask, case["beta"], case["eps"], case["eps_high"], case["norm"], case["max_len"],
            case.get("prompt_lens"), case.get("pack_length"))
        loss.backward()
        out.append({
            "loss": loss.item(),
            "kl_sum": kl_sum.item(),
            "clipped": clipped.item(),
            "tokens": tokens.item(),
            "grad": logps.grad.reshape(-1).tolist(),
        })
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
