"""A 2-process gloo job on torch 2.x for test_torch2.py: DDP or FSDP2 (`fully_shard`) on the CPU
under trainscope.watch + trainscope.distributed.record. RANK/WORLD_SIZE/MASTER_* come from the
environment; KIND is ddp or fsdp2.

    torch2_job.py train KIND RUN_DIR   STEPS steps on each rank's half of a shared batch,
                                       checkpoints at steps 3 and 6, a dump at the end; prints
                                       one JSON line with what the job checked itself: the
                                       checkpoints loaded back, and (FSDP2) a save refused
                                       where the ranks' DTensors differ (exit 0)
    torch2_job.py nan KIND RUN_DIR     rank 1's layer2 output turns NaN at step 3: both ranks
                                       raise NonFiniteError there (one JSON line, exit 3)
    torch2_job.py hang KIND RUN_DIR    rank 1 skips step 4; the watchdog ends both (exit 1)

The model, the data and the optimizer are defined here once, so the test can train the same
model in one process as the reference the ranks must agree with.
"""
import json
import os
import sys
import time

import torch
import torch.distributed as dist

import trainscope

STEPS = 6
BATCH = 16  # per rank
LR, MOMENTUM = 0.05, 0.9
NAN_STEP = 3
SKIP_STEP = 4


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer1 = torch.nn.Linear(8, 16)
        self.layer2 = torch.nn.Linear(16, 16)
        self.layer3 = torch.nn.Linear(16, 1)

    def forward(self, x):
        return self.layer3(torch.relu(self.layer2(torch.relu(self.layer1(x)))))  # NET-FORWARD


def new_net():
    torch.manual_seed(0)
    return Net()


def batch(step, rank, world_size=2):
    """(x, y) of `rank`: its BATCH rows of step's batch of BATCH * world_size rows."""
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(BATCH * world_size, 8, generator=g)
    y = x.sum(dim=1, keepdim=True)
    return x[rank * BATCH:(rank + 1) * BATCH], y[rank * BATCH:(rank + 1) * BATCH]


def optimizer(params):
    return torch.optim.SGD(params, lr=LR, momentum=MOMENTUM)


def fully_shard_fn():
    """torch's FSDP2 `fully_shard` (torch.distributed.fsdp; torch.distributed._composable.fsdp
    in older 2.x), or None."""
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:
        try:
            from torch.distributed._composable.fsdp import fully_shard
        except ImportError:
            return None
    return fully_shard


def wrap(kind, net):
    if kind == "ddp":
        return torch.nn.parallel.DistributedDataParallel(net)
    fully_shard = fully_shard_fn()
    for m in (net.layer1, net.layer2, net.layer3):
        fully_shard(m)
    return fully_shard(net)


def train(kind, run_dir):
    from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                         set_model_state_dict)
    rank = dist.get_rank()
    model = wrap(kind, new_net())
    opt = optimizer(model.parameters())
    rec = trainscope.distributed.record(run_dir=run_dir, timeout_s=30, model=model)
    mon = trainscope.watch(model, opt, run_dir=run_dir, layer_norms_every=3)
    saved = {}
    with mon:
        for step in range(1, STEPS + 1):
            x, y = batch(step, rank)
            with mon.step(tokens=BATCH):
                loss = torch.nn.functional.mse_loss(model(x), y)
                opt.zero_grad()
                loss.backward()  # BACKWARD-LINE
                opt.step()
                mon.log(loss=loss.item())
            if step == 3:  # the module's own state dict: DTensor shards with FSDP2
                state = {"model": model.state_dict(), "optimizer": opt.state_dict()}
                trainscope.checkpoint.save(run_dir, state, step=step)  # SAVE-LINE
                saved[step] = plain(state["model"])
            if step == STEPS:  # torch.distributed.checkpoint's full state dict, on rank 0
                state = {"model": get_model_state_dict(model, options=StateDictOptions(
                    full_state_dict=True, cpu_offload=True))}  # {} on the other ranks
                trainscope.checkpoint.save(run_dir, state, step=step)  # SAVE-FULL-LINE
                saved[step] = plain(get_model_state_dict(
                    model, options=StateDictOptions(full_state_dict=True)))
    rec.dump("end of run")
    # Every rank reads both checkpoints back: equal to the model's state when it was saved,
    # and the same again from a fresh model of the same kind restored from it (a resume).
    checks = {}
    for step in (3, STEPS):
        ck = trainscope.checkpoint.load(os.path.join(run_dir, "checkpoints", "step-%d" % step),
                                        restore_rng=False)
        checks["loaded_%d" % step] = same(plain(ck.state["model"]), saved[step])
        fresh = wrap(kind, Net())
        if kind == "ddp" and all(k.startswith("module.") for k in ck.state["model"]):
            fresh.load_state_dict(ck.state["model"])
        else:
            set_model_state_dict(fresh, ck.state["model"],
                                 options=StateDictOptions(full_state_dict=True))
        checks["restored_%d" % step] = same(plain(get_model_state_dict(
            fresh, options=StateDictOptions(full_state_dict=True))), saved[step])
    if kind == "fsdp2":  # states that differ in their DTensors: an error on every rank
        try:
            trainscope.checkpoint.save(run_dir, {"model": model.state_dict() if rank == 0 else {}},
                                       step=STEPS + 1)
            checks["mismatch_refused"] = False
        except trainscope.Error as e:
            checks["mismatch_refused"] = "'model.layer1.weight'" in str(e)
    print(json.dumps({"rank": rank, "checks": checks}))


def plain(state_dict):
    """Full CPU tensors under the underlying module's names (no DDP "module." prefix)."""
    out = {}
    for k, v in state_dict.items():
        v = v.full_tensor() if hasattr(v, "full_tensor") else v
        out[k[len("module."):] if k.startswith("module.") else k] = v.detach().cpu().clone()
    return out


def same(a, b):
    return sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a)


def nan(kind, run_dir):
    net = new_net()
    step_now = [0]
    if dist.get_rank() == 1:
        net.layer2.register_forward_hook(
            lambda m, i, o: o * float("nan") if step_now[0] == NAN_STEP else None)
    model = wrap(kind, net)
    opt = optimizer(model.parameters())
    trainscope.distributed.record(run_dir=run_dir, timeout_s=20, model=model)
    mon = trainscope.watch(model, opt, run_dir=run_dir)
    try:
        for step in range(1, STEPS + 1):
            step_now[0] = step
            x, y = batch(step, dist.get_rank())
            with mon.step(tokens=BATCH):
                loss = torch.nn.functional.mse_loss(model(x), y)
                opt.zero_grad()
                loss.backward()  # the NaN reaches every rank through the gradient reduction
                opt.step()  # checked here, before the update
                mon.log(loss=loss.item())
    except trainscope.NonFiniteError as e:
        print(json.dumps({"step": e.step, "rank": e.rank, "phase": e.phase, "module": e.module,
                          "parameter": e.parameter,
                          "from_other_rank": e.record.get("from_other_rank", False)}))
        dist.barrier()
        dist.destroy_process_group()
        sys.exit(3)


def hang(kind, run_dir):
    rank = dist.get_rank()
    model = wrap(kind, new_net())
    opt = optimizer(model.parameters())
    trainscope.distributed.record(run_dir=run_dir, timeout_s=3, model=model)
    mon = trainscope.watch(model, opt, run_dir=run_dir)
    for step in range(1, STEPS + 1):
        if rank == 1 and step == SKIP_STEP:
            time.sleep(120)  # a stuck rank: only the watchdog ends this process
        x, y = batch(step, rank)
        with mon.step(tokens=BATCH):
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()  # HANG-BACKWARD-LINE
            opt.step()
    print("not reached: rank %d" % rank)


def main():
    dist.init_process_group("gloo")
    {"train": train, "nan": nan, "hang": hang}[sys.argv[1]](sys.argv[2], sys.argv[3])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
