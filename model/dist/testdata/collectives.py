"""One rank of model/dist's collectives test in Python torch.distributed:
the same sequence of collectives, with the same inputs and the same checks,
as the Go helper (dist_test.go, runCollectives), so that Go and Python ranks
can form one group. It reads torchrun's variables (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT) through init_method="env://" and prints "ok"."""
import datetime

import torch
import torch.distributed as dist


def check(name, got, want):
    if not torch.equal(got, want):
        raise SystemExit(f"{name}: got {got.tolist()}, want {want.tolist()}")


def main():
    dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=60))
    r, w = dist.get_rank(), dist.get_world_size()
    idx = torch.arange(1, 6, dtype=torch.float32)

    t = idx * (r + 1)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    check("all-reduce sum", t, idx * (w * (w + 1) // 2))

    # Gloo has no AVG: the Go side's Avg is a sum divided by the world size.
    t = idx * (r + 1)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    t.div_(w)
    check("all-reduce avg", t, idx * ((w + 1) / 2))

    t = torch.tensor([float(r), -float(r)])
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    check("all-reduce max", t, torch.tensor([float(w - 1), 0.0]))

    t = torch.tensor([float(r), -float(r)])
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    check("all-reduce min", t, torch.tensor([0.0, -float(w - 1)]))

    base = torch.arange(6, dtype=torch.float32).view(2, 3)
    outs = [torch.empty(2, 3) for _ in range(w)]
    dist.all_gather(outs, base + 10 * r)
    check("all-gather", torch.cat(outs), torch.cat([base + 10 * q for q in range(w)]))

    t = torch.full((4,), float(100 + r))
    dist.broadcast(t, src=w - 1)
    check("broadcast", t, torch.full((4,), float(100 + w - 1)))

    # A weight written by a broadcast (the Go side checks its packed copy).
    wt = torch.full((3, 4), float(100 + r))
    dist.broadcast(wt, src=w - 1)
    check("weight broadcast", wt, torch.full((3, 4), float(100 + w - 1)))

    rows = torch.arange(1, 2 * w + 1, dtype=torch.float32).repeat_interleave(2).view(2 * w, 2)
    # torch 2.1.0's Gloo has no reduce_scatter; model/dist's ReduceScatter
    # on gloo is an all-reduce of a copy, keeping this rank's rows.
    all_rows = rows * (r + 1)
    dist.all_reduce(all_rows, op=dist.ReduceOp.SUM)
    out = all_rows.chunk(w)[r]
    check("reduce-scatter", out, rows[2 * r : 2 * r + 2] * (w * (w + 1) // 2))

    t = torch.full((1 << 20,), float(r + 1))
    dist.all_reduce(t)
    check("all-reduce 4 MiB", t, torch.full((1 << 20,), float(w * (w + 1) // 2)))

    dist.barrier()
    dist.destroy_process_group()
    print("ok")


if __name__ == "__main__":
    main()
