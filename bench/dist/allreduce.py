"""One rank of bench/dist's Python side: torch.distributed gloo all-reduces
of float32 tensors of each size, timed as main.go's Go ranks time theirs.
Reads RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (env://); rank 0 prints
one JSON line per size: {"mib": m, "seconds": per all-reduce}."""
import argparse
import datetime
import json
import time

import torch
import torch.distributed as dist


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", required=True, help="comma-separated MiB")
    ap.add_argument("--iters", type=int, required=True, help="timed all-reduces of the largest size")
    ap.add_argument("--warmup", type=int, required=True)
    a = ap.parse_args()
    dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=120))
    sizes = [int(s) for s in a.sizes.split(",")]
    for mib in sizes:
        iters = max(1, a.iters * max(sizes) // mib)  # main.go's itersFor
        t = torch.ones(mib * (1 << 20) // 4, dtype=torch.float32)
        for _ in range(a.warmup):
            dist.all_reduce(t)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
        dist.barrier()
        secs = (time.perf_counter() - start) / iters
        if dist.get_rank() == 0:
            print(json.dumps({"mib": mib, "seconds": secs}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
