#!/usr/bin/python3
"""bench/comm: collectives side by side in ONE run, written as JSON.

  - trainscope all_reduce busbw, 2 ranks, gloo  (`trainscope selftest comm --json`)
  - torch.distributed.all_reduce over gloo, 2 ranks (torch_allreduce.py, the peer)
  - trainscope all_reduce busbw, 2 ranks, mpi   (OpenMPI shared memory)
  - memcpy of the same size (comm_memcpy_bench), the machine's limit
  - `trainscope launch -n 4` start-up time of a trivial program, and torchrun's

Each engine runs the whole size sweep once per round; rounds alternate the engines so
that drift on a shared machine hits them alike, and the best round per size is kept.

Usage: bench/comm/run_bench.py --build build [--rounds 2] [--max-bytes 256M] [-o out.json]
"""
import argparse, json, os, platform, statistics, subprocess, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
PY = sys.executable  # the venv's Python (README): torch 2.x


def sweep(lo, hi):
    out, s = [], lo
    while s <= hi:
        out.append(s)
        s *= 2
    return out


def parse_size(t):
    t = t.strip().upper().rstrip("B")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    return int(t[:-1] if mult > 1 else t) * mult


def run_json(argv, timeout=3600):
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if p.returncode not in (0,):
        sys.stderr.write(f"command failed ({p.returncode}): {' '.join(argv)}\n{p.stderr[-2000:]}\n")
        raise SystemExit(1)
    return json.loads(p.stdout)


def trainscope_allreduce(binary, backend, sizes, a):
    doc = run_json([binary, "selftest", "comm", "-n", "2", "--backend", backend, "--ops", "all_reduce",
                    "--sizes", ",".join(map(str, sizes)), "--iters", str(a.iters), "--warmup", str(a.warmup),
                    "--seconds-per-size", str(a.seconds_per_size), "--check-dtypes", "float32",
                    "--slow-rank-ratio", "0", "--json"])
    return {r["bytes"]: r["busbw_gbps"] for r in doc["results"]}


def torch_allreduce(sizes, a):
    doc = run_json([PY, os.path.join(HERE, "torch_allreduce.py"), "--sizes", ",".join(map(str, sizes)),
                    "--iters", str(a.iters), "--warmup", str(a.warmup),
                    "--seconds-per-size", str(a.seconds_per_size)])
    return {r["bytes"]: r["busbw_gbps"] for r in doc["results"]}, doc.get("torch")


def memcpy(binary, sizes):
    doc = run_json([binary] + [str(s) for s in sizes])
    return {r["bytes"]: r["gbps"] for r in doc["results"]}


def launch_startup(binary, rounds=5):
    ours, torchrun = [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        p = subprocess.run([binary, "launch", "-n", "4", "-q", "--json", "--run-dir", "/tmp/ts_bench_launch",
                            "--", "/bin/true"], capture_output=True, text=True, timeout=60)
        wall = time.perf_counter() - t0
        doc = json.loads(p.stdout)
        ours.append({"all_running_s": doc["all_running_s"], "wall_s": wall})
        t0 = time.perf_counter()
        subprocess.run([PY, "-m", "torch.distributed.run", "--nproc_per_node", "4", "--no_python", "/bin/true"],
                       capture_output=True, timeout=120)
        torchrun.append(time.perf_counter() - t0)
    return {
        "trainscope_all_running_s_median": statistics.median(x["all_running_s"] for x in ours),
        "trainscope_wall_s_median": statistics.median(x["wall_s"] for x in ours),
        "torchrun_wall_s_median": statistics.median(torchrun),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--min-bytes", default="8")
    ap.add_argument("--max-bytes", default="256M")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--seconds-per-size", type=float, default=1.0)
    ap.add_argument("-o", "--output", default="bench_comm.json")
    a = ap.parse_args()
    binary = os.path.join(a.build, "bin", "trainscope")
    memcpy_bin = os.path.join(a.build, "bench", "comm", "comm_memcpy_bench")
    if not os.path.exists(memcpy_bin):
        memcpy_bin = os.path.join(a.build, "bin", "comm_memcpy_bench")
    sizes = sweep(parse_size(a.min_bytes), parse_size(a.max_bytes))
    best = {k: {} for k in ("trainscope_gloo", "torch_gloo", "trainscope_mpi", "memcpy")}
    torch_version = None
    for rnd in range(a.rounds):
        sys.stderr.write(f"round {rnd + 1}/{a.rounds}\n")
        got = {"trainscope_gloo": trainscope_allreduce(binary, "gloo", sizes, a)}
        got["torch_gloo"], torch_version = torch_allreduce(sizes, a)
        got["trainscope_mpi"] = trainscope_allreduce(binary, "mpi", sizes, a)
        got["memcpy"] = memcpy(memcpy_bin, sizes)
        for k, v in got.items():
            for s, bw in v.items():
                best[k][s] = max(best[k].get(s, 0.0), bw)
    rows = []
    for s in sizes:
        r = {"bytes": s}
        for k in best:
            r[k + "_gbps"] = best[k].get(s)
        tg, pg, mg, mc = (best[k].get(s) for k in ("trainscope_gloo", "torch_gloo", "trainscope_mpi", "memcpy"))
        r["trainscope_over_torch"] = tg / pg if tg and pg else None
        r["mpi_over_gloo"] = mg / tg if mg and tg else None
        r["gloo_fraction_of_memcpy"] = tg / mc if tg and mc else None
        r["mpi_fraction_of_memcpy"] = mg / mc if mg and mc else None
        rows.append(r)
    doc = {
        "format": "trainscope.bench.comm", "version": 1, "argv": sys.argv,
        "host": platform.node(), "cpus": os.cpu_count(), "torch": torch_version,
        "note": "busbw in GB/s (1e9), all_reduce float32, 2 ranks; memcpy is bytes/s of one copy",
        "results": rows, "launch": launch_startup(binary),
    }
    with open(a.output, "w") as f:
        json.dump(doc, f, indent=2)
    print(f"{'bytes':>12} {'ts_gloo':>9} {'torch':>9} {'ts/torch':>8} {'ts_mpi':>9} {'mpi/gloo':>8} {'memcpy':>9}")
    for r in rows:
        f = lambda v, w=9: f"{v:{w}.3f}" if v is not None else " " * (w - 1) + "-"
        print(f"{r['bytes']:>12} {f(r['trainscope_gloo_gbps'])} {f(r['torch_gloo_gbps'])} "
              f"{f(r['trainscope_over_torch'], 8)} {f(r['trainscope_mpi_gbps'])} {f(r['mpi_over_gloo'], 8)} "
              f"{f(r['memcpy_gbps'])}")
    print("launch -n 4:", json.dumps(doc["launch"]))
    print("wrote", a.output)


if __name__ == "__main__":
    main()
