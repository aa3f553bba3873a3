#!/usr/bin/env python
"""Side-by-side dedup benchmark: datatrove's MinHash dedup against `evolm dedup`.

One invocation:
  1. builds `evolm` and `gencorpus`, and generates the corpus (--n prompts,
     default 1M, with planted exact and near duplicates; bench/dedup/corpus),
     split over --files Parquet files;
  2. runs datatrove's four MinHash steps (signature, buckets, cluster, filter
     + Parquet writer) with the same parameters as ours: word 5-gram shingles,
     14 bands x 8 hashes, seed 1, numbers not normalized;
  3. runs `evolm dedup` with the same parameters and no Jaccard verification
     (datatrove has none), then again with its default verification;
  4. repeats steps 3 and 2 (ours both ways, then datatrove) --runs times,
     each from a clean work directory;
  5. prints throughput (rows/s, wall clock, each side: the median over the
     runs), the ratio as min / median / max over the runs with the load
     average before and after, peak RSS (the largest over the runs)
     (of `evolm dedup`, whose binary links libtorch, and of the same stage in
     bench/dedup/dedupcmd, which does not),
     and cluster agreement with datatrove: precision/recall of our removed
     rows against datatrove's, pairwise same-cluster precision/recall, and
     both against the planted ground truth.

datatrove's English word tokenizer is NLTK's punkt, which needs data files
that a clean machine does not have; after datatrove's simplify_text (lower
case, punctuation removed) NLTK's word_tokenize splits this corpus exactly at
whitespace, so a whitespace tokenizer is registered for "en". datatrove's
default shingle hash is xxhash (used when the xxhash package is installed,
else sha1, which is slower; the output says which).

usage: .venv/bin/python bench/dedup/bench_dedup.py [--n 1000000] [--files 2] [--runs 3]
"""

import argparse
import csv
import glob
import hashlib
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import unicodedata
from collections import Counter, defaultdict

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def go_env():
    env = os.environ.copy()
    env.setdefault("GOWORK", os.path.join(ROOT, "build", "go.work"))
    env.setdefault("GOFLAGS", "-overlay=" + os.path.join(ROOT, "build", "overlay.json"))
    env.setdefault("EVOLM_ROOT", ROOT)
    return env


def run_measured(cmd, env=None, quiet=False):
    """Runs cmd; returns (wall seconds, peak RSS in MB of the process or its
    largest waited-for descendant)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL if quiet else None)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        sys.exit(f"command failed ({code}): {' '.join(cmd)}")
    return wall, ru.ru_maxrss / 1024


# --- datatrove ----------------------------------------------------------------


def datatrove_run(corpus_dir, work, workers):
    """The datatrove pipeline (run in its own process so its RSS is its own)."""
    import datatrove.utils.word_tokenizers as wt
    from datatrove.executor.local import LocalPipelineExecutor
    from datatrove.pipeline.dedup.minhash import (
        MinhashConfig,
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
        MinhashDedupSignature,
    )
    from datatrove.pipeline.readers import ParquetReader
    from datatrove.pipeline.writers import ParquetWriter
    from datatrove.utils.hashing import HashConfig
    from datatrove.utils.text import TextNormConfig

    class Whitespace(wt.WordTokenizer):
        def word_tokenize(self, text):
            return text.split()

        def sent_tokenize(self, text):
            return [text]

        def span_tokenize(self, text):
            return [(0, len(text))]

    wt.WORD_TOKENIZER_FACTORY["en"] = Whitespace
    try:
        import xxhash  # noqa: F401

        hash_fc = "xxhash"
    except ImportError:
        hash_fc = "sha1"
    cfg = MinhashConfig(
        n_grams=5,
        num_buckets=14,
        hashes_per_bucket=8,
        seed=1,
        norm_config=TextNormConfig(norm_numbers=False),
        hash_config=HashConfig(precision=64, hash_fc=hash_fc),
    )
    files = len(glob.glob(os.path.join(corpus_dir, "*.parquet")))

    def reader():
        return ParquetReader(corpus_dir, text_key="prompt", id_key="id", glob_pattern="*.parquet")

    def ex(pipeline, tasks, name):
        return LocalPipelineExecutor(
            pipeline,
            tasks=tasks,
            workers=min(workers, tasks),
            logging_dir=os.path.join(work, "logs", name),
            start_method="fork",
        )

    ex([reader(), MinhashDedupSignature(output_folder=os.path.join(work, "sigs"), config=cfg)], files, "1").run()
    ex(
        [MinhashDedupBuckets(input_folder=os.path.join(work, "sigs"), output_folder=os.path.join(work, "buckets"), config=cfg)],
        cfg.num_buckets,
        "2",
    ).run()
    ex(
        [
            MinhashDedupCluster(
                input_folder=os.path.join(work, "buckets"),
                output_folder=os.path.join(work, "remove"),
                config=cfg,
                save_cluster_id=True,
            )
        ],
        1,
        "3",
    ).run()
    ex(
        [
            reader(),
            MinhashDedupFilter(input_folder=os.path.join(work, "remove")),
            ParquetWriter(os.path.join(work, "out"), compression="zstd"),
        ],
        files,
        "4",
    ).run()
    with open(os.path.join(work, "hash_fc"), "w") as f:
        f.write(hash_fc)


def read_u32(path):
    if not os.path.exists(path):
        return []
    data = open(path, "rb").read()
    return list(struct.unpack(f"<{len(data) // 4}I", data))


def datatrove_results(work, offsets):
    """Removed global rows (datatrove's .remove files) and row -> cluster id.

    datatrove's .clusters files leave out a cluster's root when it never
    appears as the second row of a duplicate pair, so clusters are rebuilt
    here from its duplicate pairs (the .dups files of the buckets step) with
    the same union-find its cluster step runs."""
    removed = set()
    for rank, off in enumerate(offsets):
        removed.update(off + d for d in read_u32(os.path.join(work, "remove", f"{rank:06d}.remove")))
    parent = {}

    def find(x):
        root = x
        while parent.get(root, root) != root:
            root = parent[root]
        while x != root:
            parent[x], x = root, parent[x]
        return root

    for path in glob.glob(os.path.join(work, "buckets", "*.dups")):
        v = read_u32(path)
        for f1, d1, f2, d2 in zip(v[0::4], v[1::4], v[2::4], v[3::4]):
            a, b = offsets[f1] + d1, offsets[f2] + d2
            ra, rb = find(a), find(b)
            if ra != rb:
                parent[rb] = ra
            parent.setdefault(ra, ra)
    cluster = {x: find(x) for x in list(parent)}
    return removed, cluster


# --- ours -----------------------------------------------------------------------


def prompt_id(s):
    """evolm's prompt_id: NFKC, case fold, NFKC, whitespace collapse, sha256[:16]."""
    n = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", s).casefold())
    return hashlib.sha256(" ".join(n.split()).encode()).hexdigest()[:32]


def ours_results(run_dir, prompts, ids):
    import pyarrow.parquet as pq

    kept = set()
    for p in sorted(glob.glob(os.path.join(run_dir, "prompts", "*.parquet"))):
        kept.update(pq.read_table(p, columns=["source_id"])["source_id"].to_pylist())
    removed = {i for i, x in enumerate(ids) if x not in kept}
    rep = pq.read_table(os.path.join(run_dir, "dedup_report", "part-00000.parquet")).to_pylist()
    by_pid = {}
    for c in rep:
        by_pid[c["kept_id"]] = c["cluster_id"]
        for r in c["removed_ids"]:
            by_pid[r] = c["cluster_id"]
    cluster = {}
    for i, p in enumerate(prompts):
        c = by_pid.get(prompt_id(p))
        if c is not None:
            cluster[i] = c
    return removed, cluster


# --- agreement --------------------------------------------------------------------


def pairs(n):
    return n * (n - 1) // 2


def pairwise(a, b):
    """Same-cluster pair precision/recall of clustering a against b (rows
    outside any cluster are singletons)."""
    both = Counter((a[r], b[r]) for r in a.keys() & b.keys())
    tp = sum(pairs(v) for v in both.values())
    pa = sum(pairs(v) for v in Counter(a.values()).values())
    pb = sum(pairs(v) for v in Counter(b.values()).values())
    return tp / pa if pa else 1.0, tp / pb if pb else 1.0


def set_pr(got, ref):
    inter = len(got & ref)
    return inter / len(got) if got else 1.0, inter / len(ref) if ref else 1.0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1_000_000, help="prompts in the corpus")
    ap.add_argument("--files", type=int, default=2, help="Parquet files (datatrove parallelizes over files)")
    ap.add_argument("--workers", type=int, default=os.cpu_count(), help="datatrove workers")
    ap.add_argument("--work", default=None, help="work directory (default: a temp dir, removed at the end)")
    ap.add_argument("--runs", type=int, default=3, help="timed runs of each side; the ratio is shown as min / median / max")
    ap.add_argument("--json", default=None, help="also write the figures as JSON here")
    ap.add_argument("--datatrove-run", nargs=3, metavar=("CORPUS", "WORK", "WORKERS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.datatrove_run:
        datatrove_run(args.datatrove_run[0], args.datatrove_run[1], int(args.datatrove_run[2]))
        return

    import pyarrow.parquet as pq

    work = args.work or tempfile.mkdtemp(prefix="bench_dedup_")
    os.makedirs(work, exist_ok=True)
    env = go_env()
    bin_dir = os.path.join(work, "bin")
    for name, pkg in [("evolm", "./cmd/evolm"), ("gencorpus", "./bench/dedup/gencorpus"), ("dedupcmd", "./bench/dedup/dedupcmd")]:
        subprocess.run(["go", "build", "-o", os.path.join(bin_dir, name), pkg], cwd=ROOT, env=env, check=True)

    corpus = os.path.join(work, "corpus")
    truth_csv = os.path.join(work, "truth.csv")
    t0 = time.perf_counter()
    subprocess.run(
        [os.path.join(bin_dir, "gencorpus"), "-n", str(args.n), "-files", str(args.files), "-out", corpus, "-truth", truth_csv],
        check=True,
    )
    print(f"corpus: {args.n} prompts in {args.files} files, generated in {time.perf_counter() - t0:.1f}s", flush=True)

    files = sorted(glob.glob(os.path.join(corpus, "*.parquet")))
    prompts, ids, offsets = [], [], []
    for f in files:
        offsets.append(len(prompts))
        t = pq.read_table(f, columns=["id", "prompt"])
        ids += t["id"].to_pylist()
        prompts += t["prompt"].to_pylist()
    planted = set()
    with open(truth_csv) as f:
        for row in csv.DictReader(f):
            planted.add(int(row["row"]))

    results = {"n": args.n, "files": args.files, "cpus": os.cpu_count()}
    # The evolm binary links libtorch for its model commands; its resident
    # size before any work is the floor under every evolm figure.
    _, base_rss = run_measured([os.path.join(bin_dir, "evolm"), "stages"], env, quiet=True)
    results["evolm_baseline_rss_mb"] = base_rss
    print(f"evolm baseline RSS (libtorch linked, `evolm stages`): {base_rss:.0f} MB", flush=True)

    # --runs times: ours, LSH only (datatrove's parameters), then with
    # verification, then datatrove, each from a clean directory.
    load0 = os.getloadavg()
    runs, walls = {}, {"ours": [], "ours_verified": [], "datatrove": []}
    dt_work = os.path.join(work, "datatrove")
    for r in range(args.runs):
        if args.runs > 1:
            print(f"run {r + 1} of {args.runs}", flush=True)
        for label, extra in [("ours", ["--verify=false"]), ("ours_verified", [])]:
            run_dir = os.path.join(work, label)
            shutil.rmtree(run_dir, ignore_errors=True)
            cmd = [
                os.path.join(bin_dir, "evolm"), "dedup", "--input", corpus, "--run-dir", run_dir,
                "--messages=false", "--progress", "off", "--log-level", "warn", *extra,
            ]  # fmt: skip
            wall, run_rss = run_measured(cmd, env)
            removed, cluster = ours_results(run_dir, prompts, ids)
            if label in runs and runs[label][0] != removed:
                sys.exit(f"{label}: run {r + 1} removed other rows than run 1")
            runs[label] = (removed, cluster)
            walls[label].append(wall)
            prev = results.get(label, {})
            rss = max(run_rss, prev.get("peak_rss_mb", 0))
            results[label] = {
                "wall_s": statistics.median(walls[label]), "rows_per_s": args.n / statistics.median(walls[label]),
                "walls_s": walls[label], "peak_rss_mb": rss,
                "peak_rss_above_baseline_mb": rss - base_rss, "removed": len(removed),
            }  # fmt: skip
            print(f"{label}: {wall:.1f}s, {args.n / wall:,.0f} rows/s, peak RSS {run_rss:.0f} MB "
                  f"({run_rss - base_rss:.0f} MB above the binary's baseline), removed {len(removed)}", flush=True)  # fmt: skip

        if r == 0:
            # The same stage without libtorch linked: its own peak RSS.
            wall, rss = run_measured(
                [os.path.join(bin_dir, "dedupcmd"), "-run-dir", os.path.join(work, "ours_stage"), "input=" + corpus,
                 "verify=false", "messages=false"], env)  # fmt: skip
            stage = {"stage_only_peak_rss_mb": rss, "stage_only_wall_s": wall}
            print(f"ours (stage only, no libtorch linked): {wall:.1f}s, peak RSS {rss:.0f} MB", flush=True)
        results["ours"].update(stage)

        shutil.rmtree(dt_work, ignore_errors=True)
        wall, run_rss = run_measured([sys.executable, os.path.abspath(__file__), "--datatrove-run", corpus, dt_work, str(args.workers)])
        dt_removed, dt_cluster = datatrove_results(dt_work, offsets)
        hash_fc = open(os.path.join(dt_work, "hash_fc")).read()
        walls["datatrove"].append(wall)
        rss = max(run_rss, results.get("datatrove", {}).get("peak_rss_mb", 0))
        results["datatrove"] = {
            "wall_s": statistics.median(walls["datatrove"]), "rows_per_s": args.n / statistics.median(walls["datatrove"]),
            "walls_s": walls["datatrove"], "peak_rss_mb": rss, "removed": len(dt_removed),
            "hash": hash_fc, "workers": args.workers,
        }  # fmt: skip
        print(f"datatrove ({hash_fc}, {args.workers} workers): {wall:.1f}s, {args.n / wall:,.0f} rows/s, "
              f"peak RSS {run_rss:.0f} MB (largest process), removed {len(dt_removed)}", flush=True)  # fmt: skip
    load1 = os.getloadavg()
    results["load_before"], results["load_after"] = load0, load1

    print()
    print(f"{'':28s}{'ours (LSH)':>14s}{'ours (+Jaccard)':>17s}{'datatrove':>12s}")
    for key, fmt in [("rows_per_s", "{:,.0f}"), ("wall_s", "{:.1f}"), ("peak_rss_mb", "{:.0f}"),
                     ("peak_rss_above_baseline_mb", "{:.0f}"), ("stage_only_peak_rss_mb", "{:.0f}"),
                     ("removed", "{}")]:  # fmt: skip
        vals = [fmt.format(results[k][key]) if key in results[k] else "-" for k in ("ours", "ours_verified", "datatrove")]
        print(f"{key:28s}{vals[0]:>14s}{vals[1]:>17s}{vals[2]:>12s}")
    print("\nload average (1, 5, 15 min): before %.2f %.2f %.2f, after %.2f %.2f %.2f; %d runs" % (*load0, *load1, args.runs))
    for label in ("ours", "ours_verified"):
        removed, cluster = runs[label]
        ratios = sorted(d / o for o, d in zip(walls[label], walls["datatrove"]))
        ratio = statistics.median(ratios)
        p, r = set_pr(removed, dt_removed)
        pp, pr = pairwise(cluster, dt_cluster)
        gp, gr = set_pr(removed, planted)
        results[label].update(
            throughput_ratio_vs_datatrove=ratio, throughput_ratios_vs_datatrove=ratios,
            removed_precision_vs_datatrove=p, removed_recall_vs_datatrove=r,
            pair_precision_vs_datatrove=pp, pair_recall_vs_datatrove=pr,
            removed_precision_vs_planted=gp, removed_recall_vs_planted=gr,
        )  # fmt: skip
        print(f"\n{label}: throughput {ratio:.2f}x datatrove (min / median / max over the runs: "
              f"{ratios[0]:.2f}x / {ratio:.2f}x / {ratios[-1]:.2f}x)")
        print(f"  removed rows vs datatrove: precision {p:.4f} recall {r:.4f}")
        print(f"  same-cluster pairs vs datatrove: precision {pp:.4f} recall {pr:.4f}")
        print(f"  removed rows vs planted duplicates: precision {gp:.4f} recall {gr:.4f}")
    gp, gr = set_pr(dt_removed, planted)
    results["datatrove"].update(removed_precision_vs_planted=gp, removed_recall_vs_planted=gr)
    print(f"\ndatatrove: removed rows vs planted duplicates: precision {gp:.4f} recall {gr:.4f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
