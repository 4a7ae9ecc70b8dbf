#!/usr/bin/python3
"""Full scan on short real-text documents (issue 12 §2), side by side in one run.

  1. builds (or reuses) a corpus of ~700-byte documents with make_short_corpus.py (--mb);
  2. times, best of --repeat, interleaved: `wc -l` (the read limit); the full scan (near
     duplicates + noise + language, --threads) by `trainscope data scan`, whose main() sets
     the allocator policy, and by `data_scan_bench`, the same library path under glibc's
     default policy (the old behaviour); with --old-binary, a previous `trainscope` build
     too (e.g. a copy of the binary before a change), whose report must also match;
  3. counts madvise calls of each with `strace -c -f` (a separate, untimed run) when strace
     is installed, and checks that both scans print the same report.
Figures are ratios of times from the same run, plus MB/s per CPU-second (robust when the
machine is shared: 2 threads can reach 2x that at best). JSON to --out; markdown rows on stdout.
  bench/data/run_short_bench.py --binary build/bin/trainscope \
      --lib-binary build/bench/data_scan_bench --mb 132 --out short.json
"""
import argparse, json, os, shutil, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))


def timed(argv, env):
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
        t0 = time.perf_counter()
        p = subprocess.run(["/usr/bin/time", "-f", "%M %U %S", "-o", tf.name] + argv,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        wall = time.perf_counter() - t0
        if p.returncode not in (0, 1):  # 1: the scan found problems over its thresholds
            sys.exit("failed: %s\n%s" % (" ".join(argv), p.stderr[-2000:]))
        rss, user, sys_s = tf.read().split()[-3:]
        return {"wall_s": wall, "peak_rss_kib": int(rss), "cpu_s": float(user) + float(sys_s),
                "stdout": p.stdout}


def madvise_calls(argv, env):
    if not shutil.which("strace"):
        return None
    p = subprocess.run(["strace", "-f", "-c", "-e", "trace=madvise", "-o", "/dev/stderr"] + argv,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    for line in p.stderr.splitlines():
        f = line.split()
        if f and f[-1] == "madvise":
            return int(f[3])
    return 0


def report(stdout):
    d = json.loads(stdout)
    d.pop("wall_s", None)
    return d


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default="build/bin/trainscope")
    ap.add_argument("--lib-binary", default="build/bench/data_scan_bench")
    ap.add_argument("--mb", type=float, default=132)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--workdir", default="/tmp/ts_data_bench")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--old-binary", default="", help="a previous trainscope build to time side by side")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    corpus = os.path.join(a.workdir, "short_%gmb.jsonl" % a.mb)
    if not os.path.exists(corpus):
        subprocess.run([sys.executable, os.path.join(HERE, "make_short_corpus.py"), "--out",
                        corpus, "--mb", str(a.mb)], check=True, stdout=subprocess.DEVNULL)
    size = os.path.getsize(corpus)
    with open(corpus, "rb") as f:  # page cache warm-up
        while f.read(1 << 24):
            pass
    env = dict(os.environ, TRAINSCOPE_NO_PROGRESS="1")
    env.pop("GLIBC_TUNABLES", None)
    th = ["--threads", str(a.threads)]
    runs = {
        "wc": ["wc", "-l", corpus],
        "cli": [a.binary, "data", "scan", "--json", "--tmp-dir", a.workdir, corpus] + th,
        "lib_default_malloc": [a.lib_binary, corpus, "--tmp-dir", a.workdir] + th,
    }
    if a.old_binary:
        runs["old_cli"] = [a.old_binary, "data", "scan", "--json", "--tmp-dir", a.workdir, corpus] + th
    res = {k: [] for k in runs}
    for _ in range(a.repeat):  # interleaved, so load changes hit every variant alike
        for k, argv in runs.items():
            res[k].append(timed(argv, env))
    best = {k: min(v, key=lambda r: r["wall_s"]) for k, v in res.items()}
    same = report(best["cli"]["stdout"]) == report(best["lib_default_malloc"]["stdout"])
    docs = json.loads(best["cli"]["stdout"])["docs"]
    fig = {
        "corpus_bytes": size, "docs": docs, "same_report": same,
        "wc_mb_s": size / 1e6 / best["wc"]["wall_s"],
        "cli_mb_s": size / 1e6 / best["cli"]["wall_s"],
        "lib_default_malloc_mb_s": size / 1e6 / best["lib_default_malloc"]["wall_s"],
        "cli_vs_default_malloc": best["lib_default_malloc"]["wall_s"] / best["cli"]["wall_s"],
        "cli_share_of_wc": best["wc"]["wall_s"] / best["cli"]["wall_s"],
        "cli_mb_per_cpu_s": size / 1e6 / best["cli"]["cpu_s"],
        "lib_default_malloc_mb_per_cpu_s": size / 1e6 / best["lib_default_malloc"]["cpu_s"],
        "cli_peak_rss_mib": best["cli"]["peak_rss_kib"] / 1024,
        "lib_default_malloc_peak_rss_mib": best["lib_default_malloc"]["peak_rss_kib"] / 1024,
        "madvise_cli": madvise_calls(runs["cli"], env),
        "madvise_default_malloc": madvise_calls(runs["lib_default_malloc"], env),
        "load_avg": os.getloadavg(),
    }
    if a.old_binary:
        fig.update({
            "old_cli_same_report": report(best["cli"]["stdout"]) == report(best["old_cli"]["stdout"]),
            "old_cli_mb_s": size / 1e6 / best["old_cli"]["wall_s"],
            "old_cli_mb_per_cpu_s": size / 1e6 / best["old_cli"]["cpu_s"],
            "cli_vs_old_cli_wall": best["old_cli"]["wall_s"] / best["cli"]["wall_s"],
            "cli_vs_old_cli_cpu": best["old_cli"]["cpu_s"] / best["cli"]["cpu_s"],
            "old_cli_peak_rss_mib": best["old_cli"]["peak_rss_kib"] / 1024,
        })
    out = {"argv": sys.argv, "times": {k: [{x: r[x] for x in ("wall_s", "peak_rss_kib", "cpu_s")}
                                           for r in v] for k, v in res.items()},
           "figures": fig}
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=2)
    print(json.dumps(fig, indent=2))
    print("\n| figure | value |\n|---|---|")
    print("| full scan, %d threads, short documents (%d docs, %.0f MB) | %.0f MB/s (%.1f%% of wc -l at %.0f MB/s) |"
          % (a.threads, docs, size / 1e6, fig["cli_mb_s"], 100 * fig["cli_share_of_wc"], fig["wc_mb_s"]))
    print("| ... vs glibc's default allocator policy (same library, same run) | %.2fx (%.0f MB/s) |"
          % (fig["cli_vs_default_malloc"], fig["lib_default_malloc_mb_s"]))
    print("| ... per CPU-second: new / old policy | %.0f / %.0f MB/s |"
          % (fig["cli_mb_per_cpu_s"], fig["lib_default_malloc_mb_per_cpu_s"]))
    print("| ... madvise calls: new / old policy | %s / %s |" % (fig["madvise_cli"], fig["madvise_default_malloc"]))
    if a.old_binary:
        print("| ... vs --old-binary: wall / per CPU-second | %.0f vs %.0f MB/s (%.2fx) / %.1f vs %.1f MB/s (%.2fx); same report: %s |"
              % (fig["cli_mb_s"], fig["old_cli_mb_s"], fig["cli_vs_old_cli_wall"], fig["cli_mb_per_cpu_s"],
                 fig["old_cli_mb_per_cpu_s"], fig["cli_vs_old_cli_cpu"], fig["old_cli_same_report"]))


if __name__ == "__main__":
    main()
