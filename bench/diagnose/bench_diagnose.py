#!/usr/bin/python3
"""Benchmark: `trainscope diagnose` of a run directory with N metric lines (default 1M
trainscope `step` records, about 377 bytes each, a noisy healthy curve), side by side with
two peers over the same file: `wc -l` (the floor for reading it once) and Python's json
module decoding every line (what a script reading the log would pay). Writes JSON to stdout
(or -o): argv, binary, lines, bytes, the machine's CPUs and load average, diagnose / wc -l /
python json wall and CPU seconds (best of --repeat), the ratios, and the class diagnose gave
(must be healthy).

Usage: bench/diagnose/bench_diagnose.py [--binary build/bin/trainscope] [--lines 1000000]
       [--repeat 3] [-o out.json]
"""
import argparse, json, math, os, random, resource, subprocess, sys, tempfile, time


def write_run(path, lines):
    rng = random.Random(1)
    os.makedirs(os.path.join(path, "train"), exist_ok=True)
    f = os.path.join(path, "train", "metrics.rank0.jsonl")
    with open(f, "w") as out:
        out.write(json.dumps({"type": "header", "format": "trainscope.train_metrics", "version": 1,
                              "rank": 0, "world_size": 1}) + "\n")
        for s in range(1, lines + 1):
            loss = 2.0 + 3.5 / math.sqrt(1 + s / 500.0) + rng.gauss(0, 0.05)
            out.write(json.dumps({
                "type": "step", "step": s, "loss": round(loss, 6), "lr": 3e-4,
                "grad_norm": round(1 + rng.random(), 4), "tokens": 65536, "step_ms": 120.5,
                "tokens_per_s": 543900.1,
                "phases_ms": {"data_wait": 1.2, "h2d": 0.3, "forward": 40.1, "backward": 70.2,
                              "comm_wait": 2.1, "optimizer": 6.6},
                "comm_ms": 30.2, "host_rss_bytes": 1234567890,
                "device_mem_allocated_bytes": None, "device_mem_peak_bytes": None}) + "\n")
        out.write(json.dumps({"type": "end", "reason": "done", "step": lines, "rank": 0}) + "\n")
    return f


def timed(argv):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.monotonic()
    p = subprocess.run(argv, capture_output=True, text=True)
    wall = time.monotonic() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default="build/bin/trainscope")
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("-o", "--output")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        f = write_run(tmp, a.lines)
        best = {"diagnose": (1e9, 1e9), "wc": (1e9, 1e9), "py": (1e9, 1e9)}
        py = [sys.executable, "-c",
              "import json, sys\nfor line in open(sys.argv[1]): json.loads(line)", f]
        cls = None
        for _ in range(a.repeat):
            w, c, _ = timed(["wc", "-l", f])
            best["wc"] = min(best["wc"], (w, c))
            w, c, _ = timed(py)
            best["py"] = min(best["py"], (w, c))
            w, c, p = timed([a.binary, "diagnose", tmp, "--json"])
            if p.returncode not in (0, 1):
                sys.exit(f"diagnose failed: {p.stderr}")
            cls = json.loads(p.stdout)["runs"][0]["curve"]["class"]
            best["diagnose"] = min(best["diagnose"], (w, c))
        res = {"argv": sys.argv, "binary": a.binary, "lines": a.lines, "bytes": os.path.getsize(f),
               "diagnose_wall_s": round(best["diagnose"][0], 3),
               "diagnose_cpu_s": round(best["diagnose"][1], 3),
               "wc_l_wall_s": round(best["wc"][0], 3), "wc_l_cpu_s": round(best["wc"][1], 3),
               "python_json_wall_s": round(best["py"][0], 3),
               "python_json_cpu_s": round(best["py"][1], 3),
               "diagnose_over_wc_l_wall": round(best["diagnose"][0] / max(best["wc"][0], 1e-9), 1),
               "python_json_over_diagnose_wall": round(best["py"][0] / max(best["diagnose"][0], 1e-9), 1),
               "cpus": os.cpu_count(), "load_average_1m": round(os.getloadavg()[0], 2),
               "class": cls, "target_wall_s": 2.0,
               "meets_target": best["diagnose"][0] < 2.0 and cls == "healthy"}
    text = json.dumps(res, indent=2)
    if a.output:
        with open(a.output, "w") as fh:
            fh.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
