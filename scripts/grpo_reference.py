"""Reference GRPO loss written from the formulas in TRL's GRPOTrainer docs
(compute_loss): ratio, clipped surrogate, k3 KL, and the grpo / dapo / dr_grpo
normalisations. Reads a batch as JSON on argv[1], prints JSON results.

Used by stages/grpo tests: evolm's loss, metrics and gradients must match.
"""
import json
import sys

import torch

torch.set_num_threads(1)


def trl_loss(logps, old_logps, ref_logps, adv, mask, beta, eps_low, eps_high, loss_type, max_len):
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
            logps, old, ref, adv, mask, case["beta"], case["eps"], case["eps_high"], case["norm"], case["max_len"])
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
