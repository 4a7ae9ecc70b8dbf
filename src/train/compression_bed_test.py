#!/usr/bin/python3
"""Gradient compression end to end (issue 18): 2 ranks, one per network namespace of the
veth bed (bench/comm/veth_bed.sh), train the tiny config with each comm.compression mode and
must end with bit-identical weights (weights.rank<R>.json xxh3_64). Each step record's
comm_bytes must match the mode: fp16/bf16 exactly half of none's, powersgd and topk less,
the warm-up steps exactly none's. Bad compression keys exit 2 naming the key (no root needed).
Exits 77 (skipped) when namespaces cannot be created (not root)."""
import argparse, json, os, shutil, subprocess, sys, tempfile

MODES = ["none", "fp16", "bf16", "powersgd", "topk"]


def bad_config_checks(binary, base, tmp):
    for comm, key in [({"compression": "gzip"}, '"comm.compression"'),
                      ({"compression": "powersgd", "powersgd_rank": 0}, '"comm.powersgd_rank"'),
                      ({"compression": "topk", "topk_ratio": 2}, '"comm.topk_ratio"')]:
        cfg = dict(base, comm=comm)
        path = os.path.join(tmp, "bad.json")
        json.dump(cfg, open(path, "w"))
        p = subprocess.run([binary, "train", "--config", path, "--run-dir", os.path.join(tmp, "bad")],
                           capture_output=True, text=True, timeout=30)
        if p.returncode != 2 or key not in p.stderr:
            print(f"FAIL: comm {comm}: exit {p.returncode} (want 2), stderr {p.stderr[-500:]!r}")
            return False
    return True


def run_mode(a, base, tmp, mode, port, bed):
    cfg = json.loads(json.dumps(base))
    cfg["train"]["steps"] = a.steps
    cfg["comm"] = {"compression": mode, "powersgd_rank": 2, "topk_ratio": 0.05,
                   "compression_warmup_steps": a.warmup}
    path = os.path.join(tmp, f"{mode}.json")
    json.dump(cfg, open(path, "w"))
    out = os.path.join(tmp, mode)
    script = (f'exec timeout 40 {a.binary} launch -n 1 --nnodes 2 --node-rank $BED_NODE_RANK '
              f'--master-addr $BED_MASTER_ADDR --master-port {port} --stop-grace-s 2 -q '
              f'--run-dir {out}/node$BED_NODE_RANK -- {a.binary} train --config {path}')
    p = subprocess.run([bed, "run", "--name", a.name, "--", "sh", "-c", script],
                       capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        logs = ""
        for r in (0, 1):
            err = os.path.join(out, f"node{r}", f"rank{r}", "stderr.log")
            if os.path.exists(err):
                logs += f"--- rank {r}\n" + open(err).read()[-1500:]
        print(f"FAIL: {mode}: exit {p.returncode}\n{p.stdout[-1000:]}\n{p.stderr[-1000:]}\n{logs}")
        return None
    sums, steps = [], []
    for r in (0, 1):
        w = json.load(open(os.path.join(out, f"node{r}", "train", f"weights.rank{r}.json")))
        assert w["world_size"] == 2 and w["step"] == a.steps, w
        sums.append(w["xxh3_64"])
        lines = [json.loads(l) for l in open(os.path.join(out, f"node{r}", "train",
                                                              f"metrics.rank{r}.jsonl"))]
        recs = [l for l in lines if l["type"] == "step"]
        assert len(recs) == a.steps, (mode, r, len(recs))
        assert lines[-1]["type"] == "end" and lines[-1]["reason"] == "done", lines[-1]
        steps.append(recs)
    if sums[0] != sums[1]:
        print(f"FAIL: {mode}: ranks ended with different weights: {sums}")
        return None
    if steps[0][-1]["loss"] is None:
        print(f"FAIL: {mode}: final loss not finite")
        return None
    return {"xxh3": sums[0], "bytes": [s["comm_bytes"] for s in steps[0]],
            "compress_ms": [s["compress_ms"] for s in steps[0]],
            "loss": [s["loss"] for s in steps[0]]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--bed", required=True, help="bench/comm/veth_bed.sh")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--name", default=f"tsc{os.getpid() % 10000}")
    a = ap.parse_args()
    base = json.load(open(a.config))
    cfg_dir = os.path.dirname(os.path.abspath(a.config))
    base["data"]["corpus"] = [os.path.join(cfg_dir, c) for c in base["data"]["corpus"]]
    tmp = tempfile.mkdtemp(prefix="ts_compression_bed_")
    try:
        if not bad_config_checks(a.binary, base, tmp):
            return 1
        net = f"10.216.{os.getpid() % 200 + 20}"
        up = subprocess.run([a.bed, "up", "--name", a.name, "--rate", "1gbit", "--net", net],
                            capture_output=True, text=True)
        if up.returncode == 77:
            print(up.stdout.strip())
            return 77
        if up.returncode != 0:
            print("FAIL: bed up:", up.stdout, up.stderr)
            return 1
        try:
            results = {}
            for i, mode in enumerate(MODES):
                results[mode] = run_mode(a, base, tmp, mode, 29600 + os.getpid() % 300 + i, a.bed)
                if results[mode] is None:
                    return 1
        finally:
            subprocess.run([a.bed, "down", "--name", a.name], capture_output=True)
        none = results["none"]["bytes"]
        w = a.warmup
        ok = True
        for mode in ("fp16", "bf16"):
            b = results[mode]["bytes"]
            if b[:w] != none[:w] or any(2 * x != y for x, y in zip(b[w:], none[w:])):
                print(f"FAIL: {mode} bytes per step {b}, none {none}: want half after warm-up")
                ok = False
        for mode in ("powersgd", "topk"):
            b = results[mode]["bytes"]
            if b[:w] != none[:w] or not all(0 < x < y for x, y in zip(b[w:], none[w:])):
                print(f"FAIL: {mode} bytes per step {b}, none {none}: want fewer after warm-up")
                ok = False
            if not all(ms > 0 for ms in results[mode]["compress_ms"][w:]):
                print(f"FAIL: {mode} compress_ms {results[mode]['compress_ms']}")
                ok = False
        if results["none"]["xxh3"] == results["powersgd"]["xxh3"]:
            print("FAIL: powersgd trained exactly like none: compression not applied")
            ok = False
        if not ok:
            return 1
        for mode in MODES:
            r = results[mode]
            print(f"ok: {mode:8s} identical weights {r['xxh3']}, bytes/step {r['bytes'][-1]}, "
                  f"loss {r['loss'][0]:.3f} -> {r['loss'][-1]:.3f}")
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
