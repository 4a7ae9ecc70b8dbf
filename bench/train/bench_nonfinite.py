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
"""
import argparse, json, os, platform, statistics, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--config", default=os.path.join(HERE, "bench_config.json"))
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--runs", type=int, default=4, help="runs of each kind")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
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
