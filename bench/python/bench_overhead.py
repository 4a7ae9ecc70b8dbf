#!/usr/bin/env python3
"""Overhead of `import trainscope` in a training loop, measured side by side (docs/PERFORMANCE.md).

1. watch: a small real model (a 2-layer Transformer encoder, d=128, seq 64, batch 8, AdamW, CPU)
   trained in blocks of --steps steps, alternating a plain loop and the same loop under
   `trainscope.watch` with its defaults (step + phase timers, loss log, gradient norm and
   non-finite check every step, per-layer norms every 50 steps, a metrics line per step);
   --repeats pairs; the figure is median(watched block) / median(plain block).
2. record: per torch.distributed call, `dist.all_reduce` of one float on a 1-rank gloo group
   with and without `trainscope.distributed.record`: --record-repeats pairs of alternating
   blocks of --calls calls (the median over pairs of recorded - plain), then alternating
   single calls (--single-calls of each; medians of the calls, which load changes between
   blocks do not skew), and the time the wrapper spends
   outside the collective (each call's total minus the collective's own time, measured inside
   it); the wrapper around a no-op, and the native FlightRecorder start+complete pair alone,
   through pybind11 (start/complete) and through fast_calls(); microseconds per call.

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


def interleaved(fns, arg, n):
    """Median time per call of each of fns (ns), calling them in turn, n calls each, and the
    median time each spent outside `inner_ns` (set by a shim around the collective)."""
    pc = time.perf_counter_ns
    total = [[] for _ in fns]
    outside = [[] for _ in fns]
    for i in range(n):
        for j in (range(len(fns)) if i % 2 == 0 else range(len(fns) - 1, -1, -1)):
            t0 = pc()
            fns[j](arg)
            dt = pc() - t0
            total[j].append(dt)
            outside[j].append(dt - _inner_ns[0])
    return [statistics.median(x) for x in total], [statistics.median(x) for x in outside]


_inner_ns = [0]


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
    for _ in range(args.record_repeats):
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

    # Single calls in turn: the plain all_reduce and the recorded one, each through a shim
    # that times the collective itself, so that the wrapper's time outside it is seen too.
    all_reduce = dist.all_reduce
    pc = time.perf_counter_ns

    def shim(*a, **k):
        t0 = pc()
        r = all_reduce(*a, **k)
        _inner_ns[0] = pc() - t0
        return r

    rec = trainscope.distributed.record(run_dir=tmp, timeout_s=600)
    wrapped = rec._wrap("all_reduce", shim, "all_reduce", 0, 2, False)
    (p_ns, r_ns), (p_out, r_out) = interleaved([shim, wrapped], t, args.single_calls)
    trainscope.distributed.stop()

    fr = _core.FlightRecorder(0, 1, 2000)
    t0 = time.perf_counter()
    for _ in range(args.calls):
        fr.complete(fr.start("all_reduce", -1, 1, "torch.float32", "0", "x.py:1"))
    native = (time.perf_counter() - t0) / args.calls
    start, complete = fr.fast_calls()
    op, dtype, site = fr.op_code("all_reduce"), fr.dtype_code("float32"), fr.site_id("x.py:1")
    t0 = time.perf_counter()
    for _ in range(args.calls):
        complete(start(op, 1, dtype, 0, site, -1, -1, False))
    native_fast = (time.perf_counter() - t0) / args.calls
    dist.destroy_process_group()
    return {"calls_per_block": args.calls, "block_pairs": args.record_repeats,
            "single_calls": args.single_calls,
            "all_reduce_us_median": 1e6 * statistics.median(plain),
            "recorded_all_reduce_us_median": 1e6 * statistics.median(recorded),
            "record_us_per_call": 1e6 * statistics.median(
                [r - p for r, p in zip(recorded, plain)]),
            "interleaved_all_reduce_us_median": p_ns / 1e3,
            "interleaved_recorded_us_median": r_ns / 1e3,
            "interleaved_record_us_per_call": (r_ns - p_ns) / 1e3,
            "wrapper_outside_collective_us": (r_out - p_out) / 1e3,
            "wrapper_over_noop_us": 1e6 * statistics.median(wrapper_only),
            "native_start_complete_us": 1e6 * native,
            "native_fast_calls_us": 1e6 * native_fast}


def main():
    ap = argparse.ArgumentParser(description="watch / record overhead, side by side")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--calls", type=int, default=2000, help="calls per record block")
    ap.add_argument("--record-repeats", type=int, default=40, help="record block pairs")
    ap.add_argument("--single-calls", type=int, default=20000,
                    help="alternating single calls of each (record)")
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
