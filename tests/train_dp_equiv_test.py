#!/usr/bin/python3
"""Data parallelism changes nothing but the speed: `trainscope launch -n 2 -- trainscope train`
with train.micro_batch M per rank must train like one rank with micro_batch 2M (the same
global batch). The loader's global order is world-size independent (data.h
SequencesForMicroStep: rank r of W reads positions (i*W + r)*M + j), and the averaged gradient
of two means over M sequences is the mean over 2M, so every step's loss and every parameter
must agree within fp32 reduction-order noise. Compared: the loss of every step (the metrics
files) and every parameter's L2 norm after the last step (weights.rank0.json), each within a
relative tolerance; the two ranks of the data-parallel run must hold bit-identical weights.
Exits non-zero with the reason."""
import argparse, json, os, subprocess, sys, tempfile


def write_config(src, dst, micro_batch):
    cfg = json.load(open(src))
    base = os.path.dirname(os.path.abspath(src))
    cfg["data"]["corpus"] = [p if os.path.isabs(p) else os.path.join(base, p)
                             for p in cfg["data"]["corpus"]]
    cfg["train"]["micro_batch"] = micro_batch
    with open(dst, "w") as f:
        json.dump(cfg, f)
    return cfg


def run(argv):
    p = subprocess.run(argv, capture_output=True, text=True, timeout=100)
    if p.returncode != 0:
        raise SystemExit(f"failed ({p.returncode}): {' '.join(argv)}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")


def losses(run_dir, rank=0):
    path = os.path.join(run_dir, "train", f"metrics.rank{rank}.jsonl")
    return [r["loss"] for r in map(json.loads, open(path)) if r.get("type") == "step"]


def weights(run_dir, rank=0):
    return json.load(open(os.path.join(run_dir, "train", f"weights.rank{rank}.json")))


def close(a, b, rtol):
    return abs(a - b) <= rtol * max(abs(a), abs(b), 1e-12)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--config", required=True, help="its train.micro_batch is the per-rank one")
    ap.add_argument("--loss-rtol", type=float, default=1e-5)
    ap.add_argument("--norm-rtol", type=float, default=1e-4)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="ts_dp_equiv_")
    cfg = json.load(open(a.config))
    mb = cfg["train"]["micro_batch"]
    dp_cfg, one_cfg = os.path.join(tmp, "dp.json"), os.path.join(tmp, "one.json")
    write_config(a.config, dp_cfg, mb)
    write_config(a.config, one_cfg, 2 * mb)
    dp_dir, one_dir = os.path.join(tmp, "dp"), os.path.join(tmp, "one")
    run([a.binary, "launch", "-n", "2", "--run-dir", dp_dir, "--", a.binary, "train", "--config",
         dp_cfg])
    run([a.binary, "train", "--config", one_cfg, "--run-dir", one_dir])

    failures = []
    dp_losses, one_losses = losses(dp_dir), losses(one_dir)
    if len(dp_losses) != cfg["train"]["steps"] or len(one_losses) != len(dp_losses):
        failures.append(f"steps: {len(dp_losses)} data-parallel, {len(one_losses)} single-rank")
    worst_loss = 0.0
    for step, (x, y) in enumerate(zip(dp_losses, one_losses), start=1):
        worst_loss = max(worst_loss, abs(x - y) / max(abs(y), 1e-12))
        if not close(x, y, a.loss_rtol):
            failures.append(f"step {step}: loss {x!r} (2 ranks) vs {y!r} (1 rank)")
    w0, w1, w = weights(dp_dir, 0), weights(dp_dir, 1), weights(one_dir)
    if w0["xxh3_64"] != w1["xxh3_64"]:
        failures.append(f"the data-parallel ranks disagree: {w0['xxh3_64']} vs {w1['xxh3_64']}")
    by_name = {p["name"]: p for p in w["params"]}
    if [p["name"] for p in w0["params"]] != [p["name"] for p in w["params"]]:
        failures.append("the runs have different parameters")
    worst_norm = 0.0
    for p in w0["params"]:
        q = by_name.get(p["name"])
        if q is None:
            continue
        worst_norm = max(worst_norm, abs(p["norm"] - q["norm"]) / max(abs(q["norm"]), 1e-12))
        if not close(p["norm"], q["norm"], a.norm_rtol):
            failures.append(f"{p['name']}: norm {p['norm']!r} (2 ranks) vs {q['norm']!r} (1 rank)")
    # The comparison must mean something: training moved the loss.
    if not (one_losses and one_losses[-1] < one_losses[0]):
        failures.append(f"the single-rank loss did not fall: {one_losses}")
    if failures:
        print("FAILED: 2 ranks x micro_batch", mb, "vs 1 rank x micro_batch", 2 * mb)
        for f in failures:
            print("  -", f)
        print("(runs kept in", tmp + ")")
        return 1
    print(f"ok: 2 ranks x micro_batch {mb} = 1 rank x micro_batch {2 * mb} over "
          f"{len(dp_losses)} steps: worst loss difference {worst_loss:.2e} (rtol {a.loss_rtol}), "
          f"worst parameter-norm difference {worst_norm:.2e} (rtol {a.norm_rtol})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
