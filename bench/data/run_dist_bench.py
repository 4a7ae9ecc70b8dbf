#!/usr/bin/python3
"""Distributed scan (issue 20) against the single-process scan, side by side in one run.

  1. builds (or reuses) a corpus with make_corpus.py (--mb, planted exact and near duplicates);
  2. times, interleaved, best of --repeat: the single-process full scan with --threads T, and
     `trainscope launch -n R -- trainscope data scan --distributed --threads T/R` (the same
     cores in all); peak RSS of every process with /usr/bin/time;
  3. checks that the reports are equal (but wall_s and the "distributed" block) and records
     the exchange volume per document from the distributed report.
With --veth (root: CAP_NET_ADMIN + CAP_SYS_ADMIN; 2 ranks), also the two-node set-up of
src/data/two_node_scan_test.sh in the same interleaving: two network namespaces joined by a
veth pair, node 0 and node 1 each `trainscope launch -n 1 --nnodes 2` of the distributed scan
(each launcher pinned to its own CPU, as `launch -n 2` pins its ranks), so every exchange
crosses the veth; once per --rate (tc tbf on both ends; "unlimited": no qdisc). Records the
bytes the veth carried (both directions, TCP/IP headers and the rendezvous included) and that
volume's time at the --rate. The namespaces (unique names) are removed on exit, on an error
and on SIGINT/SIGTERM/SIGHUP.
JSON to --out; a markdown row per distributed mode on stdout.
  bench/data/run_dist_bench.py --binary build/bin/trainscope --mb 64 --ranks 2 \
      --out bench/data/results/dev-2core-dist-2rank.json
  bench/data/run_dist_bench.py --binary build/bin/trainscope --mb 64 --repeat 2 \
      --veth --rate unlimited --rate 1gbit --rate 100mbit --rate 20mbit \
      --out bench/data/results/dist_veth_2rank_64mb.json
"""
import argparse, json, os, platform, re, signal, subprocess, sys, tempfile, time

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


def rate_bits(rate):
    """tc rate ("1gbit", "500mbit", "10gbit") in bit/s; None for "unlimited"."""
    if rate in ("unlimited", "none", "0"):
        return None
    m = re.fullmatch(r"([0-9.]+)([kmg]?)bit", rate.lower())
    if not m:
        sys.exit("--rate: expected e.g. 1gbit, 500mbit or unlimited, got %r" % rate)
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]


class VethBed:
    """Two network namespaces joined by a veth pair (as src/data/two_node_scan_test.sh)."""

    def __init__(self):
        tag = os.getpid()
        self.ns = ["tsdb%d_a" % tag, "tsdb%d_b" % tag]
        self.dev = ["tsdb%da" % tag, "tsdb%db" % tag]  # interface names: 15 characters at most
        net = tag % 200 + 20
        self.addr = ["10.216.%d.1" % net, "10.216.%d.2" % net]
        self.made = []

    def ip(self, *args):
        subprocess.run(["ip"] + list(args), check=True, stdout=subprocess.DEVNULL)

    def up(self):
        for ns in self.ns:
            self.ip("netns", "add", ns)
            self.made.append(ns)
        self.ip("link", "add", self.dev[0], "type", "veth", "peer", "name", self.dev[1])
        for i in (0, 1):
            self.ip("link", "set", self.dev[i], "netns", self.ns[i])
            self.ip("-n", self.ns[i], "addr", "add", self.addr[i] + "/24", "dev", self.dev[i])
            self.ip("-n", self.ns[i], "link", "set", "lo", "up")
            self.ip("-n", self.ns[i], "link", "set", self.dev[i], "up")

    def shape(self, rate):
        bits = rate_bits(rate)
        for i in (0, 1):
            subprocess.run(["tc", "-n", self.ns[i], "qdisc", "del", "dev", self.dev[i], "root"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if bits:  # burst: 4 ms at the rate, at least 64 KiB (a GSO packet)
                burst = max(65536, int(bits / 8 / 250))
                subprocess.run(["tc", "-n", self.ns[i], "qdisc", "add", "dev", self.dev[i], "root",
                                "tbf", "rate", rate, "burst", str(burst), "latency", "100ms"],
                               check=True)

    def bytes(self):
        """Bytes sent by each end so far."""
        out = []
        for i in (0, 1):
            j = json.loads(subprocess.run(["ip", "-n", self.ns[i], "-j", "-s", "link", "show",
                                           "dev", self.dev[i]], check=True, text=True,
                                          stdout=subprocess.PIPE).stdout)
            out.append(j[0]["stats64"]["tx"]["bytes"])
        return out

    def down(self):
        for ns in self.made:  # deleting a namespace deletes its veth end, and so the pair
            subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)
        self.made = []
        subprocess.run(["ip", "link", "del", self.dev[0]],  # a pair left outside (failed set-up)
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run_veth(bed, binary, corpus, threads, backend, tmp, env, port, procs):
    """The distributed scan with one rank in each namespace; like run_timed."""
    env = dict(env, TRAINSCOPE_JOB_TOKEN=os.urandom(16).hex())
    inner = ('exec /usr/bin/time -f "%%M %%U %%S" -o %s/t$RANK %s data scan %s --json '
             '--threads %d --distributed --comm-backend %s --comm-timeout 300' %
             (tmp, binary, corpus, threads, backend))
    ncpu = os.cpu_count() or 1
    before = bed.bytes()
    t0 = time.perf_counter()
    for node in (0, 1):
        argv = ["ip", "netns", "exec", bed.ns[node], "taskset", "-c", str(node % ncpu),
                "timeout", "600", binary, "launch", "-n", "1", "--nnodes", "2",
                "--node-rank", str(node), "--master-addr", bed.addr[0], "--master-port",
                str(port), "--stop-grace-s", "2", "-q", "--run-dir",
                os.path.join(tmp, "n%d" % node), "--", "/bin/sh", "-c", inner]
        procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, env=env))
    outs = [p.communicate()[0] for p in procs]
    wall = time.perf_counter() - t0
    sent = [b - a for a, b in zip(before, bed.bytes())]
    rcs = [p.returncode for p in procs]
    del procs[:]
    if any(rc not in (0, 1) for rc in rcs):
        sys.exit("veth run failed (exit %s):\n%s" % (rcs, "\n".join(o[-2000:] for o in outs)))
    rss, cpu = [], 0.0
    for r in (0, 1):
        with open(os.path.join(tmp, "t%d" % r)) as f:
            last = f.read().split()[-3:]
        rss.append(int(last[0]))
        cpu += float(last[1]) + float(last[2])
    with open(os.path.join(tmp, "n0", "rank0", "stdout.log")) as f:
        stdout = f.read()
    return {"wall_s": wall, "peak_rss_kib": rss, "cpu_s": cpu, "veth_tx_bytes": sent,
            "stdout": stdout}


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
    ap.add_argument("--veth", action="store_true",
                    help="also run the 2 ranks in two network namespaces over a veth pair (root)")
    ap.add_argument("--rate", action="append",
                    help="with --veth: tc rate of the link, e.g. 1gbit, or unlimited (the "
                         "default); repeat for several, each its own interleaved mode")
    ap.add_argument("--out")
    a = ap.parse_args()
    if a.veth and a.ranks != 2:
        sys.exit("--veth runs one rank per namespace: --ranks 2 only")
    rates = a.rate or ["unlimited"]
    for r in rates:
        rate_bits(r)
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
    modes = ["single", "distributed"] + (["veth:" + r for r in rates] if a.veth else [])
    bed, procs = None, []

    def stop(signum, frame):
        raise SystemExit("stopped by signal %d" % signum)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop)
    try:
        if a.veth:
            bed = VethBed()
            try:
                bed.up()
            except (subprocess.CalledProcessError, OSError) as e:
                sys.exit("--veth: cannot set up the network namespaces (%s); run as root with "
                         "CAP_NET_ADMIN and CAP_SYS_ADMIN" % e)
        run_all(a, modes, bed, procs, corpus, binary, env, per_rank_threads, best, reports)
    finally:
        for p in procs:  # launchers still running (an error or a signal): stop them first
            if p.poll() is None:
                p.terminate()  # timeout(1) passes it on to the launcher, which stops its rank
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        if bed:
            bed.down()
    return summarise(a, rates, size, best, reports)


def run_all(a, modes, bed, procs, corpus, binary, env, per_rank_threads, best, reports):
    port = 29600 + os.getpid() % 300
    for rep in range(a.repeat):
        for mode in modes:
            with tempfile.TemporaryDirectory(dir=a.workdir) as tmp:
                if mode.startswith("veth:"):
                    bed.shape(mode[5:])
                    port += 1  # a fresh rendezvous port per run (no TIME_WAIT reuse)
                    r = run_veth(bed, binary, corpus, per_rank_threads, a.backend, tmp, env,
                                 port, procs)
                elif mode == "single":
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
                if mode == "single" or mode == "distributed":
                    r = run_timed(argv, env, tfs)
                if mode == "distributed":
                    with open(os.path.join(tmp, "run", "rank0", "stdout.log")) as f:
                        r["stdout"] = f.read()
                reports[mode] = report(r["stdout"])
                if mode not in best or r["wall_s"] < best[mode]["wall_s"]:
                    best[mode] = {k: v for k, v in r.items() if k != "stdout"}


def summarise(a, rates, size, best, reports):
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
    rows = []
    if a.veth:
        res["veth"] = {}
        for r in rates:
            m = "veth:" + r
            b, d = best[m], reports[m][1]
            same_m = reports["single"][0] == reports[m][0]
            same = same and same_m
            bits = rate_bits(r)
            v = {"rate": r, "wall_s": b["wall_s"], "peak_rss_kib": b["peak_rss_kib"],
                 "cpu_s": b["cpu_s"], "throughput_mb_s": size / 1e6 / b["wall_s"],
                 "speedup": best["single"]["wall_s"] / b["wall_s"],
                 "peak_rss_mib_per_rank": [k / 1024 for k in b["peak_rss_kib"]],
                 "exchange_bytes": d["exchange_bytes"],
                 "exchange_bytes_per_doc": d["exchange_bytes_per_doc"],
                 "veth_tx_bytes": b["veth_tx_bytes"],
                 "veth_bytes_per_doc": sum(b["veth_tx_bytes"]) / docs,
                 "minus_loopback_wall_s": b["wall_s"] - best["distributed"]["wall_s"],
                 "same_report": same_m}
            if bits:  # the busier direction's bytes at the link rate: the exchange's floor
                v["wire_time_at_rate_s"] = max(b["veth_tx_bytes"]) * 8 / bits
            res["veth"][r] = v
            rows.append("| %.0f MB, %d docs | single %.1f MB/s, %.0f MiB | 2 ranks over veth (%s) "
                        "%.1f MB/s, %s MiB | %.0f B/doc exchanged, %.0f B/doc on the veth | "
                        "same report: %s |" %
                        (size / 1e6, docs, res["throughput_mb_s"]["single"],
                         res["peak_rss_mib"]["single"], r, v["throughput_mb_s"],
                         "/".join("%.0f" % x for x in v["peak_rss_mib_per_rank"]),
                         v["exchange_bytes_per_doc"], v["veth_bytes_per_doc"], same_m))
        res["same_report"] = same
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=2)
            f.write("\n")
    print("| %.0f MB, %d docs | single %.1f MB/s, %.0f MiB | %d ranks %.1f MB/s, %s MiB | "
          "%.0f B/doc exchanged | same report: %s |" %
          (size / 1e6, docs, res["throughput_mb_s"]["single"], res["peak_rss_mib"]["single"],
           a.ranks, res["throughput_mb_s"]["distributed"],
           "/".join("%.0f" % x for x in res["peak_rss_mib"]["per_rank"]),
           res["exchange_bytes_per_doc"], reports["single"][0] == reports["distributed"][0]))
    for row in rows:
        print(row)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
