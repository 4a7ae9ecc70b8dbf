#!/usr/bin/python3
"""Data-module performance benchmark: every figure is measured side by side in one run.

  1. builds (or reuses) a realistic corpus with make_corpus.py (--mb MB) and its first half;
  2. times `wc -l` (the read limit), `trainscope data scan --exact-only` (exact duplicates +
     all statistics, no noise rules / language id / MinHash) on 1 and 2 threads,
     `--no-near-dup` (the same plus every noise rule and CLD2: "full rules") on 1 and 2
     threads, and the full scan with MinHash near duplicates (14 bands x 8 rows = 112
     permutations) on 1 and 2 threads; best of --repeat runs;
  3. measures peak RSS (GNU time %M) of the full scan on the whole and on the half corpus:
     (RSS_full - RSS_half) / (docs_full - docs_half) is the memory per document, free of
     fixed buffers.
Writes JSON (argv, versions, raw times, figures) to --out and prints the markdown rows of
docs/PERFORMANCE.md. Usage:
  bench/data/run_bench.py --binary build/bin/trainscope --mb 512 --out /tmp/data_bench.json
"""
import argparse, json, os, platform, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))


def timed(argv, env):
    """Returns (wall_s, peak_rss_kib, stdout, cpu_s) of one run under GNU time."""
    # Wall time from perf_counter around the run (GNU time's %e has 10 ms steps: too coarse
    # for wc -l on a few hundred MB); peak RSS and CPU time from GNU time.
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
        t0 = time.perf_counter()
        p = subprocess.run(["/usr/bin/time", "-f", "%e %M %U %S", "-o", tf.name] + argv,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        wall = time.perf_counter() - t0
        if p.returncode != 0:
            sys.exit("failed: %s\n%s" % (" ".join(argv), p.stderr[-2000:]))
        _, rss, user, sys_s = tf.read().split()[-4:]
        return wall, int(rss), p.stdout, float(user) + float(sys_s)


def best(argv, env, repeat):
    runs = [timed(argv, env) for _ in range(repeat)]
    return min(runs, key=lambda r: r[0])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default="build/bin/trainscope")
    ap.add_argument("--mb", type=float, default=512)
    ap.add_argument("--workdir", default="/tmp/ts_data_bench")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    corpus = os.path.join(a.workdir, "corpus_%gmb.jsonl" % a.mb)
    half = os.path.join(a.workdir, "corpus_%gmb_half.jsonl" % a.mb)
    if not os.path.exists(corpus):
        subprocess.run([sys.executable, os.path.join(HERE, "make_corpus.py"), "--out", corpus,
                        "--mb", str(a.mb)], check=True, stdout=subprocess.DEVNULL)
    if not os.path.exists(half):
        with open(corpus, "rb") as f:
            lines = f.readlines()
        with open(half, "wb") as f:
            f.writelines(lines[: len(lines) // 2])
    size = os.path.getsize(corpus)
    env = dict(os.environ, TRAINSCOPE_NO_PROGRESS="1")
    for p in (corpus, half):  # page cache warm-up
        with open(p, "rb") as f:
            while f.read(1 << 24):
                pass
    b = a.binary
    scan = [b, "data", "scan", "--json", "--tmp-dir", a.workdir]
    res = {}
    res["wc"] = best(["wc", "-l", corpus], env, a.repeat)
    res["exact_t1"] = best(scan + [corpus, "--exact-only", "--threads", "1"], env, a.repeat)
    res["exact_t2"] = best(scan + [corpus, "--exact-only", "--threads", "2"], env, a.repeat)
    res["rules_t1"] = best(scan + [corpus, "--no-near-dup", "--threads", "1"], env, max(1, a.repeat - 1))
    res["rules_t2"] = best(scan + [corpus, "--no-near-dup", "--threads", "2"], env, a.repeat)
    res["near_t1"] = best(scan + [corpus, "--threads", "1"], env, max(1, a.repeat - 1))
    res["near_t2"] = best(scan + [corpus, "--threads", "2"], env, max(1, a.repeat - 1))
    res["near_t2_half"] = best(scan + [half, "--threads", "2"], env, 1)
    full = json.loads(res["near_t2"][2])
    halfj = json.loads(res["near_t2_half"][2])
    mbps = lambda k: size / 1e6 / res[k][0]
    # Throughput per CPU-second: robust when the machine is shared (load average above the
    # core count makes wall times meaningless); N threads can reach N x this at best.
    cpu_mbps = lambda k: size / 1e6 / max(1e-9, res[k][3])
    docs, docs_half = full["docs"], halfj["docs"]
    per_doc = (res["near_t2"][1] - res["near_t2_half"][1]) * 1024 / max(1, docs - docs_half)
    fig = {
        "corpus_bytes": size, "docs": docs,
        "wc_mb_s": mbps("wc"),
        "exact_stats_t1_mb_s": mbps("exact_t1"), "exact_stats_t2_mb_s": mbps("exact_t2"),
        "exact_stats_t2_vs_wc": res["wc"][0] / res["exact_t2"][0],
        "exact_stats_t2_vs_t1": res["exact_t1"][0] / res["exact_t2"][0],
        "rules_t1_mb_s": mbps("rules_t1"), "rules_t2_mb_s": mbps("rules_t2"),
        "rules_t2_vs_wc": res["wc"][0] / res["rules_t2"][0],
        "rules_t2_vs_t1": res["rules_t1"][0] / res["rules_t2"][0],
        "near_t1_mb_s": mbps("near_t1"), "near_t2_mb_s": mbps("near_t2"),
        "near_t2_vs_t1": res["near_t1"][0] / res["near_t2"][0],
        "near_t2_vs_wc": res["wc"][0] / res["near_t2"][0],
        "peak_rss_full_mib": res["near_t2"][1] / 1024, "peak_rss_half_mib": res["near_t2_half"][1] / 1024,
        "bytes_per_doc_marginal": per_doc,
        "wc_mb_per_cpu_s": cpu_mbps("wc"), "exact_stats_mb_per_cpu_s": cpu_mbps("exact_t2"),
        "rules_mb_per_cpu_s": cpu_mbps("rules_t2"), "near_mb_per_cpu_s": cpu_mbps("near_t2"),
        "exact_duplicate_docs": full["exact_duplicate_docs"], "near_duplicate_docs": full["near_duplicate_docs"],
    }
    ver = subprocess.run([b, "--version"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         text=True).stdout.strip()  # data_scan_bench has none: the commit below
    commit = subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout.strip()
    cpu = ""
    try:
        cpu = [l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")][0]
    except (OSError, IndexError):
        pass
    out = {"argv": sys.argv, "versions": {"trainscope": ver, "commit": commit, "python": platform.python_version(),
                                          "cpu": cpu, "nproc": os.cpu_count(),
                                          "load_avg": os.getloadavg()},
           "times": {k: {"wall_s": v[0], "peak_rss_kib": v[1], "cpu_s": v[3]} for k, v in res.items()},
           "figures": fig}
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=2)
    print(json.dumps(fig, indent=2))
    print("\n| figure | value | target |\n|---|---|---|")
    print("| exact dup + all statistics (`--exact-only`), 2 threads | %.0f MB/s | >= 150 MB/s |" % fig["exact_stats_t2_mb_s"])
    print("| ... as a share of `wc -l` on the same file | %.0f%% (wc: %.0f MB/s) | >= 30%% |"
          % (100 * fig["exact_stats_t2_vs_wc"], fig["wc_mb_s"]))
    print("| ... 2 threads vs 1 thread | %.2fx (1 thread: %.0f MB/s) | |" % (fig["exact_stats_t2_vs_t1"], fig["exact_stats_t1_mb_s"]))
    print("| exact dup + statistics + all noise rules + CLD2 (`--no-near-dup`), 2 threads | %.0f MB/s (%.1f%% of wc -l) | |"
          % (fig["rules_t2_mb_s"], 100 * fig["rules_t2_vs_wc"]))
    print("| ... 2 threads vs 1 thread | %.2fx (1 thread: %.0f MB/s) | |" % (fig["rules_t2_vs_t1"], fig["rules_t1_mb_s"]))
    print("| near dup (112 perms) + all statistics, 2 threads | %.0f MB/s | >= 25 MB/s |" % fig["near_t2_mb_s"])
    print("| ... 2 threads vs 1 thread | %.2fx (1 thread: %.0f MB/s) | |" % (fig["near_t2_vs_t1"], fig["near_t1_mb_s"]))
    print("| per CPU-second: wc -l / exact+stats / full rules / near dup | %.0f / %.0f / %.0f / %.0f MB/s | |"
          % (fig["wc_mb_per_cpu_s"], fig["exact_stats_mb_per_cpu_s"], fig["rules_mb_per_cpu_s"],
             fig["near_mb_per_cpu_s"]))
    print("| memory per document (marginal, full vs half corpus) | %.0f bytes | <= 200 bytes |" % per_doc)
    print("| peak RSS, %d docs | %.0f MiB | |" % (docs, fig["peak_rss_full_mib"]))


if __name__ == "__main__":
    main()
