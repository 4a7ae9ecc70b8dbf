#!/usr/bin/python3
"""The peer for bench/comm: torch.distributed.all_reduce over gloo, 2 processes on loopback.

Same protocol as `trainscope selftest comm`: float32, warm-up, then a timed loop whose
iteration count is capped so that one size takes about --seconds-per-size; time per op is
averaged over ranks; algbw = bytes / time, busbw = algbw * 2(n-1)/n (GB = 1e9).
Prints JSON {"format": "trainscope.bench.torch_allreduce", "results": [...]}.
"""
import argparse, json, os, socket, sys, time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, world, port, sizes, iters, warmup, budget, queue):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    rows = []
    for nbytes in sizes:
        t = torch.zeros(max(1, nbytes // 4), dtype=torch.float32)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(warmup):
            dist.all_reduce(t)
        warm = torch.tensor([(time.perf_counter() - t0) / max(warmup, 1)], dtype=torch.float64)
        dist.all_reduce(warm, op=dist.ReduceOp.MAX)
        n_iter = iters
        if warmup > 0 and budget > 0 and warm.item() > 0:
            n_iter = int(min(iters, max(1, budget / warm.item())))
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(n_iter):
            dist.all_reduce(t)
        per_op = torch.tensor([(time.perf_counter() - t0) / n_iter], dtype=torch.float64)
        dist.all_reduce(per_op)
        sec = per_op.item() / world
        algbw = t.numel() * 4 / 1e9 / sec
        rows.append({"bytes": t.numel() * 4, "iters": n_iter, "time_us": sec * 1e6,
                     "algbw_gbps": algbw, "busbw_gbps": algbw * 2 * (world - 1) / world})
    if rank == 0:
        queue.put(rows)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", required=True, help="comma list of byte sizes")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--seconds-per-size", type=float, default=1.0)
    ap.add_argument("-n", type=int, default=2)
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, a.n, port, sizes, a.iters, a.warmup, a.seconds_per_size, queue))
             for r in range(a.n)]
    for p in procs:
        p.start()
    rows = queue.get(timeout=3600)
    for p in procs:
        p.join()
    print(json.dumps({"format": "trainscope.bench.torch_allreduce", "version": 1, "torch": torch.__version__,
                      "world_size": a.n, "results": rows}, indent=2))


if __name__ == "__main__":
    sys.exit(main())
