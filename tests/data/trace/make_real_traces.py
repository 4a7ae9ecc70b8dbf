#!/usr/bin/python3
"""Makes the REAL multi-rank traces in this folder (run with Debian's /usr/bin/python3, torch 1.13).

A small data-parallel training run: 2 processes, torch.distributed over gloo, DDP on a small MLP,
each rank profiled with torch.profiler (schedule wait=1 warmup=1 active=4, prof.step() per step).
Rank 1's data loader is slowed (time.sleep in the Dataset's __getitem__), so rank 0 waits for it in
the gradient all-reduce. Expected analysis: rank 1 is the straggler, cause data loading.

  /usr/bin/python3 tests/data/trace/make_real_traces.py OUT_DIR [--slow-rank 1] [--sleep-ms 40]

Writes OUT_DIR/ddp_rank{0,1}.pt.trace.json (torch 1.13 CPU writes the bare-list Chrome trace form).
"""
import argparse, os, sys, time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset


class Synthetic(Dataset):
    def __init__(self, n, dim, sleep_s):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, dim, generator=g)
        self.y = torch.randint(0, 10, (n,), generator=g)
        self.sleep_s = sleep_s

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        if self.sleep_s:
            time.sleep(self.sleep_s)  # a slow disk / decode on this rank
        return self.x[i], self.y[i]


def worker(rank, world, args):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(args.port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    dim = 256
    model = torch.nn.Sequential(torch.nn.Linear(dim, 512), torch.nn.LayerNorm(512), torch.nn.GELU(),
                                torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
    ddp = DDP(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3)
    sleep_s = args.sleep_ms / 1000.0 / args.batch if rank == args.slow_rank else 0.0
    loader = DataLoader(Synthetic(args.batch * 16, dim, sleep_s), batch_size=args.batch, shuffle=False)
    sched = torch.profiler.schedule(wait=1, warmup=1, active=args.active, repeat=1)
    path = os.path.join(args.out, f"ddp_rank{rank}.pt.trace.json")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched,
                                record_shapes=True,
                                on_trace_ready=lambda p: p.export_chrome_trace(path)) as prof:
        for step, (x, y) in enumerate(loader):
            if step >= 2 + args.active:
                break
            loss = torch.nn.functional.cross_entropy(ddp(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            prof.step()
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--slow-rank", type=int, default=1)
    ap.add_argument("--sleep-ms", type=float, default=40.0, help="extra loader time per batch")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--active", type=int, default=4)
    ap.add_argument("--port", type=int, default=29571)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    mp.spawn(worker, args=(2, args), nprocs=2, join=True)


if __name__ == "__main__":
    main()
