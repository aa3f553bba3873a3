"""Side-by-side Parquet benchmark: evolm (Go, pqarrow) against pyarrow.

usage: python bench/parquet/run.py [--rows 1000000] [--iters 3] [--dir DIR]
(or bench/parquet/run.sh, which builds the Go side and uses the project venv)

Both sides take the same 1M-row rollouts-like table (generated once by the Go
side: ids, 16-96-word completions with per-token ids and log-probs, sampling
settings), hold it in memory, write it with zstd level 3, dictionary encoding,
statistics and 131072-row row groups, and read their file back. Each side
reads the other's file too, as a check. Prints best-of-N wall and CPU seconds,
rows/s, the Go/pyarrow throughput ratios (>1: we are faster) and the peak RSS
of each process.
"""
import argparse
import json
import os
import resource
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


def pyarrow_side(src, out, iters):
    table = pq.read_table(src)
    res = {"rows": table.num_rows, "mem_bytes": table.nbytes, "write": {}, "read": {}}
    for _ in range(iters):
        _, w, c = timed(lambda: pq.write_table(table, out, compression="zstd", compression_level=3,
                                                use_dictionary=True, write_statistics=True, row_group_size=131072))
        res["write"] = {"wall_s": min(w, res["write"].get("wall_s", w)), "cpu_s": min(c, res["write"].get("cpu_s", c))}
        t, w, c = timed(lambda: pq.read_table(out))
        assert t.num_rows == table.num_rows
        del t
        res["read"] = {"wall_s": min(w, res["read"].get("wall_s", w)), "cpu_s": min(c, res["read"].get("cpu_s", c))}
    res["file_bytes"] = os.path.getsize(out)
    res["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--go-bin", default=os.environ.get("PARQUET_BENCH_BIN", "parquet-bench"))
    a = ap.parse_args()
    d = a.dir or tempfile.mkdtemp(prefix="parquet-bench-")
    src = os.path.join(d, "src.parquet")
    subprocess.run([a.go_bin, "gen", "-rows", str(a.rows), "-out", src], check=True)
    go = json.loads(subprocess.run([a.go_bin, "bench", "-in", src, "-dir", d, "-iters", str(a.iters)],
                                   check=True, capture_output=True, text=True).stdout)
    # pyarrow runs in a child so that its peak RSS is its own.
    py = json.loads(subprocess.run([sys.executable, __file__, "--pyarrow-side", src, os.path.join(d, "pyarrow.parquet"), str(a.iters)],
                                   check=True, capture_output=True, text=True).stdout)
    # Streaming: a fresh process that only reads pyarrow's file batch by batch.
    stream = json.loads(subprocess.run([a.go_bin, "read", "-in", os.path.join(d, "pyarrow.parquet")],
                                       check=True, capture_output=True, text=True).stdout)
    assert stream["rows"] == go["rows"], "evolm read a different row count from pyarrow's file"
    # Cross-read: pyarrow reads our file and finds the same data as its own.
    assert pq.read_metadata(os.path.join(d, "go.parquet")).num_rows == go["rows"]
    assert pq.read_table(os.path.join(d, "go.parquet")).equals(pq.read_table(os.path.join(d, "pyarrow.parquet")).cast(pq.read_schema(os.path.join(d, "go.parquet")))), "the two files hold different data"

    n = go["rows"]
    mb = 1 << 20
    print(f"table: {n:,} rows, {go['mem_bytes'] / mb:.0f} MiB in Arrow memory (pyarrow counts {py['mem_bytes'] / mb:.0f} MiB)")
    print(f"files: evolm {go['file_bytes'] / mb:.1f} MiB, pyarrow {py['file_bytes'] / mb:.1f} MiB (zstd 3)")
    print(f"{'':16}{'evolm wall':>11}{'cpu':>8}{'rows/s':>12}{'pyarrow wall':>14}{'cpu':>8}{'rows/s':>12}{'ratio wall':>12}{'ratio cpu':>11}")
    rows = [("write", go["write"], py["write"]), ("read (serial)", go["read_serial"], py["read"]),
            ("read (parallel)", go["read_parallel"], py["read"])]
    for name, g, p in rows:
        print(f"{name:16}{g['wall_s']:>10.2f}s{g['cpu_s']:>7.2f}s{n / g['wall_s']:>12,.0f}"
              f"{p['wall_s']:>13.2f}s{p['cpu_s']:>7.2f}s{n / p['wall_s']:>12,.0f}"
              f"{p['wall_s'] / g['wall_s']:>12.2f}{p['cpu_s'] / g['cpu_s']:>11.2f}")
    print("ratio = pyarrow time / evolm time (>1: evolm is faster); pyarrow reads with its thread pool")
    print(f"peak RSS: evolm {go['peak_rss_bytes'] / mb:.0f} MiB (table held in memory + write + read), pyarrow {py['peak_rss_bytes'] / mb:.0f} MiB")
    print(f"peak RSS of evolm streaming pyarrow's file in 64Ki-row batches: {stream['peak_rss_bytes'] / mb:.0f} MiB "
          f"({stream['read']['wall_s']:.2f}s wall, {stream['read']['cpu_s']:.2f}s cpu)")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--pyarrow-side":
        print(json.dumps(pyarrow_side(sys.argv[2], sys.argv[3], int(sys.argv[4]))))
    else:
        main()
