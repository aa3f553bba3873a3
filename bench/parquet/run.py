"""Side-by-side Parquet benchmark: evolm (Go, pqarrow) against pyarrow.

usage: python bench/parquet/run.py [--rows 1000000] [--runs 3] [--dir DIR]
(or bench/parquet/run.sh, which builds the Go side and uses the project venv)

Both sides take the same 1M-row rollouts-like table (generated once by the Go
side: ids, 16-96-word completions with per-token ids and log-probs, sampling
settings), hold it in memory, write it with zstd level 3, dictionary encoding,
statistics and 131072-row row groups, and read their file back. evolm writes
through pipeline.CreateShard, the writer every stage uses (its dictionary
page limit is 2 MiB, pyarrow's default 1 MiB; it encodes columns on all cores,
pyarrow's write_table on one, so compare the wall and the CPU ratios). Each of --runs runs writes and
reads once per side, in a fresh process per side, the two sides alternating
which goes first; each side reads the other's file too, as a check. Prints
the median wall and CPU seconds and rows/s, the evolm/pyarrow throughput
ratios (>1: we are faster) as min / median / max over the runs, the load
average before and after, and the peak RSS of each process.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import pyarrow as pa
import pyarrow.parquet as pq


def timed(fn):
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def pyarrow_side(src, out):
    table = pq.read_table(src)
    res = {"rows": table.num_rows, "mem_bytes": table.nbytes}
    _, w, c = timed(lambda: pq.write_table(table, out, compression="zstd", compression_level=3,
                                            use_dictionary=True, write_statistics=True, row_group_size=131072))
    res["write"] = {"wall_s": w, "cpu_s": c}
    t, w, c = timed(lambda: pq.read_table(out))
    assert t.num_rows == table.num_rows
    del t
    res["read"] = {"wall_s": w, "cpu_s": c}
    res["file_bytes"] = os.path.getsize(out)
    res["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return res


def mmm(xs):
    xs = sorted(xs)
    return "%.2f / %.2f / %.2f" % (xs[0], statistics.median(xs), xs[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3, help="side-by-side runs; ratios are shown as min / median / max")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--go-bin", default=os.environ.get("PARQUET_BENCH_BIN", "parquet-bench"))
    a = ap.parse_args()
    if a.runs < 1:
        ap.error("--runs must be at least 1")
    d = a.dir or tempfile.mkdtemp(prefix="parquet-bench-")
    src = os.path.join(d, "src.parquet")
    gofile, pyfile = os.path.join(d, "go.parquet"), os.path.join(d, "pyarrow.parquet")
    subprocess.run([a.go_bin, "gen", "-rows", str(a.rows), "-out", src], check=True)

    def go_side():
        return json.loads(subprocess.run([a.go_bin, "bench", "-in", src, "-dir", d, "-iters", "1"],
                                         check=True, capture_output=True, text=True).stdout)

    def py_side():
        # pyarrow runs in a child so that its peak RSS is its own.
        return json.loads(subprocess.run([sys.executable, __file__, "--pyarrow-side", src, pyfile],
                                         check=True, capture_output=True, text=True).stdout)

    load0 = os.getloadavg()
    runs = []
    for k in range(a.runs):
        if k % 2 == 0:
            go = go_side()
            py = py_side()
        else:
            py = py_side()
            go = go_side()
        runs.append((go, py))
    load1 = os.getloadavg()
    go, py = runs[-1]
    # Streaming: a fresh process that only reads pyarrow's file batch by batch.
    stream = json.loads(subprocess.run([a.go_bin, "read", "-in", pyfile],
                                       check=True, capture_output=True, text=True).stdout)
    assert stream["rows"] == go["rows"], "evolm read a different row count from pyarrow's file"
    # Cross-read: pyarrow reads our file and finds the same data as its own.
    assert pq.read_metadata(gofile).num_rows == go["rows"]
    assert pq.read_table(gofile).equals(pq.read_table(pyfile).cast(pq.read_schema(gofile))), "the two files hold different data"

    n = go["rows"]
    mb = 1 << 20
    med = lambda xs: statistics.median(xs)
    print(f"table: {n:,} rows, {go['mem_bytes'] / mb:.0f} MiB in Arrow memory (pyarrow counts {py['mem_bytes'] / mb:.0f} MiB)")
    print(f"files: evolm {go['file_bytes'] / mb:.1f} MiB, pyarrow {py['file_bytes'] / mb:.1f} MiB (zstd 3)")
    print(f"{a.runs} runs, sides alternating; load average (1, 5, 15 min): before %.2f %.2f %.2f, after %.2f %.2f %.2f" % (*load0, *load1))
    print(f"{'median of runs':16}{'evolm wall':>11}{'cpu':>8}{'rows/s':>12}{'pyarrow wall':>14}{'cpu':>8}{'rows/s':>12}"
          f"{'ratio wall min / med / max':>30}{'ratio cpu min / med / max':>29}")
    for name, gk, pk in [("write", "write", "write"), ("read (serial)", "read_serial", "read"), ("read (parallel)", "read_parallel", "read")]:
        gw, gc = [g[gk]["wall_s"] for g, _ in runs], [g[gk]["cpu_s"] for g, _ in runs]
        pw, pc = [p[pk]["wall_s"] for _, p in runs], [p[pk]["cpu_s"] for _, p in runs]
        print(f"{name:16}{med(gw):>10.2f}s{med(gc):>7.2f}s{n / med(gw):>12,.0f}"
              f"{med(pw):>13.2f}s{med(pc):>7.2f}s{n / med(pw):>12,.0f}"
              f"{mmm([p / g for g, p in zip(gw, pw)]):>30}{mmm([p / g for g, p in zip(gc, pc)]):>29}")
    print("ratio = pyarrow time / evolm time, run by run (>1: evolm is faster); pyarrow reads with its thread pool")
    print(f"peak RSS: evolm {max(g['peak_rss_bytes'] for g, _ in runs) / mb:.0f} MiB (table held in memory + write + read), "
          f"pyarrow {max(p['peak_rss_bytes'] for _, p in runs) / mb:.0f} MiB")
    print(f"peak RSS of evolm streaming pyarrow's file in 64Ki-row batches: {stream['peak_rss_bytes'] / mb:.0f} MiB "
          f"({stream['read']['wall_s']:.2f}s wall, {stream['read']['cpu_s']:.2f}s cpu)")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--pyarrow-side":
        print(json.dumps(pyarrow_side(sys.argv[2], sys.argv[3])))
    else:
        main()
