#!/usr/bin/python3
"""Gradient compression on a communication-bound link (issue 18), side by side in one run.

Sets up the veth bed (bench/comm/veth_bed.sh: two network namespaces, a veth pair shaped by
tc to --rate), then trains the selftest GPT made communication-heavy (--width, default 256:
~1.7M parameters, ~6.6 MB of fp32 gradients per step) with 2 ranks, one per namespace, for
each comm.compression mode, and PyTorch DDP + powerSGD_hook (bench/comm/peer_ddp.py) on the
same bed with the same model, batches and warm-up. Modes are interleaved over --rounds.

Per mode, over the steps after warm-up (and after step 1): comm_bytes per step, comm_ms
(time the gradient collectives ran), step_ms, compress_ms; ratios against none; the final
loss after the same number of steps (none vs bf16 vs powersgd); our step time against the
peer's. Writes one JSON (--out) with argv, versions, the bed, the config and every figure.
Needs root (network namespaces)."""
import argparse, json, os, platform, shutil, statistics, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
BED = os.path.join(HERE, "veth_bed.sh")


def make_config(a, mode):
    cfg = json.load(open(os.path.join(ROOT, "configs", "selftest_train.json")))
    cfg["comment"] = "bench_compression.py: the selftest GPT, wider, on the veth bed"
    cfg["model"]["width"] = a.width
    cfg["model"]["layers"] = a.layers
    cfg["optim"]["warmup_steps"] = 5
    cfg["train"].update({"steps": a.steps, "micro_batch": a.micro_batch, "threads": 1,
                         "max_seconds": 0, "log_every": 0, "layer_norms_every": 0,
                         "target_loss": 0, "bucket_mb": a.bucket_mb})
    cfg["data"]["num_workers"] = 1
    cfg["comm"] = {"compression": mode, "powersgd_rank": a.powersgd_rank,
                   "topk_ratio": a.topk_ratio,
                   "compression_warmup_steps": a.warmup if mode != "none" else 0}
    return cfg


def window(a):
    """Steps measured: after the compression warm-up and never step 1."""
    return max(a.warmup, 1)


def run_ours(a, tmp, mode, port):
    path = os.path.join(tmp, f"{mode}.json")
    json.dump(make_config(a, mode), open(path, "w"))
    out = os.path.join(tmp, f"run_{mode}_{port}")
    script = (f'exec timeout {a.timeout_s} {a.binary} launch -n 1 --nnodes 2 '
              f'--node-rank $BED_NODE_RANK --master-addr $BED_MASTER_ADDR --master-port {port} '
              f'--stop-grace-s 2 -q --run-dir {out}/node$BED_NODE_RANK -- '
              f'{a.binary} train --config {path}')
    t0 = time.time()
    p = subprocess.run([BED, "run", "--name", a.name, "--", "sh", "-c", script],
                       capture_output=True, text=True)
    wall = time.time() - t0
    if p.returncode != 0:
        raise SystemExit(f"{mode}: exit {p.returncode}: {p.stderr[-2000:]}")
    recs, sums = [], []
    for r in (0, 1):
        lines = [json.loads(l) for l in open(os.path.join(out, f"node{r}", "train",
                                                              f"metrics.rank{r}.jsonl"))]
        recs.append([l for l in lines if l["type"] == "step"])
        sums.append(json.load(open(os.path.join(out, f"node{r}", "train",
                                                f"weights.rank{r}.json")))["xxh3_64"])
    resolved = os.path.join(tmp, "resolved.json")  # every key, for the peer
    if not os.path.exists(resolved):
        shutil.copy(os.path.join(out, "node0", "train", "config.json"), resolved)
    shutil.rmtree(out, ignore_errors=True)
    w = window(a)
    steps = [s for s in recs[0] if s["step"] > w]
    return {"wall_s": wall, "identical_weights": sums[0] == sums[1],
            "losses": [s["loss"] for s in recs[0]],
            "step_ms": [s["step_ms"] for s in recs[0]],
            "comm_bytes_per_step": statistics.mean(s["comm_bytes"] for s in steps),
            "comm_ms": statistics.mean(s["comm_ms"] for s in steps),
            "compress_ms": statistics.mean(s["compress_ms"] for s in steps),
            "mean_step_ms": statistics.mean(s["step_ms"] for s in steps),
            "mean_phases_ms": {k: statistics.mean(s["phases_ms"][k] for s in steps)
                               for k in steps[0]["phases_ms"]}}


def run_peer(a, tmp, hook, port):
    cfg_path = os.path.join(tmp, "resolved.json")  # written by the first run_ours
    out = os.path.join(tmp, f"peer_{hook}_{port}.json")
    cmd = ["timeout", str(a.timeout_s), sys.executable, os.path.join(HERE, "peer_ddp.py"),
           "--config", cfg_path, "--hook", hook, "--rank-r", str(a.powersgd_rank),
           "--start-iter", str(max(a.warmup, 2)), "--port", str(port), "--out", out]
    p = subprocess.run([BED, "run", "--name", a.name, "--"] + cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"peer {hook}: exit {p.returncode}: {p.stderr[-2000:]}")
    doc = json.load(open(out))
    w = max(a.warmup, 2)  # PyTorch's start_powerSGD_iter counts from 1 too
    doc["mean_step_ms"] = statistics.mean(doc["step_ms"][w:])
    return doc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--rate", default="100mbit")
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--bucket-mb", type=float, default=2)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=10, help="comm.compression_warmup_steps")
    ap.add_argument("--powersgd-rank", type=int, default=4)
    ap.add_argument("--topk-ratio", type=float, default=0.01)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--modes", default="none,bf16,powersgd,topk")
    ap.add_argument("--peer-hooks", default="powersgd")
    ap.add_argument("--timeout-s", type=int, default=300)
    ap.add_argument("--name", default="tsbench")
    a = ap.parse_args()
    modes = a.modes.split(",")
    tmp = tempfile.mkdtemp(prefix="ts_bench_compression_")
    up = subprocess.run([BED, "up", "--name", a.name, "--rate", a.rate, "--net", "10.217.9"],
                        capture_output=True, text=True)
    if up.returncode != 0:
        raise SystemExit(f"bed up failed ({up.returncode}): {up.stdout}{up.stderr}")
    runs = {m: [] for m in modes}
    peers = {h: [] for h in a.peer_hooks.split(",") if h}
    port = 29800
    try:
        for rnd in range(a.rounds):
            for m in modes:
                port += 1
                runs[m].append(run_ours(a, tmp, m, port))
                r = runs[m][-1]
                print(f"round {rnd} {m}: step {r['mean_step_ms']:.0f} ms, comm "
                      f"{r['comm_ms']:.0f} ms, {r['comm_bytes_per_step'] / 1e6:.2f} MB, "
                      f"loss {r['losses'][-1]:.4f}, phases {r['mean_phases_ms']}", file=sys.stderr)
            for h in peers:
                port += 1
                peers[h].append(run_peer(a, tmp, h, port))
                print(f"round {rnd} peer {h}: step {peers[h][-1]['mean_step_ms']:.0f} ms",
                      file=sys.stderr)
    finally:
        subprocess.run([BED, "down", "--name", a.name], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)

    def med(xs):
        return statistics.median(xs)

    summary = {}
    for m in modes:
        rs = runs[m]
        summary[m] = {k: med([r[k] for r in rs])
                      for k in ("comm_bytes_per_step", "comm_ms", "compress_ms", "mean_step_ms")}
        summary[m]["identical_weights"] = all(r["identical_weights"] for r in rs)
        summary[m]["final_loss"] = med([r["losses"][-1] for r in rs])
        summary[m]["last5_loss"] = med([statistics.mean(r["losses"][-5:]) for r in rs])
    base = summary.get("none")
    if base:
        for m in modes:
            s = summary[m]
            s["bytes_ratio_vs_none"] = s["comm_bytes_per_step"] / base["comm_bytes_per_step"]
            s["comm_time_ratio_vs_none"] = s["comm_ms"] / base["comm_ms"]
            s["step_time_gain_vs_none"] = base["mean_step_ms"] / s["mean_step_ms"]
            s["final_loss_rel_diff_vs_none"] = (s["final_loss"] - base["final_loss"]) / base["final_loss"]
    peer_summary = {h: {"mean_step_ms": med([p["mean_step_ms"] for p in ps]),
                        "final_loss": med([p["losses"][-1] for p in ps]),
                        "torch": ps[0]["torch"]} for h, ps in peers.items()}
    targets = {}
    if base and "powersgd" in summary:
        s = summary["powersgd"]
        targets["powersgd_bytes_le_1_8"] = s["bytes_ratio_vs_none"] <= 1 / 8
        targets["powersgd_comm_time_halved"] = s["comm_time_ratio_vs_none"] <= 0.5
        targets["powersgd_loss_within_2pct"] = abs(s["final_loss_rel_diff_vs_none"]) <= 0.02
    if base and "bf16" in summary:
        targets["bf16_bytes_halved"] = abs(summary["bf16"]["bytes_ratio_vs_none"] - 0.5) < 1e-9
        targets["bf16_loss_within_2pct"] = abs(summary["bf16"]["final_loss_rel_diff_vs_none"]) <= 0.02
    if "powersgd" in summary and "powersgd" in peer_summary:
        ratio = summary["powersgd"]["mean_step_ms"] / peer_summary["powersgd"]["mean_step_ms"]
        peer_summary["powersgd"]["ours_over_peer_step_time"] = ratio
        targets["powersgd_step_time_le_peer"] = ratio <= 1.0
    git = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip()
    torch_version = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"],
                                   capture_output=True, text=True).stdout.strip()
    doc = {"format": "trainscope.bench_compression", "version": 1, "argv": sys.argv,
           "git": git, "torch_peer": torch_version, "host": platform.node(),
           "cpus": os.cpu_count(), "load_avg": os.getloadavg(),
           "bed": {"rate": a.rate, "delay": "0ms (no sch_netem in this kernel)"},
           "config": make_config(a, "powersgd"), "window": f"steps > {window(a)}",
           "summary": summary, "peer": peer_summary, "targets": targets,
           "runs": runs, "peer_runs": peers}
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    json.dump(doc, open(a.out, "w"), indent=1)
    print(json.dumps({"summary": summary, "peer": peer_summary, "targets": targets}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
