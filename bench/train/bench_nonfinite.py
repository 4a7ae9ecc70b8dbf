#!/usr/bin/python3
"""Non-finite checks on vs off: step time overhead, side by side in one run (issue 14 target:
<= 1%). Two figures: the ratio of median step times (checks on / off, interleaved runs), and
the checks' own time inside the "on" runs over the training loop's (the "nonfinite_checks"
metrics record), which resolves far below the run-to-run noise of a shared machine.

Runs `trainscope train` on bench/train/bench_config.json (the default model) with
anomaly.nonfinite_checks true and false, interleaved (off, on, on, off, ...) so drifting load
hits both alike; each run's median step time (after the warm-up step), then the ratio of the
medians over runs of each kind. "off" builds no guard at all (no hooks, no taps): the trainer
as it was before the checks.

Usage: bench/train/bench_nonfinite.py --binary build/bin/trainscope [--steps 40] [--runs 4]
       [--out FILE]

With --watch: the NaN tracer of `trainscope.watch` in a user's own loop instead (issue 33
target: <= 5 % of the loop). A tiny model (an MLP, 16 -> 64 -> 1, batch 32, Adam, CPU, one
thread) trained by a plain PyTorch loop inside `mon.step()`, with `watch(nonfinite=True)`
and `watch(nonfinite=False)` side by side in one process: two identical loops trained in
alternating blocks of 2 steps (off, on, on, off, ...); per repetition the ratio of their total
loop time (on / off; CPU time of the training thread, which a shared machine's load disturbs
far less than the wall clock), then the median over the repetitions. "off" still computes the gradient norm (the step record needs it); what
"on" adds is the tracer's own work: the forward pre-hook (inputs kept by reference, RNG
state) and, on CPU, the forward output's finiteness (its sum's). Also the tracer's own time
inside the "on" loop (record nonfinite_checks, tracer_fraction), which resolves far below the
noise of a shared machine.
  PYTHONPATH=build/python .venv/bin/python bench/train/bench_nonfinite.py --watch
       [--steps 2000] [--runs 7] [--out FILE]
"""
import argparse, json, os, platform, statistics, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def _watch_loop(torch, trainscope, run_dir, on):
    """A tiny model, its optimizer and a Monitor with nonfinite=on; returns (mon, step) where
    step(n) trains n steps and returns their CPU time in seconds."""
    import time
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    x, y = torch.randn(32, 16), torch.randn(32, 1)
    mon = trainscope.watch(net, opt, run_dir=run_dir, nonfinite=on, layer_norms_every=0)

    def steps(n):
        # CPU time of this thread (torch runs on one thread here): other processes' load on
        # a shared machine slows the wall clock of both loops unevenly, this much less.
        t0 = time.thread_time()
        for _ in range(n):
            with mon.step(tokens=32):
                loss = torch.nn.functional.mse_loss(net(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                mon.log(loss=loss)
        return time.thread_time() - t0
    return mon, steps


def watch_main(a):
    """Two identical loops, one watched with the tracer and one without, in one process,
    trained in alternating blocks of --block steps (off, on, on, off, ...), so drifting load
    on a shared machine hits both alike; per repetition the ratio of the two loops' total
    time, then the median over the repetitions."""
    import torch
    import trainscope
    torch.set_num_threads(a.threads)
    tmp = tempfile.mkdtemp(prefix="ts_bench_watch_nonfinite_")
    ratios, on_us, off_us, fractions = [], [], [], []
    for r in range(a.runs):
        loops = {k: _watch_loop(torch, trainscope, os.path.join(tmp, f"run{r}{k}"), k == "on")
                 for k in ("off", "on")}
        for k in loops:
            loops[k][1](a.warmup)
        total = {"off": 0.0, "on": 0.0}
        for i in range(a.steps // a.block):
            for k in (("off", "on") if i % 2 == 0 else ("on", "off")):
                total[k] += loops[k][1](a.block)
        for mon, _ in loops.values():
            mon.close()
        # The tracer's own time inside the "on" loop (its hooks), over that loop's steps.
        with open(loops["on"][0].metrics_path) as f:
            rec = [j for j in map(json.loads, f) if j.get("type") == "nonfinite_checks"][0]
        fractions.append(rec["tracer_fraction"])
        n = (a.steps // a.block) * a.block
        on_us.append(total["on"] / n * 1e6)
        off_us.append(total["off"] / n * 1e6)
        ratios.append(total["on"] / total["off"])
        print(f"run {r}: off {off_us[-1]:.1f} us/step, on {on_us[-1]:.1f} us/step, "
              f"ratio {ratios[-1]:.4f}, tracer's own time {fractions[-1] * 100:.2f} %",
              flush=True)
    ratio = statistics.median(ratios)
    out = {"format": "trainscope.bench_nonfinite_watch", "version": 1, "argv": sys.argv,
           "host": platform.node(), "cpus": os.cpu_count(), "threads": a.threads,
           "torch": torch.__version__, "steps": a.steps, "block": a.block, "warmup": a.warmup,
           "model": "MLP 16-64-1, batch 32, Adam, CPU",
           "on_step_us": on_us, "off_step_us": off_us, "run_ratios": ratios,
           "overhead_ratio": ratio, "in_run_tracer_fraction": statistics.median(fractions),
           "target": 1.05, "meets_target": ratio <= 1.05}
    print(json.dumps(out, indent=1))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary")
    ap.add_argument("--watch", action="store_true",
                    help="the Python tracer of trainscope.watch, not the trainer's")
    ap.add_argument("--warmup", type=int, default=50, help="--watch: untimed steps per loop")
    ap.add_argument("--block", type=int, default=2, help="--watch: steps per block")
    ap.add_argument("--threads", type=int, default=1, help="--watch: torch threads")
    ap.add_argument("--config", default=os.path.join(HERE, "bench_config.json"))
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--runs", type=int, default=4, help="runs of each kind")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    if a.watch:
        if a.steps == 40 and "--steps" not in sys.argv:
            a.steps = 2000
        if a.runs == 4 and "--runs" not in sys.argv:
            a.runs = 7
        return watch_main(a)
    if not a.binary:
        ap.error("--binary is required (or --watch)")
    tmp = tempfile.mkdtemp(prefix="ts_bench_nonfinite_")
    base = json.load(open(a.config))
    base["train"]["steps"] = a.steps
    base["train"]["layer_norms_every"] = 0
    cfgs = {}
    for kind, on in (("on", True), ("off", False)):
        c = json.loads(json.dumps(base))
        c.setdefault("anomaly", {})["nonfinite_checks"] = on
        c["anomaly"]["spike_rule"] = "mad" if on else "off"
        # Relative corpus paths stay relative to the bundled config's folder.
        c["data"]["corpus"] = [p if os.path.isabs(p) else os.path.join(HERE, p)
                               for p in c["data"]["corpus"]]
        path = os.path.join(tmp, f"{kind}.json")
        with open(path, "w") as f:
            json.dump(c, f)
        cfgs[kind] = path
    ms = {"on": [], "off": []}
    fractions = []
    order = [k for i in range(a.runs) for k in (("off", "on") if i % 2 == 0 else ("on", "off"))]
    env = dict(os.environ, TRAINSCOPE_NO_PROGRESS="1")
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    for i, kind in enumerate(order):
        p = subprocess.run([a.binary, "train", "--config", cfgs[kind], "--run-dir",
                            os.path.join(tmp, f"run{i}"), "--json"],
                           capture_output=True, text=True, env=env, timeout=1800)
        if p.returncode != 0:
            sys.exit(f"run {i} ({kind}) failed ({p.returncode}): {p.stderr[-1500:]}")
        r = json.loads(p.stdout)
        ms[kind].append(r["median_step_ms"])
        extra = ""
        if kind == "on":
            # The checks' own time, measured inside the run (record "nonfinite_checks").
            with open(os.path.join(tmp, f"run{i}", "train", "metrics.rank0.jsonl")) as f:
                for line in f:
                    j = json.loads(line)
                    if j.get("type") == "nonfinite_checks":
                        fractions.append(j["fraction"])
                        extra = f", checks {j['check_ms']:.1f} of {j['loop_ms']:.0f} ms"
        print(f"{kind:3s} median step {r['median_step_ms']:.2f} ms{extra}", flush=True)
    ratio = statistics.median(ms["on"]) / statistics.median(ms["off"])
    out = {"format": "trainscope.bench_nonfinite", "version": 1, "argv": sys.argv,
           "host": platform.node(), "cpus": os.cpu_count(), "steps": a.steps,
           "on_step_ms": ms["on"], "off_step_ms": ms["off"], "overhead_ratio": ratio,
           "in_run_check_fraction": statistics.median(fractions) if fractions else None,
           "target": 1.01, "meets_target": ratio <= 1.01}
    print(json.dumps(out, indent=1))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
