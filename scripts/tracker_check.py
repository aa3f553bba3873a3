"""Read a run's tracker outputs back with each tracker's own reader and compare them
with the run's steps table as pyarrow reads it (pipeline/track's tests).

  tracker_check.py RUN_DIR [--tensorboard LOGDIR] [--mlflow URI RUN_ID]
                           [--wandb DIR RUN_ID] [--volatile] [--timing LOG]

Readers: TensorBoard's EventAccumulator (every scalar kept: size_guidance 0),
mlflow.tracking.MlflowClient against the tracking server, and for W&B the run's
offline .wandb files parsed with wandb's own Record proto (the reader in
pipeline/track/wandb_sidecar.py; wandb ships none).

Each steps column but step and phase is a metric named train/<column>, or
time/<rest> for time_<rest>. For every tracker and every steps row, each non-null
column must be there exactly once at the row's step, equal to the table's value
(TensorBoard stores float32: equal after rounding to float32), and the tracker
must hold no other step. --volatile compares only presence for the wall-time
columns (elapsed_s, tokens_per_s, time_*), which a resumed run recomputes.

--timing checks the steps' time breakdown against the run's log (LOG: its stderr at
info level): in every row each part is >= 0 and the parts (time_*_s, the remainder
included) sum to elapsed_s within 1%; and the rows' elapsed_s, which tile the loop,
add up to the time between the first and the last step's log line (slog's own
clock) within 1%. It reports the remainder's share of the steps' time.

Prints a JSON report; exits 1 on any mismatch.
"""
import argparse
import datetime
import importlib.util
import json
import math
import os
import re
import sys
from collections import defaultdict

import numpy as np
import pyarrow.dataset as ds

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tag(column):
    return "time/" + column[5:] if column.startswith("time_") else "train/" + column


def volatile(column):
    return column in ("elapsed_s", "tokens_per_s") or column.startswith("time_")


def steps_table(run):
    t = ds.dataset(os.path.join(run, "steps"), format="parquet", partitioning="hive").to_table()
    rows = t.to_pylist()
    rows.sort(key=lambda r: r["step"])
    return rows


def tensorboard(logdir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ea = EventAccumulator(logdir, size_guidance={"scalars": 0, "tensors": 0})
    ea.Reload()
    series = defaultdict(list)
    for t in ea.Tags()["scalars"]:
        for e in ea.Scalars(t):
            series[t].append((e.step, e.value))
    try:
        text_tags = ea.PluginTagToContent("text")
    except KeyError:
        text_tags = {}
    texts = {t: [(e.step, e.tensor_proto.string_val[0].decode()) for e in ea.Tensors(t)] for t in text_tags}
    try:
        hp = ea.PluginTagToContent("hparams")
    except KeyError:
        hp = {}
    extra = {"texts": {t: len(v) for t, v in texts.items()}, "hparams_tags": sorted(hp)}
    if "_hparams_/session_start_info" in hp:
        from tensorboard.plugins.hparams import metadata

        info = metadata.parse_session_start_info_plugin_data(hp["_hparams_/session_start_info"])
        extra["hparams"] = {k: json.loads(json.dumps(str(v))) for k, v in info.hparams.items()}
    if "evolm/checkpoints" in texts:
        extra["checkpoints"] = texts["evolm/checkpoints"]
    return series, extra


def mlflow(uri, run_id):
    from mlflow.tracking import MlflowClient

    c = MlflowClient(tracking_uri=uri)
    run = c.get_run(run_id)
    series = {k: [(m.step, m.value) for m in c.get_metric_history(run_id, k)] for k in run.data.metrics}
    extra = {"status": run.info.status, "params": len(run.data.params),
             "evolm_tags": {k: v for k, v in run.data.tags.items() if k.startswith("evolm.")}}
    return series, extra


def wandb(root, run_id):
    spec = importlib.util.spec_from_file_location("wandb_sidecar", os.path.join(ROOT, "pipeline", "track", "wandb_sidecar.py"))
    sidecar = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sidecar)
    series = defaultdict(list)
    files = sidecar.run_files(root, run_id)
    config, exits = {}, []
    for path in files:
        for r in sidecar.records(path):
            kind = r.WhichOneof("record_type")
            if kind == "history":
                row = {(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in r.history.item}
                for k, v in row.items():
                    if not k.startswith("_"):
                        series[k].append((row["_step"], v))
            elif kind == "run":
                config.update({i.key: json.loads(i.value_json) for i in r.run.config.update})
            elif kind == "config":
                config.update({(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in r.config.update})
            elif kind == "exit":
                exits.append(r.exit.exit_code)
    return series, {"files": len(files), "config_keys": len(config), "evolm.version": config.get("evolm.version"), "exit_codes": exits}


def as_float(v):
    if isinstance(v, str):  # W&B's JSON for non-finite values
        return float(v.replace("Infinity", "inf"))
    return float(v)


def same(want, got, f32):
    got = as_float(got)
    if f32:
        want = float(np.float32(want))
    if math.isnan(want):
        return math.isnan(got)
    return want == got


def compare(rows, series, f32, loose):
    problems = []
    want_steps = {r["step"] for r in rows}
    columns = [c for c in rows[0] if c not in ("step", "phase")] if rows else []
    by_tag = {t: defaultdict(list) for t in series}
    for t, pts in series.items():
        for step, v in pts:
            by_tag[t][step].append(v)
    values = 0
    for r in rows:
        for c in columns:
            t = tag(c)
            got = by_tag.get(t, {}).get(r["step"], [])
            if r[c] is None:
                if got:
                    problems.append(f"{t} step {r['step']}: null in the steps table, {got} in the tracker")
                continue
            if len(got) != 1:
                problems.append(f"{t} step {r['step']}: {len(got)} values {got[:4]}, want 1 ({r[c]})")
                continue
            values += 1
            if not (loose and volatile(c)) and not same(r[c], got[0], f32):
                problems.append(f"{t} step {r['step']}: tracker {got[0]!r}, steps table {r[c]!r}")
    for t, per in by_tag.items():
        for step in per:
            if step not in want_steps:
                problems.append(f"{t}: step {step} is not in the steps table")
    return {"steps": len(rows), "tags": len(series), "values": values, "problems": problems[:50], "n_problems": len(problems)}


def timing(rows, log):
    problems = []
    parts = [c for c in rows[0] if c.startswith("time_")] if rows else []
    for r in rows:
        total = sum(r[c] for c in parts)
        if any(r[c] < -1e-9 for c in parts):
            problems.append(f"step {r['step']}: a negative part {[(c, r[c]) for c in parts if r[c] < 0]}")
        if abs(total - r["elapsed_s"]) > 0.01 * r["elapsed_s"]:
            problems.append(f"step {r['step']}: parts sum to {total}, elapsed_s {r['elapsed_s']}")
    stamps = {}
    for line in open(log):
        m = re.search(r"^time=(\S+) level=INFO msg=step .*? step=(\d+) ", line)
        if m:
            stamps[int(m.group(2))] = datetime.datetime.fromisoformat(m.group(1).replace("Z", "+00:00")).timestamp()
    steps = [r["step"] for r in rows]
    if sorted(stamps) != steps:
        problems.append(f"the log has step lines {sorted(stamps)}, the steps table {steps}")
        wall = tiled = 0.0
    else:
        wall = stamps[steps[-1]] - stamps[steps[0]]
        tiled = sum(r["elapsed_s"] for r in rows[1:])
        if abs(wall - tiled) > 0.01 * wall:
            problems.append(f"steps 1..{steps[-1]}: elapsed_s adds up to {tiled:.3f} s, the log's clock says {wall:.3f} s")
    el = sum(r["elapsed_s"] for r in rows)
    other = sum(r["time_other_s"] for r in rows)
    return {"steps": len(rows), "problems": problems, "n_problems": len(problems), "log_wall_s": wall, "tiled_s": tiled,
            "elapsed_s": el, "other_s": other, "other_share": other / el if el else 0,
            "max_other_share": max((r["time_other_s"] / r["elapsed_s"] for r in rows if r["elapsed_s"]), default=0),
            "parts_s": {c[5:-2]: sum(r[c] for r in rows) for c in parts}}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run")
    ap.add_argument("--tensorboard")
    ap.add_argument("--mlflow", nargs=2)
    ap.add_argument("--wandb", nargs=2)
    ap.add_argument("--volatile", action="store_true")
    ap.add_argument("--timing")
    a = ap.parse_args()
    rows = steps_table(a.run)
    report = {}
    if a.tensorboard:
        s, extra = tensorboard(a.tensorboard)
        report["tensorboard"] = {**compare(rows, s, True, a.volatile), **extra}
    if a.mlflow:
        s, extra = mlflow(*a.mlflow)
        report["mlflow"] = {**compare(rows, s, False, a.volatile), **extra}
    if a.wandb:
        s, extra = wandb(*a.wandb)
        report["wandb"] = {**compare(rows, s, False, a.volatile), **extra}
    if a.timing:
        report["timing"] = timing(rows, a.timing)
    print(json.dumps(report, indent=1, default=str))
    return 1 if any(r["n_problems"] for r in report.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
