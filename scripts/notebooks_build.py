"""Writes the notebooks in notebooks/ from the cell sources below, so that the
.ipynb JSON stays reviewable: edit here, run `python scripts/notebooks_build.py`,
commit both. Each notebook reads an exported run: RUN_DIR in its parameters
cell (overridden by the EVOLM_RUN_DIR env var), figures saved as PNG to
FIG_DIR (default RUN_DIR/figures, overridden by EVOLM_FIG_DIR).
"""
import json
import os
import sys

PARAMS = '''# Parameters: the run directory (after `evolm export`, `evolm analyze rubrics`
# and `evolm eval`); the env vars override them, e.g. for a headless run.
import os
RUN_DIR = "runs/demo"
RUN_DIR = os.environ.get("EVOLM_RUN_DIR", RUN_DIR)
FIG_DIR = os.environ.get("EVOLM_FIG_DIR", os.path.join(RUN_DIR, "figures"))'''

COMMON = '''import glob
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

os.makedirs(FIG_DIR, exist_ok=True)


def read_table(name, hint):
    """Reads every shard of a run table; a missing table is an error saying what to run."""
    files = sorted(f for f in glob.glob(os.path.join(RUN_DIR, name, "*.parquet")) if not os.path.basename(f).startswith("."))
    if not files:
        raise FileNotFoundError(f"{RUN_DIR}: no {name} table; run `{hint}` first")
    return pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)


def save(fig, name):
    path = os.path.join(FIG_DIR, name)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    print("wrote", path)'''

NOTEBOOKS = {
    "training.ipynb": [
        ("markdown", "# Training curves\n\nReward and KL per step, per phase, per-strategy statistics of the rubric-phase preference pairs, and where each step's time went. Reads `export_steps` and `export_pairs` (`evolm export`)."),
        ("code", PARAMS),
        ("code", COMMON),
        ("code", '''steps = read_table("export_steps", "evolm export")
steps = steps.sort_values(["step", "phase"])
steps[["step", "phase", "reward_mean", "reward_std", "kl", "loss", "grad_norm"]].tail(10)'''),
        ("code", '''fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
for phase, g in steps.groupby("phase"):
    axes[0].plot(g["step"], g["reward_mean"], marker="o", ms=3, label=phase)
    axes[1].plot(g["step"], g["kl"], marker="o", ms=3, label=phase)
axes[0].set(title="mean reward per step", xlabel="step", ylabel="reward")
axes[1].set(title="KL to the reference (k3)", xlabel="step", ylabel="KL")
for ax in axes:
    ax.legend(title="phase")
    ax.grid(alpha=0.3)
save(fig, "reward_kl.png")'''),
        ("code", '''pairs = read_table("export_pairs", "evolm export")
by = pairs.groupby("strategy").agg(
    pairs=("pair_id", "nunique"),
    judged=("margin", "count"),
    mean_margin=("margin", "mean"),
    discriminative_acc=("margin", lambda m: (m.dropna() > 0).mean()),
)
by'''),
        ("code", '''per_step = pairs.dropna(subset=["margin"]).groupby(["step", "strategy"])["margin"].mean().unstack()
fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
per_step.plot(ax=axes[0], marker="o", ms=3)
axes[0].set(title="mean margin s(a+) - s(a-) per strategy", xlabel="step", ylabel="margin")
axes[0].axhline(0, color="grey", lw=0.8)
by["discriminative_acc"].plot.bar(ax=axes[1], color="tab:green")
axes[1].set(title="share of pairs with s(a+) > s(a-)", ylabel="share", ylim=(0, 1))
for ax in axes:
    ax.grid(alpha=0.3)
save(fig, "pair_strategies.png")'''),
        ("markdown", "## Where each step's time went\n\nThe steps table's time breakdown (`time_*_s`): the trained role's generation, rubric sampling, judging, the reference's log-probs, the learner (forward/backward and optimizer), the fleet's weight sync, Parquet writes and commits, checkpoints, and the remainder, the loop's own overhead. A step's parts sum to its `elapsed_s`, the time since the previous step's row was complete, so the previous row's write and a checkpoint written after it count in the next step."),
        ("code", '''parts = ["generation", "rubrics", "judge", "ref_logprobs", "learner", "weight_sync", "writes", "checkpoint", "other"]
cols = [f"time_{p}_s" for p in parts]
tb = steps.drop_duplicates("step").set_index("step")[cols].rename(columns=dict(zip(cols, parts)))
if tb.to_numpy().sum() == 0:
    print("this run's steps table predates the time breakdown (steps version 4): nothing to plot")
else:
    colors = plt.cm.tab10.colors[:len(parts)]
    fig, axes = plt.subplots(1, 2, figsize=(12, 3.8), gridspec_kw={"width_ratios": [3, 1]})
    axes[0].stackplot(tb.index, tb.T.to_numpy(), labels=parts, colors=colors, step="mid")
    axes[0].set(title="where each step's time went (stacked)", xlabel="step", ylabel="seconds")
    axes[0].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    share = tb.sum() / tb.to_numpy().sum()
    share.plot.barh(ax=axes[1], color=colors)
    axes[1].set(title="share of the steps' time", xlabel="share")
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.tight_layout()
    save(fig, "time_breakdown.png")
    print(f"remainder (the loop's own overhead): {share['other']:.3%} of the steps' time; "
          f"largest in one step: {(tb['other'] / tb.sum(axis=1)).max():.3%}")'''),
    ],
    "rubric_evolution.ipynb": [
        ("markdown", "# Rubric evolution\n\nHow the rubrics change over training (docs/design.md): abstract labels, concrete expected values, constraints, criteria per rubric, criterion length and weight concentration. Reads `rubric_stats` (`evolm analyze rubrics`)."),
        ("code", PARAMS),
        ("code", COMMON),
        ("code", '''stats = read_table("rubric_stats", "evolm analyze rubrics").sort_values(["step", "phase"])
stats'''),
        ("code", '''fig, axes = plt.subplots(1, 3, figsize=(15, 3.8))
for col, label in [("abstract_share", "abstract labels"), ("concrete_share", "concrete values"), ("constraint_share", "constraints")]:
    axes[0].plot(stats["step"], 100 * stats[col], marker="o", ms=3, label=label)
axes[0].set(title="criteria by class (%)", xlabel="step", ylabel="% of criteria")
axes[0].legend()
axes[1].plot(stats["step"], stats["mean_criterion_chars"], marker="o", ms=3, color="tab:purple")
axes[1].set(title="mean criterion length", xlabel="step", ylabel="characters")
axes[2].plot(stats["step"], stats["criteria_per_rubric"], marker="o", ms=3, label="criteria / rubric")
ax2 = axes[2].twinx()
ax2.plot(stats["step"], 100 * stats["weight_concentration"], marker="s", ms=3, color="tab:red", label="one weight >= 0.5 (%)")
axes[2].set(title="rubric shape", xlabel="step", ylabel="criteria per rubric")
ax2.set_ylabel("% of rubrics")
h1, l1 = axes[2].get_legend_handles_labels()
h2, l2 = ax2.get_legend_handles_labels()
axes[2].legend(h1 + h2, l1 + l2, fontsize=8)
for ax in axes:
    ax.grid(alpha=0.3)
save(fig, "rubric_evolution.png")'''),
        ("code", '''fig, ax = plt.subplots(figsize=(6, 3.5))
ax.plot(stats["step"], 100 * stats["format_rate"], marker="o", ms=3)
ax.set(title="R_format rate", xlabel="step", ylabel="% of rubrics", ylim=(0, 105))
ax.grid(alpha=0.3)
save(fig, "format_rate.png")'''),
    ],
    "eval.ipynb": [
        ("markdown", "# Benchmark evaluation\n\nAccuracy per subset with bootstrap confidence intervals, from `eval_results` (`evolm eval`), and the per-item results in `eval_items`.\n\n"
         "`make demo` does not run `evolm eval`: its models are random tiny checkpoints, whose scores on a benchmark would be noise. "
         "On a run without `eval_results` this notebook says so and skips its cells. To fill it, evaluate the rubric generator and judge on a benchmark, e.g. "
         "`evolm eval --run-dir runs/demo --benchmark rewardbench2 --input data/reward-bench-2/data` (README, \"Subcommands\" and \"Getting data and weights\")."),
        ("code", PARAMS),
        ("code", COMMON),
        ("code", '''HAVE_EVAL = bool(glob.glob(os.path.join(RUN_DIR, "eval_results", "*.parquet")))
if not HAVE_EVAL:
    print(f"{RUN_DIR} has no eval_results table: `evolm eval` has not run on it (make demo does not run it).")
    print(f"Run e.g. `evolm eval --run-dir {RUN_DIR} --benchmark rewardbench2 --input data/reward-bench-2/data`; skipping the cells below.")
else:
    res = read_table("eval_results", "evolm eval")
    table = res.assign(score=100 * res["score"], ci_low=100 * res["ci_low"], ci_high=100 * res["ci_high"])
    display(table[["benchmark", "subset", "metric", "n", "coverage", "score", "ci_low", "ci_high"]].round(3))'''),
        ("code", '''if HAVE_EVAL:
    benches = list(res["benchmark"].unique())
    fig, axes = plt.subplots(1, len(benches), figsize=(6 * len(benches), 3.8), squeeze=False)
    for ax, bench in zip(axes[0], benches):
        r = res[res["benchmark"] == bench].reset_index(drop=True)
        lo = (r["score"] - r["ci_low"]).clip(lower=0)
        hi = (r["ci_high"] - r["score"]).clip(lower=0)
        ax.bar(r["subset"], 100 * r["score"], yerr=[100 * lo, 100 * hi], capsize=3,
               color=["tab:orange" if s == "overall" else "tab:blue" for s in r["subset"]])
        ax.set(title=f"{bench} (95% bootstrap CI)", ylabel="score (%)", ylim=(0, 100))
        ax.tick_params(axis="x", rotation=30)
        ax.grid(alpha=0.3, axis="y")
    save(fig, "eval_scores.png")'''),
        ("code", '''if HAVE_EVAL:
    items = read_table("eval_items", "evolm eval")
    display(items.groupby(["benchmark", "subset"])["result"].agg(["count", "mean"]))'''),
    ],
}


def cell(kind, src):
    lines = src.splitlines(keepends=True)
    c = {"cell_type": kind, "metadata": {}, "source": lines}
    if kind == "code":
        c.update({"execution_count": None, "outputs": []})
    return c


def main(out_dir):
    for name, cells in NOTEBOOKS.items():
        nb = {
            "cells": [cell(k, s) for k, s in cells],
            "metadata": {
                "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                "language_info": {"name": "python"},
            },
            "nbformat": 4,
            "nbformat_minor": 5,
        }
        for i, c in enumerate(nb["cells"]):
            c["id"] = f"{os.path.splitext(name)[0]}-{i}"
        # The parameters cell, as papermill tags it.
        nb["cells"][1]["metadata"]["tags"] = ["parameters"]
        with open(os.path.join(out_dir, name), "w") as f:
            json.dump(nb, f, indent=1)
            f.write("\n")
        print("wrote", os.path.join(out_dir, name))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "notebooks"))
