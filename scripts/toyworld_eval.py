"""Held-out evaluation of a toyworld policy/rubric generator and judge (make toyworld).

Usage: toyworld_eval.py --evolm BIN --data DIR --policy DIR --judge DIR --out DIR [--seed N] [--samples N]

It runs evolm's own stages on the held-out questions of datasets/toyworld and
prints one JSON object:

  accuracy         exact-match accuracy of the policy's answers sampled as the preset samples them
                   (temperature 1.0, `samples` per question), over every sample
  accuracy_greedy  the same at temperature 0, one answer per question
  margin           the judge's score of the right answer minus its score of a distractor, both judged
                   under the rubric the rubric generator wrote for the question (evolm eval,
                   benchmark pairwise), averaged over the questions
  margin_win       the share of questions where the right answer scores strictly higher
  rformat          the share of those rubrics that pass R_format
  rubric_states_answer  the share of those rubrics whose dealbreaker names the right answer

The config is stages/presets/toyworld.yaml with the two models put in.
"""

import argparse
import glob
import json
import math
import os
import subprocess
import sys

import pyarrow.parquet as pq
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(evolm, cfg_path, run_dir, stage):
    cmd = [evolm, "--config", cfg_path, "--run-dir", run_dir, "--progress", "off", "--fresh", stage]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if p.returncode != 0:
        sys.stderr.write(p.stdout + p.stderr)
        raise SystemExit(f"toyworld_eval: {' '.join(cmd)} failed ({p.returncode})")


def table(run_dir, name):
    files = sorted(glob.glob(os.path.join(run_dir, name, "**", "*.parquet"), recursive=True))
    if not files:
        raise SystemExit(f"toyworld_eval: no {name} table under {run_dir}")
    rows = []
    for f in files:
        rows.extend(pq.read_table(f).to_pylist())
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--evolm", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--policy", required=True)
    ap.add_argument("--judge", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    cfg = yaml.safe_load(open(os.path.join(ROOT, "stages/presets/toyworld.yaml")))
    cfg["roles"]["policy"]["model"] = os.path.abspath(a.policy)
    cfg["roles"]["judge"]["model"] = os.path.abspath(a.judge)
    if a.threads:
        cfg["roles"]["policy"]["threads"] = a.threads
        cfg["roles"]["judge"]["threads"] = a.threads
    data = os.path.abspath(a.data)
    cfg["stages"] = {
        "rollout": {"input": [os.path.join(data, "heldout_prompts.parquet")], "n": a.samples, "seed": a.seed},
        "eval": {"benchmark": "pairwise", "input": [os.path.join(data, "heldout_pairs.jsonl")], "seed": a.seed,
                 "min_coverage": 0},
    }
    sampled = os.path.join(a.out, "config.yaml")
    yaml.safe_dump(cfg, open(sampled, "w"))
    cfg_g = json.loads(json.dumps(cfg))
    cfg_g["roles"]["policy"]["temperature"] = 0.0
    cfg_g["stages"]["rollout"]["n"] = 1
    greedy = os.path.join(a.out, "config_greedy.yaml")
    yaml.safe_dump(cfg_g, open(greedy, "w"))

    answers = {}
    for line in open(os.path.join(data, "heldout.jsonl")):
        r = json.loads(line)
        answers[r["question"]] = r["answer"]
    prompt_text = {r["prompt_id"]: r["prompt"] for r in pq.read_table(os.path.join(data, "heldout_prompts.parquet")).to_pylist()}

    def accuracy(cfg_path, name):
        d = os.path.abspath(os.path.join(a.out, name))
        run(a.evolm, cfg_path, d, "rollout")
        rows = table(d, "rollouts")
        ok = [r["text"].strip() == answers[prompt_text[r["prompt_id"]]] for r in rows]
        return sum(ok) / len(ok), len(ok)

    acc, n_acc = accuracy(sampled, "rollout")
    acc_g, _ = accuracy(greedy, "rollout_greedy")

    d = os.path.abspath(os.path.join(a.out, "eval"))
    run(a.evolm, sampled, d, "eval")
    items = table(d, "eval_items")
    margins = []
    for it in items:
        s = it["scores"]
        if s[0] is None or s[1] is None or any(math.isnan(x) for x in s):
            continue
        margins.append(s[0] - s[1])
    rubrics = table(d, "eval_rubrics")
    fmt = [bool(r["format_ok"]) for r in rubrics]
    pairs = {json.loads(l)["id"]: json.loads(l) for l in open(os.path.join(data, "heldout_pairs.jsonl"))}
    states = []
    for r in rubrics:
        item = pairs.get(r["item_id"].split("/", 1)[-1])  # eval's request id: pw/<item id>
        if item is not None:
            states.append(f"The answer is {item['chosen']}." in r["raw_text"])
    out = {
        "accuracy": round(acc, 4),
        "accuracy_greedy": round(acc_g, 4),
        "margin": round(sum(margins) / max(1, len(margins)), 4),
        "margin_win": round(sum(m > 0 for m in margins) / max(1, len(margins)), 4),
        "rformat": round(sum(fmt) / max(1, len(fmt)), 4),
        "rubric_states_answer": round(sum(states) / max(1, len(states)), 4) if states else None,
        "questions": len(answers),
        "samples": n_acc,
        "judged_pairs": len(margins),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
