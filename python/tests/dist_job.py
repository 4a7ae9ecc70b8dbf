"""A 2-process gloo job for test_distributed.py: RANK/WORLD_SIZE/MASTER_* from the environment.

    dist_job.py hang RUN_DIR     rank 1 skips the all_reduce of step 5; the watchdog ends it
    dist_job.py ddp RUN_DIR      a short clean DDP run under watch + record (exit 0)
    dist_job.py nan RUN_DIR      DDP; rank 1's layer2 output turns NaN at step 3: both ranks
                                 raise NonFiniteError there (prints one JSON line, exit 3)
"""
import json
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


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer1 = torch.nn.Linear(8, 16)
        self.layer2 = torch.nn.Linear(16, 16)
        self.layer3 = torch.nn.Linear(16, 1)

    def forward(self, x):
        return self.layer3(torch.relu(self.layer2(torch.relu(self.layer1(x)))))


def nan(run_dir):
    torch.manual_seed(0)
    net = Net()
    step_now = [0]
    if dist.get_rank() == 1:
        net.layer2.register_forward_hook(
            lambda m, i, o: o * float("nan") if step_now[0] == 3 else None)
    model = torch.nn.parallel.DistributedDataParallel(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    trainscope.distributed.record(run_dir=run_dir, timeout_s=20, model=model)
    mon = trainscope.watch(model, opt, run_dir=run_dir)
    try:
        for step in range(1, 7):
            step_now[0] = step
            with mon.step(tokens=16):
                x = torch.randn(16, 8)
                loss = torch.nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True))
                opt.zero_grad()
                loss.backward()  # the NaN reaches every rank through the all-reduce
                opt.step()  # checked here, before the update
                mon.log(loss=loss.item())
    except trainscope.NonFiniteError as e:
        print(json.dumps({"step": e.step, "rank": e.rank, "phase": e.phase, "module": e.module,
                          "from_other_rank": e.record.get("from_other_rank", False)}))
        dist.barrier()
        dist.destroy_process_group()
        sys.exit(3)


def main():
    dist.init_process_group("gloo")
    {"hang": hang, "ddp": ddp, "nan": nan}[sys.argv[1]](sys.argv[2])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
