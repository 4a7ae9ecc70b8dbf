#!/usr/bin/python3
"""Trainer checkpoint benchmark (issue 14): figures as ratios measured side by side in one run.

  1. Write throughput: `trainscope train` with synchronous checkpoints (checkpoint.async
     false) of the benchmark model; each save's tensor bytes / write_ms (the writer's own
     time: files written and hashed, fsync of every file and both directories, rename,
     pruning; from the metrics file's "checkpoint" records) against `dd if=/dev/zero
     of=DIR/dd.bin bs=4M conv=fsync` of the same byte count into the same folder, the two
     alternating. Ratio of the medians (target >= 0.5).
  2. Async checkpointing every 10 steps vs none: runs interleaved none/async, async/none, ...;
     per run the loop's wall time per step (summary `seconds` / steps run: includes the
     snapshot, the gather and any wait for a save still writing, which the step records
     do not); ratio of the medians over runs (target <= 1.2). On a shared machine the
     run-to-run spread is larger than the effect, so the in-run cost is given as well: the
     time the training thread spent on checkpoints (snapshot to host memory + blocked on a
     save still writing) over the loop's time.

Usage: bench/train/bench_ckpt.py --binary build/bin/trainscope [--steps 45] [--runs 3] [--out FILE]
"""
import argparse, copy, json, os, platform, shutil, statistics, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))


def run(argv, timeout=900):
    env = dict(os.environ, TRAINSCOPE_NO_PROGRESS="1")
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(argv)}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return p.stdout


def train(a, cfg, tmp, name):
    path = os.path.join(tmp, name + ".json")
    json.dump(cfg, open(path, "w"))
    run_dir = os.path.join(tmp, name)
    shutil.rmtree(run_dir, ignore_errors=True)
    out = json.loads(run([a.binary, "train", "--config", path, "--run-dir", run_dir, "--json"]))
    lines = [json.loads(l) for l in open(os.path.join(run_dir, "train", "metrics.rank0.jsonl"))]
    return out, [l for l in lines if l["type"] == "checkpoint"], run_dir


def dd_gbps(folder, nbytes):
    path = os.path.join(folder, "dd.bin")
    count = max(1, round(nbytes / (4 << 20)))
    t0 = time.perf_counter()
    subprocess.run(["dd", "if=/dev/zero", f"of={path}", "bs=4M", f"count={count}", "conv=fsync"],
                   check=True, capture_output=True)
    dt = time.perf_counter() - t0
    os.remove(path)
    return count * (4 << 20) / dt / 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--config", default=os.path.join(HERE, "bench_config.json"))
    ap.add_argument("--steps", type=int, default=45)
    ap.add_argument("--runs", type=int, default=3, help="interleaved runs of each kind (part 2)")
    ap.add_argument("--dir", default="", help="folder to write in (default: a temporary one)")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    tmp = a.dir or tempfile.mkdtemp(prefix="ts_bench_ckpt_")
    os.makedirs(tmp, exist_ok=True)
    base = json.load(open(a.config))
    base["train"]["steps"] = a.steps
    base["train"]["layer_norms_every"] = 0

    # 1. Write throughput, synchronous saves every 5 steps, alternating with dd.
    cfg = copy.deepcopy(base)
    cfg["train"]["steps"] = 20
    cfg["checkpoint"] = {"every_steps": 5, "keep": 1, "async": False}
    writer, dd = [], []
    for _ in range(2):
        _, records, run_dir = train(a, cfg, tmp, "write")
        for r in records:
            assert r["ok"], r
            writer.append(r["bytes"] / (r["write_ms"] / 1e3) / 1e9)
            dd.append(dd_gbps(os.path.join(run_dir, "checkpoints"), r["bytes"]))
    ckpt_bytes = records[0]["bytes"]
    write_ratio = statistics.median(writer) / statistics.median(dd)

    # 2. Async every 10 steps vs none, interleaved.
    none_cfg = copy.deepcopy(base)
    async_cfg = copy.deepcopy(base)
    async_cfg["checkpoint"] = {"every_steps": 10, "keep": 2, "async": True}
    per_step = {"none": [], "async": []}
    blocked, in_run = [], []
    for i in range(a.runs):
        order = ["none", "async"] if i % 2 == 0 else ["async", "none"]
        for kind in order:
            out, _, _ = train(a, none_cfg if kind == "none" else async_cfg, tmp, kind)
            per_step[kind].append(out["seconds"] / out["steps"] * 1e3)
            if kind == "async":
                c = out["checkpoint"]
                blocked.append(c["blocked_ms"])
                in_run.append((c["snapshot_ms"] + c["blocked_ms"]) / (out["seconds"] * 1e3))
    async_ratio = statistics.median(per_step["async"]) / statistics.median(per_step["none"])

    result = {
        "argv": sys.argv, "host": platform.node(), "cpus": os.cpu_count(),
        "load_avg": os.getloadavg(), "time_unix": int(time.time()),
        "checkpoint_bytes": ckpt_bytes,
        "write": {"writer_gbps": writer, "dd_gbps": dd, "ratio": write_ratio, "target": ">= 0.5"},
        "async_every_10": {"none_ms_per_step": per_step["none"],
                           "async_ms_per_step": per_step["async"],
                           "async_blocked_ms": blocked, "ratio": async_ratio, "target": "<= 1.2",
                           "in_run_checkpoint_fraction": in_run},
    }
    text = json.dumps(result, indent=1)
    if a.out:
        open(a.out, "w").write(text + "\n")
    print(text)
    print(f"checkpoint write / dd: {write_ratio:.2f} (target >= 0.5); "
          f"async every 10 steps / none: {async_ratio:.3f} (target <= 1.2); training thread on "
          f"checkpoints: {100 * statistics.median(in_run):.2f}% of the loop")
    if not a.dir:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
