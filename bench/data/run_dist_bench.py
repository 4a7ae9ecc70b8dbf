#!/usr/bin/python3
"""Distributed scan (issue 20) against the single-process scan, side by side in one run.

  1. builds (or reuses) a corpus with make_corpus.py (--mb, planted exact and near duplicates);
  2. times, interleaved, best of --repeat: the single-process full scan with --threads T, and
     `trainscope launch -n R -- trainscope data scan --distributed --threads T/R` (the same
     cores in all); peak RSS of every process with /usr/bin/time;
  3. checks that the reports are equal (but wall_s and the "distributed" block) and records
     the exchange volume per document from the distributed report.
JSON to --out; a markdown row on stdout.
  bench/data/run_dist_bench.py --binary build/bin/trainscope --mb 64 --ranks 2 \
      --out bench/data/results/dev-2core-dist-2rank.json
"""
import argparse, json, os, platform, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))


def run_timed(argv, env, time_files):
    t0 = time.perf_counter()
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    wall = time.perf_counter() - t0
    if p.returncode not in (0, 1):  # 1: the scan found problems over its thresholds
        sys.exit("failed: %s\n%s\n%s" % (" ".join(argv), p.stdout[-2000:], p.stderr[-2000:]))
    rss, cpu = [], 0.0
    for tf in time_files:
        with open(tf) as f:
            last = f.read().split()[-3:]
        rss.append(int(last[0]))
        cpu += float(last[1]) + float(last[2])
    return {"wall_s": wall, "peak_rss_kib": rss, "cpu_s": cpu, "stdout": p.stdout}


def report(text):
    d = json.loads(text)
    d.pop("wall_s", None)
    dist = d.pop("distributed", None)
    return d, dist


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default="build/bin/trainscope")
    ap.add_argument("--mb", type=float, default=64)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2, help="worker threads in all")
    ap.add_argument("--backend", default="gloo")
    ap.add_argument("--workdir", default="/tmp/ts_dist_bench")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--out")
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    corpus = os.path.join(a.workdir, "corpus_%gmb.jsonl" % a.mb)
    if not os.path.exists(corpus):
        subprocess.run([sys.executable, os.path.join(HERE, "make_corpus.py"), "--out", corpus,
                        "--mb", str(a.mb)], check=True, stdout=subprocess.DEVNULL)
    size = os.path.getsize(corpus)
    env = dict(os.environ, TRAINSCOPE_NO_PROGRESS="1")
    binary = os.path.abspath(a.binary)
    per_rank_threads = max(1, a.threads // a.ranks)
    best = {}
    reports = {}
    for rep in range(a.repeat):
        for mode in ("single", "distributed"):
            with tempfile.TemporaryDirectory(dir=a.workdir) as tmp:
                if mode == "single":
                    tf = os.path.join(tmp, "t0")
                    argv = ["/usr/bin/time", "-f", "%M %U %S", "-o", tf, binary, "data", "scan",
                            corpus, "--json", "--threads", str(a.threads)]
                    tfs = [tf]
                else:
                    # Each rank under /usr/bin/time writing its own file (RANK is set by launch).
                    tfs = [os.path.join(tmp, "t%d" % r) for r in range(a.ranks)]
                    inner = ('exec /usr/bin/time -f "%%M %%U %%S" -o %s/t$RANK %s data scan %s '
                             '--json --threads %d --distributed --comm-backend %s' %
                             (tmp, binary, corpus, per_rank_threads, a.backend))
                    argv = [binary, "launch", "-n", str(a.ranks), "-q", "--run-dir",
                            os.path.join(tmp, "run"), "--", "/bin/sh", "-c", inner]
                r = run_timed(argv, env, tfs)
                if mode == "distributed":
                    with open(os.path.join(tmp, "run", "rank0", "stdout.log")) as f:
                        r["stdout"] = f.read()
                reports[mode] = report(r["stdout"])
                if mode not in best or r["wall_s"] < best[mode]["wall_s"]:
                    best[mode] = {k: v for k, v in r.items() if k != "stdout"}
    same = reports["single"][0] == reports["distributed"][0]
    dist = reports["distributed"][1]
    docs = reports["single"][0]["docs"]
    res = {
        "argv": sys.argv,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "corpus": {"bytes": size, "docs": docs},
        "ranks": a.ranks, "threads_total": a.threads, "backend": a.backend,
        "single": best["single"], "distributed": best["distributed"],
        "throughput_mb_s": {m: size / 1e6 / best[m]["wall_s"] for m in best},
        "speedup": best["single"]["wall_s"] / best["distributed"]["wall_s"],
        "peak_rss_mib": {"single": best["single"]["peak_rss_kib"][0] / 1024,
                         "per_rank": [k / 1024 for k in best["distributed"]["peak_rss_kib"]]},
        "exchange_bytes": dist["exchange_bytes"],
        "exchange_bytes_per_doc": dist["exchange_bytes_per_doc"],
        "same_report": same,
    }
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=2)
            f.write("\n")
    print("| %.0f MB, %d docs | single %.1f MB/s, %.0f MiB | %d ranks %.1f MB/s, %s MiB | "
          "%.0f B/doc exchanged | same report: %s |" %
          (size / 1e6, docs, res["throughput_mb_s"]["single"], res["peak_rss_mib"]["single"],
           a.ranks, res["throughput_mb_s"]["distributed"],
           "/".join("%.0f" % x for x in res["peak_rss_mib"]["per_rank"]),
           res["exchange_bytes_per_doc"], same))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
