"""A 2-process gloo job for test_distributed.py: RANK/WORLD_SIZE/MASTER_* from the environment.

    dist_job.py hang RUN_DIR     rank 1 skips the all_reduce of step 5; the watchdog ends it
    dist_job.py ddp RUN_DIR      a short clean DDP run under watch + record (exit 0)
"""
import os
import sys
import time

import torch
import torch.distributed as dist

import trainscope


def hang(run_dir):
    rank = dist.get_rank()
    trainscope.distributed.record(run_dir=run_dir, timeout_s=3)
    t = torch.ones(4)
    for step in range(1, 9):
        if not (rank == 1 and step == 5):
            dist.all_reduce(t)  # HANG-LINE
    if rank == 1:
        time.sleep(120)  # a stuck rank: only the watchdog ends this process
    dist.all_reduce(t)
    print("not reached: rank %d" % rank)


def ddp(run_dir):
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    trainscope.distributed.record(run_dir=run_dir, timeout_s=30, model=model)
    mon = trainscope.watch(model, opt, run_dir=run_dir, layer_norms_every=2)
    for step in range(1, 7):
        with mon.step(tokens=16, sample_ids=range(step * 16, step * 16 + 16)):
            with mon.phase("data"):
                x = torch.randn(16, 8)
                y = x.sum(dim=1, keepdim=True)
            with mon.phase("forward"):
                loss = torch.nn.functional.mse_loss(model(x), y)
            with mon.phase("backward"):
                opt.zero_grad()
                loss.backward()
            with mon.phase("optimizer"):
                opt.step()
            mon.log(loss=loss.item())
    mon.close()
    rec = trainscope.distributed.record()
    rec.dump("end of run")


def main():
    dist.init_process_group("gloo")
    {"hang": hang, "ddp": ddp}[sys.argv[1]](sys.argv[2])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
