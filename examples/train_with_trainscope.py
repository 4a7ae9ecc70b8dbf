#!/usr/bin/env python3
"""A small model trained with trainscope inside the script: watch + record + checkpoint.

One process:        PYTHONPATH=build/python python3 examples/train_with_trainscope.py --run-dir /tmp/run
Two ranks (gloo):   PYTHONPATH=build/python torchrun --nproc-per-node 2 examples/train_with_trainscope.py --run-dir /tmp/run
                    (or: trainscope launch -n 2 -- python3 examples/train_with_trainscope.py)
Then:               trainscope diagnose /tmp/run ; trainscope ckpt verify /tmp/run/checkpoints
                    trainscope hang analyze /tmp/run   (after a hang: the watchdog's dumps)

It learns y = sin(w . x) with a 2-layer MLP on synthetic data, resumes from the run's latest
checkpoint when there is one (--resume), and saves every --save-every steps (keeping 2).
"""
import argparse
import os

import torch
import torch.distributed as dist

import trainscope


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--save-every", type=int, default=10)
    ap.add_argument("--resume", action="store_true")
    args = ap.parse_args()

    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if distributed else 0
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 1))
    if distributed:
        model = torch.nn.parallel.DistributedDataParallel(model)
        recorder = trainscope.distributed.record(run_dir=args.run_dir, timeout_s=120,
                                                 model=model)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)

    start = 0
    if args.resume and trainscope.checkpoint.latest(args.run_dir):
        ck = trainscope.checkpoint.load(args.run_dir)
        model.load_state_dict(ck.state["model"])
        opt.load_state_dict(ck.state["optimizer"])
        start = ck.step
        print("rank %d: resumed from %s" % (rank, ck.path))

    w = torch.randn(16, generator=torch.Generator().manual_seed(1))
    g = torch.Generator().manual_seed(1000 + rank)
    mon = trainscope.watch(model, opt, run_dir=args.run_dir, layer_norms_every=5,
                           config=vars(args), start_step=start)
    with mon:
        for step in range(start + 1, args.steps + 1):
            ids = torch.arange(step * args.batch, (step + 1) * args.batch)
            with mon.step(tokens=args.batch, sample_ids=ids):
                with mon.phase("data"):
                    x = torch.randn(args.batch, 16, generator=g)
                    y = torch.sin(x @ w).unsqueeze(1)
                with mon.phase("forward"):
                    loss = torch.nn.functional.mse_loss(model(x), y)
                with mon.phase("backward"):
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                with mon.phase("optimizer"):
                    opt.step()
                mon.log(loss=loss.item())
            if step % args.save_every == 0 or step == args.steps:
                trainscope.checkpoint.save(args.run_dir, {"model": model.state_dict(),
                                                          "optimizer": opt.state_dict()},
                                           step=step, keep=2)
    if rank == 0:
        print("done: %d steps, loss %.4f; metrics in %s" % (args.steps, loss.item(),
                                                            mon.metrics_path))
    if distributed:
        recorder.dump("end of run")  # on demand: `trainscope hang analyze` finds no problem
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
