#!/usr/bin/python3
"""PyTorch peer of a compressed data-parallel `trainscope train` run: the same GPT
(bench/train/peer.py), config and batches per rank, wrapped in DistributedDataParallel over
gloo, with PyTorch's own powerSGD_hook (torch.distributed.algorithms.ddp_comm_hooks) or its
plain all-reduce. One process per rank; run it on both sides of the veth bed
(bench/comm/veth_bed.sh run), which sets BED_NODE_RANK, BED_MASTER_ADDR and BED_IFACE.

Prints (rank 0) one JSON object: losses, step_ms per step, and the settings used."""
import argparse, json, os, sys, time

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
import peer  # noqa: E402  (the Python GPT and data pipeline of the trainer)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True, help="a trainscope train config (resolved corpus paths)")
    ap.add_argument("--hook", choices=["none", "powersgd"], default="powersgd")
    ap.add_argument("--rank-r", type=int, default=4, help="PowerSGD matrix approximation rank")
    ap.add_argument("--start-iter", type=int, default=10, help="start_powerSGD_iter (warm-up)")
    ap.add_argument("--port", type=int, default=29700)
    ap.add_argument("--out", default="", help="rank 0 writes its JSON here too")
    a = ap.parse_args()
    rank = int(os.environ["BED_NODE_RANK"])
    os.environ.setdefault("GLOO_SOCKET_IFNAME", os.environ.get("BED_IFACE", ""))
    dist.init_process_group("gloo", init_method=f"tcp://{os.environ['BED_MASTER_ADDR']}:{a.port}",
                            rank=rank, world_size=2)
    cfg = json.load(open(a.config))
    m, o, tr = cfg["model"], cfg["optim"], cfg["train"]
    steps = tr["steps"]
    torch.set_num_threads(tr["threads"] or os.cpu_count())
    torch.manual_seed(tr["seed"])
    torch.use_deterministic_algorithms(tr["deterministic"])  # as bench/train/peer.py
    tokens = peer.load_corpus(cfg)
    vocab = m["vocab"] or 257
    t = m["seq_len"]
    n = (len(tokens) - 1) // t
    module = LossOf(peer.Gpt(m, vocab))
    # gloo cannot broadcast the bool attention mask (a constant anyway): leave it out.
    DDP._set_params_and_buffers_to_ignore_for_model(module, ["gpt.mask"])
    # One bucket: with several, the hook's chained all-reduces of different buckets interleave
    # differently on the two ranks over gloo (sizes mismatch, "op.preamble.length <=
    # op.nbytes"), so the peer runs with a single bucket, first bucket included.
    dist._DEFAULT_FIRST_BUCKET_BYTES = 1 << 30
    model = DDP(module, bucket_cap_mb=1024)  # DDP broadcasts rank 0's weights
    if a.hook == "powersgd":
        state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=a.rank_r,
                                   start_powerSGD_iter=a.start_iter)
        model.register_comm_hook(state, psgd.powerSGD_hook)
    opt = torch.optim.AdamW(model.parameters(), lr=o["lr"], betas=(o["beta1"], o["beta2"]),
                            eps=o["eps"], weight_decay=o["weight_decay"])
    mb = tr["micro_batch"]
    order = peer.shuffled_order(n, tr["seed"], 0)
    batches = []
    for s in range(steps):  # this rank's share: global batch s, rows of rank r
        ids = [order[((s * 2 + rank) * mb + j) % n] for j in range(mb)]
        rows = torch.stack([tokens[i * t:i * t + t + 1] for i in ids])
        batches.append((rows[:, :-1].contiguous(), rows[:, 1:].contiguous()))
    losses, step_ms = [], []
    for step in range(1, steps + 1):
        t0 = time.perf_counter()
        for g in opt.param_groups:
            g["lr"] = peer.lr_at(o, step, steps)
        x, y = batches[step - 1]
        loss = model(x, y)  # through DDP's forward, which arms its reducer
        loss.backward()
        if o["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), o["grad_clip"])
        opt.step()
        opt.zero_grad(set_to_none=True)
        lt = loss.detach().clone()
        dist.all_reduce(lt)
        step_ms.append((time.perf_counter() - t0) * 1000)
        losses.append(lt.item() / 2)
    dist.destroy_process_group()
    if rank == 0:
        doc = {"hook": a.hook, "rank_r": a.rank_r, "start_iter": a.start_iter, "losses": losses,
               "step_ms": step_ms, "threads": torch.get_num_threads(), "torch": torch.__version__}
        print(json.dumps(doc))
        if a.out:
            json.dump(doc, open(a.out, "w"))
    return 0


class LossOf(torch.nn.Module):
    """peer.Gpt with forward = its loss (DDP wraps forward)."""

    def __init__(self, gpt):
        super().__init__()
        self.gpt = gpt

    def forward(self, x, y):
        return self.gpt.loss(x, y)


if __name__ == "__main__":
    sys.exit(main())
