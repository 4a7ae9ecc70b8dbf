#!/usr/bin/env python3
"""Overhead of `import trainscope` in a training loop, measured side by side (docs/PERFORMANCE.md).

1. watch: a small real model (a 2-layer Transformer encoder, d=128, seq 64, batch 8, AdamW, CPU)
   trained in blocks of --steps steps, alternating a plain loop and the same loop under
   `trainscope.watch` with its defaults (step + phase timers, loss log, gradient norm and
   non-finite check every step, per-layer norms every 50 steps, a metrics line per step);
   --repeats pairs; the figure is median(watched block) / median(plain block).
2. record: per torch.distributed call, `dist.all_reduce` of one float on a 1-rank gloo group
   with and without `trainscope.distributed.record` (alternating blocks of --calls calls),
   and the native FlightRecorder start+complete pair alone; microseconds per call.

    PYTHONPATH=build/python python3 bench/python/bench_overhead.py --out result.json
"""
import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist

import trainscope
from trainscope import _core


class Model(torch.nn.Module):
    def __init__(self, vocab=512, d=128):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, d)
        layer = torch.nn.TransformerEncoderLayer(d, 4, 4 * d, dropout=0.0, batch_first=True)
        self.enc = torch.nn.TransformerEncoder(layer, 2)
        self.head = torch.nn.Linear(d, vocab)

    def forward(self, x):
        return self.head(self.enc(self.emb(x)))


def block(model, opt, batches, mon=None):
    t0 = time.perf_counter()
    for x, y in batches:
        if mon is None:
            loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss.item()
            continue
        with mon.step(tokens=x.numel()):
            with mon.phase("forward"):
                loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
            with mon.phase("backward"):
                opt.zero_grad()
                loss.backward()
            with mon.phase("optimizer"):
                opt.step()
            mon.log(loss=loss.item())
    return (time.perf_counter() - t0) / len(batches)


def bench_watch(args, tmp):
    torch.manual_seed(0)
    model = Model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batches = [(torch.randint(0, 512, (8, 64)), torch.randint(0, 512, (8, 64)))
               for _ in range(args.steps)]
    block(model, opt, batches[:3])  # warm-up
    plain, watched, check = [], [], []
    for r in range(args.repeats):
        order = (False, True) if r % 2 == 0 else (True, False)
        for use in order:
            if use:
                mon = trainscope.watch(model, opt, run_dir=os.path.join(tmp, "w%d" % r))
                watched.append(block(model, opt, batches, mon))
                mon.close()
                check.append(mon._check_s / mon._loop_s)
            else:
                plain.append(block(model, opt, batches))
    return {"model_params": sum(p.numel() for p in model.parameters()),
            "steps_per_block": args.steps, "repeats": args.repeats,
            "plain_step_ms_median": 1e3 * statistics.median(plain),
            "watched_step_ms_median": 1e3 * statistics.median(watched),
            "ratio": statistics.median(watched) / statistics.median(plain),
            "ratio_per_pair": [w / p for w, p in zip(watched, plain)],
            "grad_check_fraction_median": statistics.median(check)}


def bench_record(args, tmp):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29471")
    dist.init_process_group("gloo", rank=0, world_size=1)
    t = torch.ones(1)

    def calls():
        t0 = time.perf_counter()
        for _ in range(args.calls):
            dist.all_reduce(t)
        return (time.perf_counter() - t0) / args.calls

    calls()
    plain, recorded, wrapper_only = [], [], []
    for _ in range(args.repeats):
        plain.append(calls())
        rec = trainscope.distributed.record(run_dir=tmp, timeout_s=600)
        recorded.append(calls())
        # The wrapper's own cost: the same wrapper (native recorder included) around a no-op
        # instead of gloo's all_reduce, which switches threads and cools the caches.
        noop = rec._wrap("all_reduce", lambda *a, **k: None, "all_reduce", 0, 2, False)
        t0 = time.perf_counter()
        for _ in range(args.calls):
            noop(t)
        wrapper_only.append((time.perf_counter() - t0) / args.calls)
        trainscope.distributed.stop()
    fr = _core.FlightRecorder(0, 1, 2000)
    t0 = time.perf_counter()
    for _ in range(args.calls):
        fr.complete(fr.start("all_reduce", -1, 1, "torch.float32", "0", "x.py:1"))
    native = (time.perf_counter() - t0) / args.calls
    dist.destroy_process_group()
    return {"calls_per_block": args.calls,
            "all_reduce_us_median": 1e6 * statistics.median(plain),
            "recorded_all_reduce_us_median": 1e6 * statistics.median(recorded),
            "record_us_per_call": 1e6 * (statistics.median(recorded) - statistics.median(plain)),
            "wrapper_over_noop_us": 1e6 * statistics.median(wrapper_only),
            "native_start_complete_us": 1e6 * native}


def main():
    ap = argparse.ArgumentParser(description="watch / record overhead, side by side")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        result = {"argv": sys.argv, "python": platform.python_version(),
                  "torch": torch.__version__, "host": platform.node(),
                  "load_avg": os.getloadavg(), "threads": args.threads,
                  "watch": bench_watch(args, tmp), "record": bench_record(args, tmp)}
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
